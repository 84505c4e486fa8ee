"""A run measured while it trains (measure/inrun/supervisor.py, measure/inrun/windows.py,
probe/affinity.py), outside Slurm: a real script with a DataLoader and a loader worker,
real affinity, and the faults the run must survive unchanged."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from slurm_synergy.model.policy import Policy
from slurm_synergy.probe.affinity import pin
from slurm_synergy.probe.records import ProcessRecord
from slurm_synergy.profiles import ProfileStore, Unmeasured
from slurm_synergy.measure.inrun import follow
from slurm_synergy.measure.inrun.supervisor import (InRunRequest, choose, held_elsewhere,
                                                    run_job)
from slurm_synergy.measure.search import halving
from slurm_synergy.measure.inrun import windows as windows_module
from slurm_synergy.measure.inrun.windows import RunWindows

from tests.helpers import FAST_INRUN as FAST, make_profile, site

FP = "00000000000000f1"
ALLOWED = os.sched_getaffinity(0)
# A sweep needs two cores: fail loudly where there are fewer, never skip.
assert len(ALLOWED) >= 2, "these tests hold a run to fewer cores: they need at least 2"
# A training loop of the ordinary kind: a DataLoader with a worker, a step of CPU work;
# it records what it computed and its torch threads at the end, and exits with a status
# of its own, so the run can be checked to be the script's.
SCRIPT = """
import json, sys, time, torch
from torch.utils.data import DataLoader, Dataset
class Squares(Dataset):
    def __len__(self): return 64
    def __getitem__(self, i):
        x = torch.full((64,), float(i))
        for _ in range(40): x = (x * 1.0001).sin()
        return x
threads = torch.get_num_threads()
total, end = 0.0, time.monotonic() + float(sys.argv[2])
loader = DataLoader(Squares(), batch_size=8, num_workers=1, persistent_workers=True)
def train():
    global total
    while time.monotonic() < end:
        for batch in loader:
            total += float(batch.sum())
            torch.mm(torch.ones(120, 120), torch.ones(120, 120))
            if time.monotonic() >= end: break
if sys.argv[4] == "thread":     # the loop in a thread of its own, as some trainers run it
    import threading
    t = threading.Thread(target=train); t.start(); t.join()
else:
    train()
json.dump({"total_is_finite": total == total, "threads": torch.get_num_threads(),
           "threads_at_start": threads}, open(sys.argv[1], "w"))
sys.exit(int(sys.argv[3]))
"""


def run_script(tmp_path: Path, seconds: float, status: int, policy: Policy = FAST,
               where: str = "main") -> tuple[int, dict, list[str]]:
    (tmp_path / "train.py").write_text(SCRIPT)
    # Written long before the run, as a user's script is (files written as the run
    # starts are its outputs, probe/cmdfiles.py).
    os.utime(tmp_path / "train.py", (time.time() - 600,) * 2)
    lines: list[str] = []
    req = InRunRequest(FP, "t", (sys.executable, str(tmp_path / "train.py"),
                                 str(tmp_path / "result.json"), str(seconds), str(status),
                                 where),
                       tmp_path / "probe.json")
    rc = run_job(req, site(policy), lines.append)
    return rc, json.loads((tmp_path / "result.json").read_text()), lines


@pytest.mark.parametrize("where", ["main", "thread"])
def test_a_run_is_swept_while_it_trains_and_ends_as_the_script_ends(home, where):
    rc, result, lines = run_script(home, 12.0, 3, where=where)
    assert rc == 3, "the job's exit status is its script's"
    assert result["total_is_finite"] and result["threads"] == result["threads_at_start"]
    profile = ProfileStore.default().load(FP)
    assert {p.cores for p in profile.train_points()} == {1, len(ALLOWED)}
    assert profile.allocation.launcher == "in-run" and profile.model.basis == "in-run"
    assert all(p.repeats for p in profile.train_points())
    assert profile.model.host_core_s > 0 and profile.model.prep_core_s > 0, \
        "the trainer's and the loader worker's CPU time per sample"
    assert profile.notes[0].startswith("measured in the run: 3 windows")
    # What watching cost beside it: a share of a core, over the sweep's seconds.
    used = re.search(r"the supervisor used ([\d.]+)% of a core over the sweep's (\d+)s",
                     profile.notes[0])
    assert used and float(used.group(1)) < 100 and int(used.group(2)) > 0, profile.notes[0]
    assert any(line.startswith(f"inrun: {FP}: ") for line in lines), lines
    # What the run read as its program, by content, for later runs to compare with.
    assert [f.path for f in profile.command_files] == [str(home / "train.py")]


def test_a_job_that_ends_inside_a_window_keeps_its_status_and_what_was_measured(home):
    slow = Policy(sweep_window_s=2.0, sweep_repeats=3, first_batch_timeout_s=60)
    rc, result, lines = run_script(home, 9.0, 0, slow)
    # A run that ends inside a window at fewer cores ends with that window's share of its
    # threads (probe/recorder.py); never more than it started with.
    assert rc == 0 and 1 <= result["threads"] <= result["threads_at_start"]
    store = ProfileStore.default()
    if store.has(FP):       # it measured a full window, at least, before it ended
        profile = store.load(FP)
        assert "incomplete: the job ended inside a window" in profile.notes
    else:
        assert any("no profile: the job ended inside a window" in line for line in lines), \
            lines


@pytest.mark.parametrize("lives_s,why", [
    (1.5, "the job ended inside a window"),      # its loop over, it is closing down
    (60, "a training process took no step in a window in 2s"),  # stopped, goes on
])
def test_a_window_without_a_step_says_whether_the_job_ended_or_stopped_stepping(
        tmp_path, monkeypatch, lives_s, why):
    monkeypatch.setattr(windows_module, "ACK_S", 2.0)
    job = subprocess.Popen(["sleep", str(lives_s)])
    try:
        # A trainer that takes every order and then no step.
        ProcessRecord(pid=job.pid, rank=None, argv=["train.py"], total_steps=5,
                      clock=time.monotonic(), window=10**6).write(tmp_path)
        windows = RunWindows(job, tmp_path, ALLOWED, print)
        assert windows.measure(1, 0.5) is None
        assert windows.trouble.reasons == [why]
    finally:
        job.kill()
        job.wait()


def test_a_window_shorter_than_a_step_stretches_to_the_step(tmp_path):
    # A trainer whose one step outlasts the window (a large model, or a process at the
    # lowest CPU priority beside busier ones, which CI's unit tests are) is measured
    # over that whole step, not called stopped.
    job = subprocess.Popen(["sleep", "60"])
    record = ProcessRecord(pid=job.pid, rank=None, argv=["train.py"], total_steps=5,
                           total_samples=40, clock=time.monotonic(), window=10**6)
    record.write(tmp_path)

    def step_ends() -> None:
        record.total_steps, record.total_samples, record.clock = 6, 48, time.monotonic()
        record.write(tmp_path)
    later = threading.Timer(2.5, step_ends)
    later.start()
    try:
        window = RunWindows(job, tmp_path, ALLOWED, print).measure(1, 0.5)
        assert window is not None and (window.steps, window.samples) == (1, 8), window
        assert window.seconds >= 2.5
    finally:
        later.cancel()
        job.kill()
        job.wait()


def _record(pid: int, steps: int, clock: float, longest_s: float = 0.0) -> ProcessRecord:
    return ProcessRecord(pid=pid, rank=None, argv=["train.py"], total_steps=steps,
                         total_samples=8 * steps, clock=clock, window=10**6,
                         longest_step_s=longest_s)


@pytest.mark.parametrize("steps,longest_s,paused", [
    (20, 0.10, False),      # 20 steady steps of 0.1 s
    (20, 0.25, False),      # one of 0.25 s: a loader's hiccup, not 4 steps' worth
    (20, 1.00, True),       # one of 1 s: a validation phase
    (2, 1.00, False),       # two steps: neither is the usual one
    (200, 0.09, False),     # a short blip in a window of many short steps (5%-)
])
def test_a_step_far_longer_than_the_windows_others_is_a_pause(steps, longest_s, paused):
    start = _record(1, 5, 100.0)
    # The window's steps: one of longest_s, the rest 0.1 s each (0.01 s for 200).
    usual = 0.01 if steps == 200 else 0.1
    end = _record(1, 5 + steps, 100.0 + longest_s + usual * (steps - 1), longest_s)
    window = windows_module._window(1, {1: start}, {1: end}, {}, {})
    assert window is not None and (window.pause_s > 0) is paused, window


def test_a_window_that_held_a_pause_in_training_is_set_aside_and_measured_again(tmp_path):
    # A trainer stepping every 50 ms that pauses once for 0.7 s (its validation phase)
    # in its first window: that window is measured again.
    job = subprocess.Popen(["sleep", "60"])
    stop = threading.Event()

    def trainer() -> None:
        steps, longest, t0 = 0, 0.0, time.monotonic()
        while not stop.is_set():
            pause = 0.7 if steps == 4 else 0.05
            time.sleep(pause)
            steps, longest = steps + 1, max(longest, pause)
            _record(job.pid, steps, time.monotonic(), longest).write(tmp_path)
            if time.monotonic() - t0 > 1.5:
                longest = 0.0       # as an order resets it, once the pause is over
    thread = threading.Thread(target=trainer)
    thread.start()
    try:
        while not list(tmp_path.glob("*.json")):
            time.sleep(0.01)
        windows = RunWindows(job, tmp_path, ALLOWED, print)
        window = windows.measure(1, 0.5)
        # At least the first: a step slowed by a busy machine may be called a pause too.
        assert windows.set_aside >= 1 and window is not None, window
    finally:
        stop.set()
        thread.join()
        job.kill()
        job.wait()


# A forward-only loop (no loader, no optimizer, no backward pass) still running when the
# wait for a step ends, whatever its import took; a script that ends long before it.
FORWARD_ONLY = ("import time, torch\nm = torch.nn.Linear(4, 4)\n"
                "end = time.monotonic() + 8\nwith torch.no_grad():\n"
                "    while time.monotonic() < end:\n        m(torch.randn(8, 4))\n")


@pytest.mark.parametrize("script,wait_s,said", [
    (FORWARD_ONLY, 3, "no training step seen in 3s (no batch from a data loader, no "
                      "optimizer step, no backward pass); no profile; its next jobs are not "
                      "marked for measuring for 7 days (`synergy profiles --forget "
                      f"{FP}` measures the next one)"),
    ("print('hello')\n", 60, "the job ended before its first training step; no profile"),
])
def test_a_run_without_a_training_step_says_so_and_stores_nothing(home, script, wait_s, said):
    path = home / "infer.py"
    path.write_text(script)
    lines: list[str] = []
    req = InRunRequest(FP, "t", (sys.executable, str(path)), home / "probe.json")
    quick = Policy(sweep_window_s=0.5, sweep_repeats=1, first_batch_timeout_s=wait_s)
    assert run_job(req, site(quick), lines.append) == 0
    assert f"inrun: {said}" in lines, lines
    store = ProfileStore.default()
    assert not store.has(FP)
    # A loop that runs without a step is held from measuring; one that ended (a short
    # or failed run) is not: its next run may train.
    assert [(fp, r.why if r else None) for fp, r in store.holds()] == (
        [(FP, said.split("; its next")[0])] if script == FORWARD_ONLY else [])
    if store.is_held(FP):
        # Its next marked job trains as submitted, with one line saying why.
        again: list[str] = []
        assert run_job(req, site(quick), again.append) == 0
        assert any("had nothing to measure lately" in line for line in again), again


def test_a_hold_stops_the_measuring_of_other_jobs_only(home):
    """A hold a job filed itself (a plain script's helper that ran long without a step,
    measure/inrun/no_step.py) leaves that job's training to be measured; any other job's
    hold, or one whose record cannot be read, holds."""
    store = ProfileStore.default()
    assert not held_elsewhere(store, FP, "41")
    store.hold(Unmeasured(FP, "no training step seen in 300s", "41", "t"))
    assert not held_elsewhere(store, FP, "41")
    assert held_elsewhere(store, FP, "42") and held_elsewhere(store, FP, "")
    store.hold_path(FP).write_text("{not a hold")
    assert held_elsewhere(store, FP, "41")


def test_a_store_that_cannot_be_read_runs_the_job_once_unmeasured(home, tmp_path):
    # A fingerprint the store refuses (a hand-edited job script) is one log line; the
    # command still runs, exactly once, and its status is the job's.
    lines: list[str] = []
    runs = tmp_path / "runs"
    req = InRunRequest("not-a-fingerprint", "t", ("sh", "-c", f"echo x >> {runs}; exit 4"),
                       tmp_path / "probe.json")
    assert run_job(req, site(FAST), lines.append) == 4
    assert runs.read_text() == "x\n"
    assert any("cannot look up or lock not-a-fingerprint" in line for line in lines), lines


class Commented:
    """slurmctld as choose() asks it: one job's comment."""

    def __init__(self, comment: str):
        self.text = comment

    def comment(self, job_id):
        return self.text


@pytest.mark.parametrize("comment,marked,may_sweep,swept", [
    (f"synergy:fp={FP}", True, True, True),                 # marked at submission
    (f"synergy:fp={FP} profile=1", False, True, True),      # marked since (undone)
    (f"synergy:fp={FP} profile=1", False, False, False),    # a task of several
    (f"synergy:fp={FP}", False, True, False),
])
def test_a_job_is_measured_where_it_was_marked_at_submission_or_since(
        home, monkeypatch, comment, marked, may_sweep, swept):
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    req = InRunRequest(FP, "t", ("true",), home / "probe.json")
    with contextlib.ExitStack() as held:
        beside = choose(req, site(FAST, Commented(comment)), marked, held, lambda line: None,
                        may_sweep=may_sweep)
        assert beside.swept is swept and (beside.during is not None) is swept


def test_a_job_measured_past_its_own_hold_ends_it_and_another_jobs_hold_stands(
        home, monkeypatch):
    """A long preparation before the training (its hold filed by this job) leaves the
    training measured, and the hold goes: should that measurement fail, the next job
    is marked again, as before the hold. Another job's hold keeps this one unmeasured."""
    store = ProfileStore.default()
    req = InRunRequest(FP, "t", ("true",), home / "probe.json")
    for filer, swept in (("41", True), ("40", False)):
        store.hold(Unmeasured(FP, "no training step seen in 300s", filer, "t"))
        monkeypatch.setenv("SLURM_JOB_ID", "41")
        with contextlib.ExitStack() as held:
            beside = choose(req, site(FAST, Commented(f"synergy:fp={FP} profile=1")), True,
                            held, lambda line: None)
        assert beside.swept is swept and store.is_held(FP) is not swept, filer


def test_a_thread_that_cannot_be_pinned_is_named_and_the_rest_are_pinned():
    me = os.getpid()
    refused = set(int(t) for t in os.listdir(f"/proc/{me}/task")[:1])
    seen = []

    def set_affinity(tid: int, cpus: set[int]) -> None:
        if tid in refused:
            raise PermissionError(errno.EPERM, "Operation not permitted")
        seen.append(tid)
    done = pin([me], {0}, set_affinity)
    assert len(done.failed) == 1 and "Operation not permitted" in done.failed[0]
    assert done.threads == len(seen) == len(os.listdir(f"/proc/{me}/task")) - 1


def test_a_process_forked_inside_a_window_gets_every_core_back(tmp_path):
    go, child = tmp_path / "go", tmp_path / "child"
    parent = subprocess.Popen([sys.executable, "-c", f"""
import os, time, pathlib
while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.02)
if os.fork() == 0:
    pathlib.Path({str(child)!r}).write_text(str(os.getpid())); time.sleep(30); os._exit(0)
time.sleep(30)
"""])
    try:
        windows = RunWindows(parent, tmp_path, ALLOWED, print)
        narrow = {min(ALLOWED)}
        windows._hold(narrow)
        go.touch()
        deadline = time.monotonic() + 10
        # write_text creates the file before it writes the pid: wait for the pid.
        while not (child.exists() and child.read_text()) and time.monotonic() < deadline:
            time.sleep(0.02)
        pid = int(child.read_text())
        assert os.sched_getaffinity(pid) == narrow, "forked inside the window"
        windows.close(30.0)
        assert os.sched_getaffinity(pid) == ALLOWED
        assert os.sched_getaffinity(parent.pid) == ALLOWED
    finally:
        for p in windows_pids(parent.pid):
            os.kill(p, 9)
        parent.wait()


def windows_pids(top: int) -> list[int]:
    from slurm_synergy.probe.affinity import job_pids
    return list(reversed(job_pids(top)))


def test_the_sweep_halves_the_cores_down_to_one_per_process():
    assert halving(16, 1) == [16, 8, 4, 2, 1]
    assert halving(2, 1) == [2, 1]
    assert halving(8, 2) == [8, 4, 2]
    assert halving(3, 1) == [3, 1]


@pytest.mark.parametrize("held_mb", [1300, 60])
def test_a_job_of_a_measured_workload_raises_its_profile_only_where_it_peaks_higher(
        home, tmp_path, monkeypatch, held_mb):
    # A later job's peak (a heap that grows over epochs) counts as the first job's does:
    # above the stored profile's 900 MB it raises the profile; below, nothing changes.
    monkeypatch.setattr(follow, "MEMORY_LOOK_S", 0.2)
    monkeypatch.setattr(follow, "PSS_LOOK_S", 0.2)
    store = ProfileStore.default()
    store.save(make_profile(FP))
    before = store.path(FP).read_bytes()
    lines: list[str] = []
    hold = f"import time; b = b'x' * ({held_mb} << 20); time.sleep(2.5); raise SystemExit(5)"
    req = InRunRequest(FP, "t", (sys.executable, "-c", hold), tmp_path / "probe.json")
    assert run_job(req, site(FAST), lines.append) == 5, "the job's status is its script's"
    assert any("is measured already" in line for line in lines), lines
    if held_mb > 900:
        grown = store.load(FP).model.footprint_mb
        assert held_mb <= grown < held_mb + 100, grown
        assert any(f"peaked at {grown:.0f} MB, above its profile's 900 MB" in line
                   for line in lines), lines
        # What the profile measured stays on its record, beside the job that raised it.
        raised = store.load(FP).raised
        assert [(r.from_mb, r.to_mb) for r in raised] == [(900.0, round(grown, 1))]
        assert store.load(FP).measured_footprint_mb == 900.0
    else:
        assert store.path(FP).read_bytes() == before
        assert not any("peaked at" in line for line in lines), lines


def test_a_script_generated_before_the_move_still_starts_its_supervisor():
    # Jobs queued across an upgrade run `python -m slurm_synergy.profiling.inrun`.
    proc = subprocess.run([sys.executable, "-m", "slurm_synergy.profiling.inrun", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "--fingerprint" in proc.stdout, proc.stderr
