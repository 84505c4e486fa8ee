"""etc/job_submit.lua run by Lua 5.1 outside slurmctld (tests/unit/lua/harness.lua):
the rewrite, the profiling mark, and every fault passing jobs through unchanged.

The same shim inside a real slurmctld is tested in tests/integration/test_plugin.py.
"""

import os
import shutil
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from slurm_synergy.model.engine import NodeShape
from slurm_synergy.model.policy import Policy
from slurm_synergy.decisions.table import TABLE_NAME, render

from .test_decisions_table import decision

ROOT = Path(__file__).resolve().parents[2]
HARNESS = Path(__file__).parent / "lua" / "harness.lua"
LUA = shutil.which("lua5.1")
FP = "0123456789abcdef"
UID = 1000          # the harness submits every job as uid 1000
OURS = {"name": "j", "comment": f"synergy:fp={FP} req=cpus,mem", "cpus_per_task": "2",
        "min_cpus": "2", "pn_min_cpus": "2", "pn_min_memory": "3072",
        "tres_per_node": "gres:gpu:2"}


def run(tmp_path: Path, jobs: list[dict], table: str | Callable[[Path], None] | None,
        partitions: str = "gpu:16:1:1") -> tuple[list[dict], list[str]]:
    """Submit `jobs` through the shim with `table` at its path (text, or a function that
    makes something there); the harness is killed, and the test fails, if it hangs."""
    assert LUA, "lua5.1 is missing: make setup installs it"
    shutil.copy(ROOT / "etc" / "job_submit.lua", tmp_path / "job_submit.lua")
    if callable(table):
        table(tmp_path / TABLE_NAME)
    elif table is not None:
        (tmp_path / TABLE_NAME).write_text(table)
    spec = tmp_path / "jobs.txt"
    spec.write_text("\n\n".join("\n".join(f"{k}={v}" for k, v in job.items()) for job in jobs))
    proc = subprocess.run([LUA, str(HARNESS), str(tmp_path / "job_submit.lua"), str(spec),
                           partitions],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out, logs = [], []
    for line in proc.stdout.splitlines():
        if line.startswith("JOB "):
            out.append({"rc": line.split("rc=")[1]})
        elif line.startswith("LOG "):
            logs.append(line[4:])
        else:
            key, _, value = line.partition("=")
            out[-1][key] = value
    return out, logs


DEFAULT_SHAPE = NodeShape(16, 64000, 4)


def table(*decisions, policy: Policy | None = None, shape: NodeShape = DEFAULT_SHAPE,
          partition: str = "") -> str:
    return render([(UID, d) for d in decisions], policy or Policy(), shape, partition)


def unchanged(job: dict) -> bool:
    return all(job[k] == v for k, v in OURS.items()) and not any(
        k.startswith("env.") for k in job)


def test_a_decided_job_is_rewritten_and_told_its_workers(tmp_path):
    (job,), logs = run(tmp_path, [OURS], table(decision(FP, cpus=5, mem_mb=1280, gpus=1,
                                                         workers=4, power_limit_w=250)))
    assert job["rc"] == "0"
    assert (job["cpus_per_task"], job["min_cpus"], job["pn_min_cpus"]) == ("5", "5", "5")
    assert job["pn_min_memory"] == "1280" and job["tres_per_node"] == "gres:gpu:1"
    assert job["env.SYNERGY_WORKERS"] == "4" and job["env.SYNERGY_POWER_LIMIT_W"] == "250"
    # The request as asked is kept beside the decision, for reports.
    assert job["comment"] == (f"synergy:fp={FP} req=cpus,mem asked=c2,m3072,g2 "
                              "decision=c5,m1280,g1,w4,p250")
    assert any("cpus 2, mem 3072 MB, gres:gpu:2 -> cpus 5" in line for line in logs)


def test_the_gpu_type_the_job_asked_for_is_kept(tmp_path):
    (job,), _ = run(tmp_path, [dict(OURS, tres_per_node="gres:gpu:a100:2")],
                    table(decision(FP, gpus=1)))
    assert job["tres_per_node"] == "gres:gpu:a100:1"


def test_another_users_decision_for_the_same_workload_sizes_none_of_this_users_jobs(tmp_path):
    # Uid 1001 profiled (or forged a profile of) this workload; uid 1000 submits it.
    theirs = render([(UID + 1, decision(FP, cpus=1, mem_mb=100, gpus=0))], Policy(),
                    DEFAULT_SHAPE)
    (job,), logs = run(tmp_path, [OURS], theirs)
    assert (job["cpus_per_task"], job["pn_min_memory"], job["tres_per_node"]) == (
        "2", "3072", "gres:gpu:2")
    # This user's own first job of it is measured, as for a workload nobody measured.
    assert job["env.SYNERGY_PROFILE"] == "1" and job["comment"].endswith(" profile=1")


def test_without_a_decision_the_job_is_marked_for_profiling(tmp_path):
    other = "fedcba9876543210"
    jobs, _ = run(tmp_path, [OURS, dict(OURS, **{"env.SYNERGY_PROFILE": "0"})],
                  table(decision(other)))
    assert jobs[0]["env.SYNERGY_PROFILE"] == "1" and jobs[0]["comment"].endswith(" profile=1")
    assert jobs[0]["cpus_per_task"] == "2"
    # A job that said SYNERGY_PROFILE=0 itself (a resubmission, --no-profile) is not.
    assert jobs[1]["env.SYNERGY_PROFILE"] == "0" and jobs[1]["comment"] == OURS["comment"]


def test_site_policy_can_turn_profiling_off(tmp_path):
    (job,), _ = run(tmp_path, [OURS], table(policy=Policy(profile_new=False)))
    assert unchanged(job)


def test_site_policy_can_let_the_users_request_win(tmp_path):
    (job,), _ = run(tmp_path, [OURS], table(decision(FP, cpus=5, mem_mb=1280, gpus=1),
                                            policy=Policy(user_request_wins=True)))
    # req=cpus,mem: those stay; the GPUs were not pinned.
    assert (job["cpus_per_task"], job["pn_min_memory"]) == ("2", "3072")
    assert job["tres_per_node"] == "gres:gpu:1"


@pytest.mark.parametrize("comment", ["", "someone else's job", "synergy:fp=0123",
                                     "synergy:fp=0123456789ABCDEF"])
def test_other_jobs_are_left_alone(tmp_path, comment):
    job = dict(OURS, comment=comment) if comment else {k: v for k, v in OURS.items()
                                                       if k != "comment"}
    (out,), logs = run(tmp_path, [job], table(decision(FP)))
    assert all(out.get(k) == v for k, v in job.items()) and not any(
        k.startswith("env.") for k in out)


def test_multi_task_jobs_are_left_as_asked(tmp_path):
    (job,), logs = run(tmp_path, [dict(OURS, num_tasks="4")], table(decision(FP, cpus=5)))
    assert job["cpus_per_task"] == "2" and any("more than one task" in line for line in logs)


HOSTILE = {
    "missing": None,
    "empty": "",
    "not a table": "hello\n",
    "header out of range": f"synergy-decisions 3 gen=ab user_wins=0 profile_new=1 "
                           f"max_cpus=999999999 max_mem_mb=1 max_gpus=1 entries=1\n"
                           f"{UID} {FP} 2 1024 1 - 1 0 1\n",
    "negative cores": None,
    "10^12 MB": None,
    "gres injection": None,
    "count mismatch": None,
    "huge file": None,
}


def hostile(kind: str) -> str | None:
    head = ("synergy-decisions 3 gen=abc user_wins=0 profile_new=1 max_cpus=16 "
            "max_mem_mb=64000 max_gpus=4 entries=1\n")
    lines = {"negative cores": f"{UID} {FP} -4 1024 1 - 1 0 1\n",
             "10^12 MB": f"{UID} {FP} 2 1000000000000 1 - 1 0 1\n",
             "gres injection": f'{UID} {FP} 2 1024 1 a100";os.execute("id") 1 0 1\n',
             "count mismatch": f"{UID} {FP} 2 1024 1 - 1 0 1\n{UID} {FP} 2 1024 1 - 1 0 1\n"}
    if kind in lines:
        return head + lines[kind]
    if kind == "huge file":
        return head + "#" * (17 * 1024 * 1024)
    return HOSTILE[kind]


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_a_missing_corrupt_or_hostile_table_passes_every_job_unchanged(tmp_path, kind):
    jobs, logs = run(tmp_path, [OURS, OURS], hostile(kind))
    assert all(j["rc"] == "0" and unchanged(j) for j in jobs)
    faults = [line for line in logs if line.startswith("error slurm-synergy")]
    assert faults and all("pass through unchanged" in f for f in faults), logs
    assert len(faults) == 1, "a lasting fault is logged once, not per job"


def test_a_lua_error_midway_puts_the_job_back_and_is_logged(tmp_path):
    (job,), logs = run(tmp_path, [dict(OURS, fail_on="tres_per_node")],
                       table(decision(FP, cpus=5, mem_mb=1280, gpus=1)))
    assert job["rc"] == "0"
    assert (job["cpus_per_task"], job["pn_min_memory"], job["tres_per_node"]) == (
        "2", "3072", "gres:gpu:2")
    assert any("error in job_submit.lua" in line and "refused to set tres_per_node" in line
               for line in logs)


def test_the_table_is_read_once_until_it_changes(tmp_path):
    jobs, logs = run(tmp_path, [OURS, OURS, OURS], table(decision(FP, cpus=3)))
    assert [j["cpus_per_task"] for j in jobs] == ["3", "3", "3"]
    assert sum("loaded decision table" in line for line in logs) == 1


def test_a_job_without_an_environment_is_resized_but_not_told(tmp_path):
    (job,), logs = run(tmp_path, [dict(OURS, no_env="1")], table(decision(FP, cpus=3)))
    assert job["cpus_per_task"] == "3" and not any(k.startswith("env.") for k in job)
    unmarked, _ = run(tmp_path, [dict(OURS, no_env="1")], table())
    assert unchanged(unmarked[0])


@pytest.mark.parametrize("extra,why", [
    ({"partition": "other"}, "partition other"),
    ({"cpus_per_tres": "gres:gpu:4"}, "cpus_per_tres is set"),
    ({"mem_per_tres": "gres:gpu:4096"}, "mem_per_tres is set"),
    ({"ntasks_per_node": "2"}, "more than one task"),
])
def test_jobs_the_decision_does_not_fit_are_left_as_asked(tmp_path, extra, why):
    (job,), logs = run(tmp_path, [dict(OURS, **extra)], table(decision(FP, cpus=5),
                                                             partition="gpu"))
    assert all(job[k] == v for k, v in OURS.items()), job
    assert any(why in line for line in logs), logs


def test_the_tables_partition_is_the_jobs_default(tmp_path):
    jobs, _ = run(tmp_path, [OURS, dict(OURS, partition="gpu"), dict(OURS, ntasks_per_node=
                  "65534")], table(decision(FP, cpus=5), partition="gpu"))
    assert [j["cpus_per_task"] for j in jobs] == ["5", "5", "5"]


def test_pinned_cores_keep_their_workers_and_the_comment_tells_the_truth(tmp_path):
    (job,), _ = run(tmp_path, [dict(OURS, comment=f"synergy:fp={FP} req=cpus,gpus")],
                    table(decision(FP, cpus=5, mem_mb=1280, gpus=1, workers=4),
                          policy=Policy(user_request_wins=True)))
    assert job["cpus_per_task"] == "2" and job["env.SYNERGY_WORKERS"] == "1"
    assert job["tres_per_node"] == "gres:gpu:2" and job["pn_min_memory"] == "1280"
    assert job["comment"].endswith("decision=c2,m1280,g2,w1")


PLAIN = {"name": "plain", "cpus_per_task": "2", "min_cpus": "2", "pn_min_cpus": "2",
         "pn_min_memory": "3072", "tres_per_node": "gres:gpu:2"}


def fifo(path: Path) -> None:
    os.mkfifo(path)


@pytest.mark.parametrize("make,why", [
    (fifo, "is not a regular file"),
    (Path.mkdir, "is not a regular file"),
    (lambda p: p.write_bytes(os.urandom(4096)), "is not a version 3 decision table"),
])
def test_a_fifo_directory_or_noise_at_the_tables_path_blocks_nothing(tmp_path, make, why):
    # A FIFO would block an open() without O_NONBLOCK for ever; run() would time out.
    jobs, logs = run(tmp_path, [PLAIN, OURS, OURS], make)
    assert all(j["rc"] == "0" for j in jobs)
    assert all(jobs[0].get(k) == v for k, v in PLAIN.items()) and unchanged(jobs[1])
    faults = [line for line in logs if line.startswith("error slurm-synergy")]
    assert len(faults) == 1 and why in faults[0], logs
    assert "bytes" not in faults[0]


@pytest.mark.parametrize("there", [fifo, table(decision(FP, cpus=5))], ids=["fifo", "table"])
def test_plain_jobs_never_look_at_the_table(tmp_path, there):
    jobs, logs = run(tmp_path, [PLAIN, dict(PLAIN, comment="someone else's")], there)
    assert all(j["rc"] == "0" and j["cpus_per_task"] == "2" for j in jobs)
    assert not [line for line in logs if "loaded decision table" in line
                or line.startswith("error")], logs


def test_a_gpu_type_the_partition_lacks_is_not_written(tmp_path):
    tbl = table(decision(FP, cpus=5, gpus=1, gpu_type="h100"),
                shape=NodeShape(16, 64000, 4, ("a100",)))
    (job,), logs = run(tmp_path, [OURS], tbl)
    assert unchanged(job)
    assert any("GPU type h100 is not in partition gpu" in line for line in logs), logs
    (typed,), _ = run(tmp_path, [OURS], table(decision(FP, cpus=5, gpus=1, gpu_type="a100"),
                                              shape=NodeShape(16, 64000, 4, ("a100",))))
    assert typed["tres_per_node"] == "gres:gpu:a100:1"


def test_a_job_in_another_default_partition_is_left_as_asked(tmp_path):
    # The table was made for gpu; this cluster's default partition is cpu.
    (job,), logs = run(tmp_path, [OURS], table(decision(FP, cpus=5), partition="gpu"),
                       partitions="cpu:16:1:1,gpu:16:1:0")
    assert unchanged(job)
    assert any("partition cpu: the decisions are sized for gpu" in line for line in logs)


@pytest.mark.parametrize("shape,entry,why", [
    # A table that claims nodes of 65,536 cores, for a partition of 16.
    (NodeShape(65536, 64000, 4), decision(FP, cpus=64), "not this cluster's table"),
    # 64 TiB on nodes whose partition caps memory at 32,000 MB.
    (NodeShape(16, 64 * 1024 * 1024, 4), decision(FP, mem_mb=60000),
     "more than a node of gpu has"),
])
def test_a_table_beyond_this_clusters_nodes_is_not_trusted(tmp_path, shape, entry, why):
    (job,), logs = run(tmp_path, [OURS], table(entry, shape=shape),
                       partitions="gpu:16:1:1:32000")
    assert unchanged(job)
    assert any(why in line for line in logs), logs


def test_a_body_changed_under_the_same_header_is_read_again(tmp_path):
    first = table(decision(FP, cpus=3))
    head = first.split("\n", 1)[0]
    second = tmp_path / "second.tbl"
    second.write_text(head + "\n" + table(decision(FP, cpus=4)).split("\n", 1)[1])
    jobs, logs = run(tmp_path, [OURS, dict(OURS, table_from=str(second))], first)
    assert [j["cpus_per_task"] for j in jobs] == ["3", "4"]
    assert any("changed under the same header" in line for line in logs), logs


def test_a_fault_that_ends_and_comes_back_is_logged_again(tmp_path):
    good, bad = tmp_path / "good.tbl", tmp_path / "bad.tbl"
    good.write_text(table(decision(FP, cpus=3)))
    bad.write_text("hello\n")
    jobs, logs = run(tmp_path, [OURS, OURS, dict(OURS, table_from=str(good)),
                                dict(OURS, table_from=str(bad))], "hello\n")
    assert [j["cpus_per_task"] for j in jobs] == ["2", "2", "3", "2"]
    assert sum(line.startswith("error slurm-synergy") for line in logs) == 2, logs
