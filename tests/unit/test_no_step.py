"""measure/inrun/no_step.py: when a marked job's Python that ended without a training
step holds its workload, and when it says nothing (the task-mode runs themselves are in
test_probe_task.py)."""

from __future__ import annotations

import contextlib
import os

import pytest

from slurm_synergy import paths
from slurm_synergy.measure.inrun.attach import STEPPED
from slurm_synergy.measure.inrun.no_step import tell
from slurm_synergy.measure.lock import profiling_lock
from slurm_synergy.model.policy import Policy
from slurm_synergy.profiles import ProfileStore

from tests.helpers import make_profile, site

FP = "00000000000000b8"
WAIT = site(Policy(first_batch_timeout_s=60))


@pytest.fixture
def job(home, monkeypatch) -> ProfileStore:
    """Job 41 of workload FP, marked, its user's own store."""
    monkeypatch.setenv("SYNERGY_PROFILES", "")
    monkeypatch.setenv("SYNERGY_FINGERPRINT", FP)
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    monkeypatch.delenv("SLURM_CLUSTER_NAME", raising=False)
    return ProfileStore.default()


def test_a_tree_that_ran_the_wait_without_a_step_holds_its_workload_once(job):
    lines: list[str] = []
    assert tell(os.getpid(), 61.0, WAIT, lines.append)
    ((fp, record),) = job.holds()
    assert fp == FP and record is not None and record.job_id == "41"
    assert record.why.startswith("no training step seen in 61s of ") and \
        record.why.endswith("(no batch from a data loader, no optimizer step, no backward "
                            "pass); no profile"), record.why
    (line,) = lines
    assert line.startswith(f"inrun: {record.why}; its next jobs are not marked"), line
    # Another task of the step, exiting after it: held already, nothing said.
    assert not tell(os.getpid(), 61.0, WAIT, lines.append) and len(lines) == 1


@pytest.mark.parametrize("case", ["inside the wait", "stepped in this job", "measured",
                                  "being measured", "no fingerprint"])
def test_nothing_is_held_where_the_job_trains_or_the_workload_is_measured(job, monkeypatch,
                                                                           case):
    ran = 59.0 if case == "inside the wait" else 61.0
    if case == "stepped in this job":      # a supervisor started in another tree of it
        runs = paths.runs_dir("", "41")
        runs.mkdir(parents=True)
        (runs / STEPPED).touch()
    if case == "measured":
        job.save(make_profile(FP))
    if case == "no fingerprint":
        monkeypatch.setenv("SYNERGY_FINGERPRINT", "../x")
    lines: list[str] = []
    with contextlib.ExitStack() as held:
        if case == "being measured":
            assert held.enter_context(profiling_lock(job, FP))
        assert not tell(os.getpid(), ran, WAIT, lines.append)
    assert lines == [] and not job.is_held(FP)
