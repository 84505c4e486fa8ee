"""Time limits backfill can use, on the real cluster: root's sync (`plugin sync
--time-limits`, as the timer runs it each round) sets a pending job's --time-min from its
workload's completed jobs, Slurm's backfill starts it in a gap its --time does not fit,
and a run longer than predicted gets its --time back before the lowered limit ends it."""

from __future__ import annotations

import os
import time

import pytest

from slurm_synergy.model import comment as comment_format
from slurm_synergy.model.units import duration_s

from tests.helpers import site_policy_with

from .conftest import executable, finish, synergy

pytestmark = pytest.mark.cluster

# The same script (so the same workload key) naps as long as its job's environment says.
NAP = "#!/bin/bash\n# time-limits {tag}\nsleep ${{NAP:-20}}\n"


def sbatch(tenants, who, script, *options: str) -> str:
    ran = tenants.run(who, ["sbatch", "--parsable", "--partition=gpu", "--cpus-per-task=1",
                            "--mem=200M", f"--output={tenants.shared}/%j.out", *options,
                            str(script)])
    assert ran.returncode == 0, ran.stderr
    return ran.stdout.strip()


def squeue(slurm, job: str, fmt: str) -> str:
    return slurm.run(["squeue", "--noheader", f"--jobs={job}", f"--format={fmt}"]).strip()


def time_limits(policy) -> str:
    os.environ["SYNERGY_POLICY"] = str(policy)
    try:
        done = synergy("plugin", "sync", "--time-limits")
    finally:
        os.environ.pop("SYNERGY_POLICY")
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_backfill_starts_a_predicted_job_sooner_and_a_long_run_keeps_its_time(
        slurm, tenants, tag):
    alice, bob = tenants.alice, tenants.bob
    # A one-minute floor (the shipped policy's is 2): the predicted job fits the gap
    # with two minutes to spare, whenever backfill's pass comes.
    policy = tenants.shared / f"policy-{tag}.toml"
    policy.write_text(site_policy_with(time_min_floor_min="1"))
    policy.chmod(0o644)
    script = executable(tenants.shared / f"nap-{tag}.sh", NAP.format(tag=tag))
    other = executable(tenants.shared / f"other-{tag}.sh", NAP.format(tag=tag + "-other"))
    # The workload's history: one completed 20 s run.
    first = sbatch(tenants, alice, script, "--time=20")
    assert finish(slurm, [first])[first].state == "COMPLETED"

    # bob holds one of node1's two cores for 150 s (limit 3 min); his two-core job waits
    # for it at the top of the queue, so backfill may start a one-core job only where
    # its limit ends before that reservation.
    long = sbatch(tenants, bob, other, "--time=3", "--export=ALL,NAP=150")
    wide = sbatch(tenants, bob, other, "--time=10", "--cpus-per-task=2", "--mem=200M")
    # alice's next run of the workload naps 200 s, past its prediction (20 s) and any
    # limit Slurm can lower it to (3 minutes at most); her job of a workload without
    # history asks the same --time.
    ids = [long, wide]
    try:
        nap = sbatch(tenants, alice, script, "--time=20", "--export=ALL,NAP=200")
        unknown = sbatch(tenants, alice, other, "--time=20")
        ids += [nap, unknown]
        line = time_limits(policy)
        assert f"time_min set on job(s) {nap}" in line, line
        comment = slurm.comment(nap)
        minutes, predicted, jobs = comment_format.time_min(comment)
        # the 20 s run (and its start and end) x 2 -> 1 minute, from one job
        assert (minutes, jobs) == (1, 1) and 20 <= predicted <= 29, comment
        assert squeue(slurm, nap, "%T") == "PENDING"

        # Backfill (every 30 s) starts the predicted job in the gap, its limit lowered;
        # the job without history, asking the same --time, stays behind the wide one.
        deadline = time.monotonic() + 120
        while squeue(slurm, nap, "%T") != "RUNNING":
            assert time.monotonic() < deadline, "backfill did not start the predicted job"
            time.sleep(3)
        assert squeue(slurm, wide, "%T") == "PENDING"
        assert squeue(slurm, unknown, "%T") == "PENDING"
        # Slurm lowered its limit to fit before the wide job's start.
        lowered = duration_s(squeue(slurm, nap, "%l"))
        assert lowered is not None and 60 <= lowered <= 180, lowered

        # The timer's rounds: before the lowered limit would end the 200 s run, its
        # --time comes back.
        raised = ""
        while squeue(slurm, nap, "%T") == "RUNNING":
            raised += time_limits(policy)
            time.sleep(5)
        assert f"limit put back to --time on job(s) {nap}" in raised, raised
        ended = finish(slurm, [nap])[nap]
        assert ended.state == "COMPLETED", ended
        row = slurm.sacct([nap], ("JobID", "TimelimitRaw", "ElapsedRaw", "Comment"))[0]
        assert row["TimelimitRaw"] == "20" and int(row["ElapsedRaw"]) >= 200, row
        # Its comment says so, for its report (tback=, its --time in minutes).
        assert comment_format.time_back(row["Comment"]) == 20, row
    finally:
        slurm.cancel(ids)
