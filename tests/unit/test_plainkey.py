"""model/plainkey.py and etc/job_submit.lua on plain batch scripts: both compute the same
key for the same job, and the shim keys, marks and right-sizes such a job as it does a
CSV row, leaving alone what the user or the site opted out."""


import pytest

from slurm_synergy.decisions.table import Held, Owned, render
from slurm_synergy.hooks import taskenv
from slurm_synergy.model.plainkey import KEY_BUDGET, KEY_VERSION, PlainJob, normalised, plain_key
from slurm_synergy.model.policy import Policy
from tests.shim import BATCH, DEFAULT_SHAPE, UID, decision, key_of, python_key, run, table
from tests.shim import submit_script as submit


SCRIPT = """#!/bin/bash
#SBATCH --cpus-per-task=4
#SBATCH --mem=8G
#SBATCH --gres=gpu:1
# set up
source ~/venv/bin/activate

srun python train.py --epochs 10   --lr 0.1
"""
def test_what_a_decision_changes_and_comments_are_not_in_the_key():
    other = SCRIPT.replace("--cpus-per-task=4", "--cpus-per-task=1").replace(
        "# set up", "# set up, v2") + "\n\n# the end\n"
    assert normalised(other.encode()) == normalised(SCRIPT.encode())
    assert python_key(other) == python_key(SCRIPT)
    # The command, its arguments, folder and GPUs are.
    assert python_key(SCRIPT.replace("--lr 0.1", "--lr 0.2")) != python_key(SCRIPT)
    assert python_key(SCRIPT, work_dir="/home/u/other") != python_key(SCRIPT)
    assert python_key(SCRIPT, tres_per_node="gres:gpu:2") != python_key(SCRIPT)
    assert plain_key(PlainJob(UID + 1, SCRIPT)) != plain_key(PlainJob(UID, SCRIPT))


def test_a_gpu_request_keys_alike_in_every_releases_spelling(tmp_path):
    # 22.05 hands job_submit gres:gpu:1, 23.02 and later gres/gpu:1: one workload, one key,
    # in the Lua as in the Python.
    old, new = (python_key(SCRIPT, tres_per_node=t) for t in ("gres:gpu:1", "gres/gpu:1"))
    assert old == new
    job, _ = submit(tmp_path, SCRIPT, table(decision("fedcba9876543210")),
                    tres_per_node="gres/gpu:1")
    assert key_of(job) == new


def test_a_new_plain_job_is_keyed_and_marked_for_measuring(tmp_path):
    job, logs = submit(tmp_path, SCRIPT, table(decision("fedcba9876543210")),
                       comment="lr sweep")
    fp = python_key(SCRIPT)
    assert job["comment"] == f"synergy:fp={fp} plain=1 req=cpus,mem,gpus lr sweep profile=1"
    assert job["admin_comment"] == f"synergy:fp={fp}"
    assert job["env.SYNERGY_FINGERPRINT"] == job["env.SYNERGY_PLAIN"] == fp
    assert job["env.SYNERGY_PROFILE"] == "1"
    assert (job["cpus_per_task"], job["pn_min_memory"]) == ("4", "8192")
    assert any("a plain script" in line and "marked for profiling" in line for line in logs)


def test_a_decided_plain_job_is_right_sized(tmp_path):
    fp = python_key(SCRIPT)
    assert fp is not None
    # The decision would give two GPUs: a script launches its ranks for the GPUs it asked
    # for (torchrun --nproc_per_node), so their count stays.
    job, _ = submit(tmp_path, SCRIPT, table(decision(fp, cpus=2, mem_mb=1024, gpus=2,
                                                     workers=1)),
                    **{"env.SYNERGY_FINGERPRINT": "0000000000000000"})
    assert (job["cpus_per_task"], job["min_cpus"], job["pn_min_memory"]) == ("2", "2", "1024")
    assert job["tres_per_node"] == "gres:gpu:1"
    assert job["comment"] == (f"synergy:fp={fp} plain=1 req=cpus,mem,gpus asked=c4,m8192,g1 "
                              "decision=c2,m1024,g1,w1")
    # Where its user cannot change it, for root's rescue: what the shim saw it ask.
    assert job["admin_comment"] == f"synergy:fp={fp} asked=c4,m8192,g1 decision=c2,m1024,g1,w1"
    # The key the job runs under is the shim's, whatever the user's environment said.
    assert job["env.SYNERGY_FINGERPRINT"] == fp and taskenv.lines(job["comment"]) == \
        "SYNERGY_WORKERS=1\n"
    assert "env.SYNERGY_PROFILE" not in job


def test_a_held_plain_job_is_keyed_and_left_as_asked_unmarked(tmp_path):
    # Its last marked run had nothing to measure (the table's none line): keyed, so the
    # reports and the TaskProlog still know it, but neither sized nor marked again.
    fp = python_key(SCRIPT)
    assert fp is not None
    tbl = render([Held(UID, fp), Owned(UID, decision("fedcba9876543210"))], Policy(),
                 DEFAULT_SHAPE)
    job, logs = submit(tmp_path, SCRIPT, tbl, comment="lr sweep")
    assert job["comment"] == f"synergy:fp={fp} plain=1 req=cpus,mem,gpus lr sweep"
    assert job["env.SYNERGY_FINGERPRINT"] == fp and "env.SYNERGY_PROFILE" not in job
    assert (job["cpus_per_task"], job["pn_min_memory"]) == ("4", "8192")
    assert any("nothing to measure" in line for line in logs), logs
    # Another user's hold of the same key holds nothing of this user's.
    theirs = render([Held(UID + 1, fp)], Policy(), DEFAULT_SHAPE)
    job, _ = submit(tmp_path, SCRIPT, theirs)
    assert job["comment"].endswith(" profile=1") and job["env.SYNERGY_PROFILE"] == "1"


def test_an_admins_own_admin_comment_is_kept(tmp_path):
    job, _ = submit(tmp_path, SCRIPT, table(), admin_comment="ticket 42")
    assert job["admin_comment"] == f"ticket 42 synergy:fp={python_key(SCRIPT)}"


@pytest.mark.parametrize("fields, policy", [
    ({"comment": "synergy:off"}, None),
    ({"comment": "baseline run, synergy:off please"}, None),
    ({"partition": "debug"}, Policy(skip_partitions=("debug",))),
    ({"account": "teaching"}, Policy(skip_accounts=("teaching",))),
    ({}, Policy(plain_scripts=False)),
], ids=["opted-out", "opted-out-in-words", "partition", "account", "site-off"])
def test_opted_out_and_skipped_jobs_are_untouched(tmp_path, fields, policy):
    fp = python_key(SCRIPT)
    assert fp is not None
    job, _ = submit(tmp_path, SCRIPT, table(decision(fp, cpus=1), policy=policy or Policy()),
                    **fields)
    assert job["cpus_per_task"] == "4" and job.get("comment") == fields.get("comment")
    assert "admin_comment" not in job and not any(k.startswith("env.SYNERGY") for k in job)


def test_a_skipped_user_is_untouched(tmp_path, monkeypatch):
    from slurm_synergy.decisions import table as table_module
    monkeypatch.setattr(table_module, "uids_of", lambda names: [UID] if names else [])
    job, _ = submit(tmp_path, SCRIPT, table(policy=Policy(skip_users=("someone",))))
    assert "comment" not in job and "admin_comment" not in job


def test_interactive_jobs_and_oversized_scripts_are_not_keyed(tmp_path):
    (job,), _ = run(tmp_path, [dict(BATCH)], table())         # srun/salloc: no script
    assert "comment" not in job
    huge = "echo x\n" * (KEY_BUDGET // 6)
    assert plain_key(PlainJob(UID, huge)) is None
    # Comments are not in the key, but a script that long is not even read through.
    assert plain_key(PlainJob(UID, "# x\n" * KEY_BUDGET + "echo x\n")) is None
    job, logs = submit(tmp_path, huge, table())
    assert "comment" not in job and any("not keyed" in line for line in logs)


def _budget_left(**fields: str) -> int:
    """What KEY_BUDGET leaves for arguments beside SCRIPT and the job's other fields."""
    key_data = [KEY_VERSION, str(UID), fields.get("work_dir", BATCH["work_dir"]), "",
                BATCH["tres_per_node"], "", normalised(SCRIPT.encode()).decode()]
    return KEY_BUDGET - sum(len(f.encode()) for f in key_data) - (len(key_data) - 1)


@pytest.mark.parametrize("args, keyed", [
    (lambda room: ["a" * (room - 1)], True),                  # the budget exactly
    (lambda room: ["a" * room], False),                       # a byte past it
    (lambda room: ["x"] * (room // 2), True),                 # many short ones, within
    (lambda room: ["x"] * (room // 2 + 1), False),            # one too many
    (lambda room: ["a" * (1 << 20)], False),                  # a megabyte
], ids=["exactly", "one-past", "many-within", "many-past", "a-megabyte"])
def test_arguments_and_script_are_keyed_within_one_budget_by_both(tmp_path, args, keyed):
    """The shim hashes at most KEY_BUDGET bytes of script, arguments and folder in all
    (inside slurmctld's locks); Python draws the line at the same byte."""
    argv = args(_budget_left())
    fields = {"argv.0": "job.sh", **{f"argv.{i}": a for i, a in enumerate(argv, start=1)}}
    assert (python_key(SCRIPT, **fields) is not None) == keyed
    job, logs = submit(tmp_path, SCRIPT, table(), **fields)
    if keyed:
        assert key_of(job) == python_key(SCRIPT, **fields)
    else:
        assert "comment" not in job and any("over 65536 bytes: not keyed" in line
                                            for line in logs), logs


def test_an_argument_count_past_the_budget_is_refused_before_argv_is_read(tmp_path):
    # slurmctld copies every argument at each read of job_desc.argv: a count alone past
    # the budget is enough to leave the job alone, whatever argv holds.
    job, logs = submit(tmp_path, SCRIPT, table(), argc=str(10 ** 7),
                       **{"argv.0": "job.sh", "argv.1": "x"})
    assert "comment" not in job
    assert any("9999999 arguments over 65536 bytes: not keyed" in line for line in logs), logs


def test_without_a_table_a_plain_job_is_untouched_and_the_fault_logged(tmp_path):
    job, logs = submit(tmp_path, SCRIPT, None)
    assert "comment" not in job and not any(k.startswith("env.SYNERGY") for k in job)
    assert any(line.startswith("error slurm-synergy") for line in logs)


def test_a_fault_midway_puts_the_plain_job_back(tmp_path):
    job, logs = submit(tmp_path, SCRIPT, table(), comment="mine", fail_on="admin_comment")
    assert job["comment"] == "mine" and "admin_comment" not in job
    assert not any(k.startswith("env.SYNERGY") for k in job)
    assert any("error in job_submit.lua" in line for line in logs)


def test_a_script_whose_steps_ask_for_resources_keeps_them(tmp_path):
    # srun -c 4 inside a job given 2 cores would be refused: the job keeps what it asked.
    script = SCRIPT.replace("srun python", "srun -c 4 --mem=6G python")
    fp = python_key(script)
    assert fp is not None
    job, _ = submit(tmp_path, script, table(decision(fp, cpus=2, mem_mb=1024, gpus=1)))
    assert (job["cpus_per_task"], job["pn_min_memory"]) == ("4", "8192")
    assert "decision=c4,m8192,g1" in job["comment"]


def test_where_the_users_request_wins_a_plain_script_keeps_what_it_set(tmp_path):
    fp = python_key(SCRIPT)
    assert fp is not None
    job, _ = submit(tmp_path, SCRIPT, table(decision(fp, cpus=2, mem_mb=1024, gpus=1),
                                            policy=Policy(user_request_wins=True)))
    assert (job["cpus_per_task"], job["pn_min_memory"]) == ("4", "8192")


def test_what_a_job_inherits_from_the_job_that_submitted_it_is_not_its_own(tmp_path):
    # Submitted from inside a marked plain job (sbatch copies the environment), with
    # synergy:off: nothing of the parent's key, marks or probe state reaches its tasks.
    inherited = {f"env.{k}": v for k, v in (
        ("SYNERGY_FINGERPRINT", "0123456789abcdef"), ("SYNERGY_PLAIN", "0123456789abcdef"),
        ("SYNERGY_PROFILE", "1"), ("SYNERGY_WORKERS", "3"),
        ("SYNERGY_PROBE_DIR", "/tmp/synergy-1-2-ab"), ("SYNERGY_TASK_ANCHOR", "42"))}
    job, _ = submit(tmp_path, SCRIPT, table(), comment="synergy:off", **inherited)
    assert job["comment"] == "synergy:off" and "admin_comment" not in job
    assert all(job[k] == "" for k in inherited), job
    # Keyed, the child gets its own key and its own mark.
    job, _ = submit(tmp_path, SCRIPT, table(), **inherited)
    fp = python_key(SCRIPT)
    assert job["env.SYNERGY_FINGERPRINT"] == job["env.SYNERGY_PLAIN"] == fp
    assert job["env.SYNERGY_PROFILE"] == "1" and job["env.SYNERGY_WORKERS"] == ""
    assert job["env.SYNERGY_PROBE_DIR"] == job["env.SYNERGY_TASK_ANCHOR"] == ""


def test_a_job_over_two_gpu_types_and_a_long_comment_are_not_keyed(tmp_path):
    hetero = "synergy:hetero het=0,b32,u16,a1 decision=c2,m1024,g1:local4g,w1"
    job, _ = submit(tmp_path, SCRIPT, table(), comment=hetero)
    assert job["comment"] == hetero and "admin_comment" not in job
    # Slurm refuses a comment over 1024 characters, after job_submit.
    long = "x" * 900
    job, logs = submit(tmp_path, SCRIPT, table(), comment=long)
    assert job["comment"] == long and any("comment too long" in line for line in logs)


def test_a_skipped_account_is_matched_as_slurm_spells_it(tmp_path):
    job, _ = submit(tmp_path, SCRIPT, table(policy=Policy(skip_accounts=("Teaching",))),
                    account="TEACHING")
    assert "comment" not in job
