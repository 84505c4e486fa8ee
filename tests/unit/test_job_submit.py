"""etc/job_submit.lua run by Lua 5.1 outside slurmctld (tests/unit/lua/harness.lua):
the rewrite, the profiling mark, and every fault passing jobs through unchanged.

The same shim inside a real slurmctld is tested in tests/integration/test_plugin.py.
"""

import os
from pathlib import Path

import pytest

from slurm_synergy.hooks import taskenv
from slurm_synergy.model.engine import NodeShape
from slurm_synergy.model.policy import Policy
from slurm_synergy.decisions.table import Held, Owned, render

from tests.shim import DEFAULT_SHAPE, FP, OURS, UID, decision, run, table, unchanged


def test_a_decided_job_is_rewritten_and_its_comment_tells_its_workers(tmp_path):
    (job,), logs = run(tmp_path, [OURS], table(decision(FP, cpus=5, mem_mb=1280, gpus=1,
                                                         workers=4, power_limit_w=250)))
    assert job["rc"] == "0"
    assert (job["cpus_per_task"], job["min_cpus"], job["pn_min_cpus"]) == ("5", "5", "5")
    assert job["pn_min_memory"] == "1280" and job["tres_per_node"] == "gres:gpu:1"
    # Its workers reach its tasks from the comment (hooks/taskenv.py), not the environment.
    assert "env.SYNERGY_WORKERS" not in job and job["env.SYNERGY_POWER_LIMIT_W"] == "250"
    # The request as asked is kept beside the decision, for reports.
    assert job["comment"] == (f"synergy:fp={FP} req=cpus,mem asked=c2,m3072,g2 "
                              "decision=c5,m1280,g1,w4,p250")
    assert any("cpus 2, mem 3072 MB, gres:gpu:2 -> cpus 5" in line for line in logs)
    assert job["admin_comment"] == f"synergy:fp={FP} asked=c2,m3072,g2 decision=c5,m1280,g1,w4,p250"


def test_the_admin_comment_holds_what_the_shim_saw_asked_never_the_users_asked(tmp_path):
    # A comment's asked= is its user's text: a client (user mode) may write any. Root's
    # rescue restores what the admin comment says, which the shim took from the request.
    forged = dict(OURS, comment=f"synergy:fp={FP} asked=c64,m999999,g8 decision=c1,m1280,g1,w4",
                  cpus_per_task="1", pn_min_memory="1280")
    (job,), _ = run(tmp_path, [forged], table(decision(FP, cpus=1, mem_mb=1280, gpus=1,
                                                        workers=4)))
    assert job["comment"].endswith("asked=c64,m999999,g8 decision=c1,m1280,g1,w4")
    assert job["admin_comment"] == f"synergy:fp={FP} asked=c1,m1280,g2 decision=c1,m1280,g1,w4"


def test_the_gpu_type_the_job_asked_for_is_kept(tmp_path):
    (job,), _ = run(tmp_path, [dict(OURS, tres_per_node="gres:gpu:a100:2")],
                    table(decision(FP, gpus=1)))
    assert job["tres_per_node"] == "gres:gpu:a100:1"


def test_another_users_decision_for_the_same_workload_sizes_none_of_this_users_jobs(tmp_path):
    # Uid 1001 profiled (or forged a profile of) this workload; uid 1000 submits it.
    theirs = render([Owned(UID + 1, decision(FP, cpus=1, mem_mb=100, gpus=0))], Policy(),
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


def test_a_held_workloads_job_is_left_as_asked_and_not_marked(tmp_path):
    # Its last marked run had nothing to measure: the table's none line, not a size.
    tbl = render([Held(UID, FP)], Policy(), DEFAULT_SHAPE)
    (job,), logs = run(tmp_path, [OURS], tbl)
    assert unchanged(job), job
    assert any(f"fp {FP}" in line and "nothing to measure" in line for line in logs), logs


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


HEAD = ("synergy-decisions 5 gen=abc user_wins=0 profile_new=1 max_cpus=16 "
        "max_mem_mb=64000 max_gpus=4 entries=1\n")
END = "end gen=abc entries=1\n"
HOSTILE = {
    "missing": None,
    "empty": "",
    "not a table": "hello\n",
    "version 3": HEAD.replace(" 4 ", " 3 ") + f"{UID} {FP} 2 1024 1 - 1 0 1\n",
    "header out of range": HEAD.replace("max_cpus=16", "max_cpus=999999999")
                           + f"{UID} {FP} 2 1024 1 - 1 0 1 0\n" + END,
    "cut short": HEAD + f"{UID} {FP} 2 1024 1 - 1 0 1 0\n",
    "closed by another generation": HEAD + f"{UID} {FP} 2 1024 1 - 1 0 1 0\n"
                                    + END.replace("abc", "abd"),
    "negative cores": HEAD + f"{UID} {FP} -4 1024 1 - 1 0 1 0\n" + END,
    "10^12 MB": HEAD + f"{UID} {FP} 2 1000000000000 1 - 1 0 1 0\n" + END,
    "gres injection": HEAD + f'{UID} {FP} 2 1024 1 a100";os.execute("id") 1 0 1 0\n' + END,
    "4300-digit procs": HEAD + f"{UID} {FP} 2 1024 1 - 1 0 {'9' * 4300} 0\n" + END,
    "1e308 W": HEAD + f"{UID} {FP} 2 1024 1 - 1 1e308 1 0\n" + END,
    "huge file": HEAD + "#" * (17 * 1024 * 1024),
}


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_a_missing_corrupt_or_hostile_table_passes_every_job_unchanged(tmp_path, kind):
    jobs, logs = run(tmp_path, [OURS, OURS], HOSTILE[kind])
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
    assert job["cpus_per_task"] == "2" and taskenv.lines(job["comment"]) == "SYNERGY_WORKERS=1\n"
    assert job["tres_per_node"] == "gres:gpu:2" and job["pn_min_memory"] == "1280"
    assert job["comment"].endswith("decision=c2,m1280,g2,w1")


PLAIN = {"name": "plain", "cpus_per_task": "2", "min_cpus": "2", "pn_min_cpus": "2",
         "pn_min_memory": "3072", "tres_per_node": "gres:gpu:2"}


def fifo(path: Path) -> None:
    os.mkfifo(path)


@pytest.mark.parametrize("make,why", [
    (fifo, "is not a regular file"),
    (Path.mkdir, "is not a regular file"),
    (lambda p: p.write_bytes(os.urandom(4096)), "is not a version 5 decision table"),
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
    head, _, end = first.splitlines()
    second = tmp_path / "second.tbl"
    second.write_text("\n".join([head, table(decision(FP, cpus=4)).splitlines()[1], end, ""]))
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


def test_every_entry_of_a_large_table_is_found_by_halving_and_no_other(tmp_path):
    """The shim never parses the table: it halves over the sorted lines. Every uid and
    fingerprint of 3,000 lines is found, and keys between them are not."""
    from slurm_synergy.decisions.table import Owned as Own
    fps = [f"{n * 7919:016x}" for n in range(1, 1001)]
    owned = [Own(uid, decision(fp, cpus=1 + n % 7)) for uid in (UID - 1, UID, UID + 1)
             for n, fp in enumerate(fps)]
    tbl = render(owned, Policy(), DEFAULT_SHAPE)
    wanted = fps[::97] + [fps[0], fps[-1]] + [f"{n * 7919 + 1:016x}" for n in range(1, 40)]
    jobs, _ = run(tmp_path, [dict(OURS, comment=f"synergy:fp={fp}") for fp in wanted], tbl)
    for fp, job in zip(wanted, jobs):
        if fp in fps:
            assert job["cpus_per_task"] == str(1 + fps.index(fp) % 7), fp
        else:
            assert job["cpus_per_task"] == "2" and job["comment"].endswith(" profile=1"), fp


def test_a_malformed_line_hides_only_the_workloads_whose_lookup_meets_it(tmp_path):
    fps = [f"{n:016x}" for n in range(1, 8)]
    tbl = table(*(decision(fp, cpus=3) for fp in fps)).splitlines()
    tbl[4] = tbl[4].replace(" 3 1024 ", " -3 1024 ")      # the 4th entry: fps[3]
    jobs, logs = run(tmp_path, [dict(OURS, comment=f"synergy:fp={fp}") for fp in fps],
                     "\n".join(tbl) + "\n")
    assert jobs[3]["cpus_per_task"] == "2" and "env.SYNERGY_PROFILE" not in jobs[3]
    assert [j["cpus_per_task"] for j in jobs[:3] + jobs[4:]] == ["3"] * 6
    assert sum("malformed line" in line for line in logs) == 1, logs


def test_a_job_that_names_its_qos_is_held_to_that_qos(tmp_path):
    from slurm_synergy.decisions.limits import Cap
    tbl = render([Owned(UID, decision(FP, cpus=5, mem_mb=1280, gpus=1))], Policy(),
                 DEFAULT_SHAPE, qos={"normal": Cap(), "short": Cap(4, 0, 0)})
    jobs, logs = run(tmp_path, [OURS, dict(OURS, qos="normal"), dict(OURS, qos="short"),
                                dict(OURS, qos="nosuch\nforged line")], tbl)
    assert [j["cpus_per_task"] for j in jobs] == ["5", "5", "2", "2"]
    assert any("past QOS short's limits for one job" in line for line in logs)
    assert any("QOS nosuch\\010forged line is not one the table holds" in line
               for line in logs), logs
    # Where Slurm enforces no limits, a named QOS bounds nothing.
    free = render([Owned(UID, decision(FP, cpus=5))], Policy(), DEFAULT_SHAPE)
    (job,), _ = run(tmp_path, [dict(OURS, qos="short")], free)
    assert job["cpus_per_task"] == "5"


def test_a_shared_decision_only_grows_a_job(tmp_path):
    """Another member's profile (share_group) may give a member more than they asked,
    never less: no member can starve another through a profile in their own name."""
    shared = render([Owned(UID, decision(FP, cpus=4, mem_mb=1024, gpus=1, workers=3,
                                         power_limit_w=150), shared=True)],
                    Policy(), DEFAULT_SHAPE)
    jobs, logs = run(tmp_path, [OURS, dict(OURS, cpus_per_task="8", pn_min_memory="8192")],
                     shared)
    # Asked 2 cores and 3072 MB of 2 GPUs: the cores grow, memory and GPUs stay, no power
    # limit is set.
    assert (jobs[0]["cpus_per_task"], jobs[0]["pn_min_memory"]) == ("4", "3072")
    assert jobs[0]["tres_per_node"] == "gres:gpu:2"
    assert "env.SYNERGY_POWER_LIMIT_W" not in jobs[0]
    assert jobs[0]["comment"].endswith("decision=c4,m3072,g2,w3")
    # A job it would not grow is left as asked, and measured as its own.
    assert (jobs[1]["cpus_per_task"], jobs[1]["pn_min_memory"]) == ("8", "8192")
    assert jobs[1]["env.SYNERGY_PROFILE"] == "1"


@pytest.mark.parametrize("name", ["a\nslurm-synergy: job x (uid 0): forged",
                                  "caf\xe9\r\x1b[2J", "%s%d%n"])
def test_what_a_user_names_reaches_slurmctlds_log_escaped(tmp_path, name):
    (job,), logs = run(tmp_path, [dict(OURS, name=name, num_tasks="4")],
                       table(decision(FP, cpus=5)))
    assert job["rc"] == "0"
    line = next(line for line in logs if "more than one task" in line)
    assert "\n" not in line and "\r" not in line and "\x1b" not in line
    assert "job " + name.replace("\n", "\\010").replace("\r", "\\013").replace(
        "\x1b", "\\027").replace("\xe9", "\\195\\169") in line or "%s%d%n" in line, line
