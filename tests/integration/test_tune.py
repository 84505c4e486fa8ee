"""`synergy tune` on the real local cluster: a pending job that cannot start at its ideal
size starts at its GPU-proportional share; running jobs and, without admin rights, other
users' jobs are never changed. The second user is an ordinary one (conftest's tenants)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest


from .conftest import SYNERGY, finish, queued, wait_state

pytestmark = pytest.mark.cluster


def test_tune_starts_a_blocked_job_at_its_share_and_leaves_the_rest(slurm, tmp_path, tag,
                                                                     tenants):
    bob, shared = tenants.bob, tenants.shared
    node = slurm.node_use()[0]
    assert node.cpus_alloc == 0, f"the node is busy before the test: {node}"
    out = f"--output={shared}/%j.out"
    blocker = mine = theirs = ""
    try:
        blocker = slurm.run(["sbatch", "--parsable", f"--job-name=blocker-{tag}", out,
                             f"-c{node.cpus - 1}", "--gres=gpu:1", "--mem=1000", "--time=10",
                             "--comment=running-as-asked", "--wrap", "sleep 300"]).strip()
        wait_state(slurm, blocker, "RUNNING")
        mine = slurm.run(["sbatch", "--parsable", f"--job-name=ideal-{tag}", out,
                          f"-c{node.cpus}", "--gres=gpu:1", "--mem=4000", "--time=2",
                          "--comment=synergy:fp=0123456789abcdef decision=c2,m4000,g1,w1",
                          "--wrap", "sleep 5"]).strip()
        theirs_sub = tenants.run(bob, ["sbatch", "--parsable", f"--job-name=theirs-{tag}", out,
                                 f"-c{node.cpus}", "--gres=gpu:1", "--mem=3000", "--time=2", "--wrap",
                                 "sleep 5"])
        assert theirs_sub.returncode == 0, theirs_sub.stderr
        theirs = theirs_sub.stdout.strip()
        wait_state(slurm, mine, "PENDING", reasons=("Resources", "Priority"))
        wait_state(slurm, theirs, "PENDING", reasons=("Resources", "Priority"))
        # Without admin rights: only bob's own job is considered, and it is tuned.
        ran = tenants.synergy(bob, "tune", env={"SYNERGY_TUNE_LOG": str(shared / "tune.jsonl")})
        assert ran.returncode == 0, ran.stderr
        assert "own jobs only" in ran.stderr
        assert f"tuned {theirs} ({bob.name})" in ran.stdout, ran.stdout
        assert mine not in ran.stdout
        untouched = queued(slurm, mine)
        assert (untouched.state, untouched.cpus_per_task, untouched.mem_mb) == \
            ("PENDING", node.cpus, 4000)
        assert "tuned=" not in slurm.comment(mine)
        finish(slurm, [theirs], timeout=120)

        # The admin (root): our job falls back to its share and starts.
        log = tmp_path / "tune.jsonl"
        env = dict(os.environ, SYNERGY_TUNE_LOG=str(log))
        ran = subprocess.run([*SYNERGY, "tune"], capture_output=True, text=True, env=env)
        assert ran.returncode == 0, ran.stderr
        assert f"tuned {mine} (root)" in ran.stdout, ran.stdout
        done = finish(slurm, [mine], timeout=120)[mine]
        assert done.state == "COMPLETED"
        share_c = max(1, node.cpus // node.gpus)
        acct = slurm.sacct([mine, blocker], ("JobID", "AllocCPUS", "Comment", "ReqMem"))
        by_id = {r["JobID"]: r for r in acct}
        assert by_id[mine]["AllocCPUS"] == str(share_c)
        assert f"tuned=c{share_c},m4000" in by_id[mine]["Comment"]
        assert by_id[mine]["Comment"].startswith("synergy:fp=0123456789abcdef decision=")
        records = [json.loads(line) for line in log.read_text().splitlines()]
        assert [(r["job_id"], r["outcome"]) for r in records] == [(mine, "trying"),
                                                                   (mine, "applied")]
        assert (records[-1]["cpus_before"], records[-1]["cpus_after"]) == (node.cpus, share_c)

        # The running job kept what it asked for, and a finished job cannot be put back.
        still = queued(slurm, blocker)
        assert (still.state, still.cpus_per_task) == ("RUNNING", node.cpus - 1)
        # The shim keyed it as a plain script; what its user wrote is kept, untuned.
        assert "running-as-asked" in slurm.comment(blocker)
        assert "tuned=" not in slurm.comment(blocker)
        back = subprocess.run([*SYNERGY, "tune", "--revert", mine], capture_output=True,
                              text=True, env=env)
        assert back.returncode == 1
        assert f"job {mine} is gone; only a pending job can be put back" in back.stderr
    finally:
        slurm.cancel([j for j in (blocker, mine, theirs) if j])


@pytest.mark.parametrize("comment", ["", "my run seed=3"])
def test_revert_puts_a_pending_job_back_comment_and_all(slurm, tmp_path, tag, comment):
    """A held job is pending and never starts, so the change stays to be undone."""
    from slurm_synergy.tune import apply as applying
    from slurm_synergy.tune.plan import Resize

    args = ["sbatch", "--parsable", "--hold", f"--job-name=revert-{tag}",
            f"--output={tmp_path}/%j.out", "-c2", "--gres=gpu:1", "--mem=3000",
            "--wrap", "true"]
    job = slurm.run(args + ([f"--comment={comment}"] if comment else [])).strip()
    log = tmp_path / "tune.jsonl"
    try:
        before = queued(slurm, job)
        # As slurmctld holds it: the shim keys a plain script, the user's words kept.
        submitted = slurm.comment(job)
        assert comment in submitted and submitted.startswith("synergy:fp=")
        change = Resize(job, before.user, "vm", 2, 3000, 1, 1000, 1, "test")
        assert applying.apply(slurm, change, log) is None
        tuned = queued(slurm, job)
        assert (tuned.cpus_per_task, tuned.mem_mb) == (1, 1000)
        assert slurm.comment(job) == f"{submitted} tuned=c1,m1000"
        # Tuned once, it is not tuned again before it is put back.
        assert "tuned before" in applying.apply(slurm, change, log)
        back = subprocess.run([*SYNERGY, "tune", "--revert", job], capture_output=True,
                              text=True, env=dict(os.environ, SYNERGY_TUNE_LOG=str(log)))
        assert back.returncode == 0, back.stderr
        after = queued(slurm, job)
        assert (after.state, after.cpus_per_task, after.mem_mb, slurm.comment(job)) == \
            ("PENDING", 2, 3000, submitted)
        again = subprocess.run([*SYNERGY, "tune", "--revert", job], capture_output=True,
                               text=True, env=dict(os.environ, SYNERGY_TUNE_LOG=str(log)))
        assert again.returncode == 1
        assert f"has no change to put back for job {job}" in again.stderr
    finally:
        slurm.cancel([job])


def test_memory_per_cpu_and_comments_are_read_job_by_job(slurm, tmp_path, tag):
    """squeue's MinMemory does not say whether memory is per CPU, and a comment may hold
    a newline: both are read for one job at a time, from Slurm itself."""
    base = ["sbatch", "--parsable", "--hold", f"--job-name=kinds-{tag}",
            f"--output={tmp_path}/%j.out", "-c2", "--gres=gpu:1", "--wrap", "true"]
    forged = "x\n999999|N/A|root|PENDING|Resources|1|1|1M|gres:gpu:1|1|gpu|(null)|"
    jobs = []
    try:
        per_cpu = slurm.run(base + ["--mem-per-cpu=500"]).strip()
        default = slurm.run(base).strip()           # DefMemPerCPU: per CPU too
        per_node = slurm.run(base + ["--mem=1000", f"--comment={forged}"]).strip()
        jobs = [per_cpu, default, per_node]
        assert [slurm.memory_per_cpu(j) for j in jobs] == [True, True, False]
        queue = {j.job_id: j for j in slurm.queue()}
        assert queue[per_cpu].mem_mb == 500 and queue[per_node].mem_mb == 1000
        assert "999999" not in queue
        # Keyed by the shim as a plain script: the forged text is the comment's, whole.
        assert forged in slurm.comment(per_node) and "999999" not in queue
    finally:
        slurm.cancel(jobs)
