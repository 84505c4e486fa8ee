"""The first job of an unknown workload, measured while it trains.

    python -m slurm_synergy.measure.inrun.supervisor --fingerprint FP --job-name NAME --out FILE
        [--workers N] -- COMMAND...

The job script runs this in place of the probe for a job the plugin marked (profile=1).
The job's command runs as submitted, in the job's folder and environment, under the
probe's watch mode, and trains to its end at its asked size: its exit status is the
command's. Beside it, the supervisor sweeps cores (measure/inrun/windows.py): a window at the
job's full size, then one at fewer cores, then full again, for every count of Synergy's
halving search, each count `sweep_repeats` times, so that drift and epoch boundaries fall
on both sides of every comparison. The windows give the profile its points, with their
runs and spreads; the throughput model gets the trainers' and the loader workers' CPU
time per sample from the processes' own counters. Once the profile is stored, the
decision table is compiled and this user's pending jobs of the workload are right-sized
in place (decisions/pending.py).

A job that was right-sized in place while it waited trains with the decision's loader
workers (the node prolog hands them to its tasks: hooks/taskenv.py); a workload measured
already, or being measured by another job now, trains watched only. Every job of a
measured workload has its memory followed to its end, as the measured one has: a
workload's peak can come long after the first seconds (a heap that grows over epochs, a
validation pass), and a job that peaks above its workload's profile raises it, so that
the decision and the jobs still pending cover that peak.
Nothing here can fail the job or change what it computes: a fault ends the measurement,
gives every core back, and is one line in the job's log.

Long because the request, the choice of what to do beside a job (task mode's supervisor,
measure/inrun/attach.py, makes it too) and the sweep it may start are read together.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import sys
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, NoReturn, Sequence

from slurm_synergy import __version__
from slurm_synergy.argtypes import int_at_least
from slurm_synergy.model import comment as comment_format
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.profile import (Allocation, GpuReadings, Point, PointError, Profile,
                                         ProfileError, ThroughputModel)
from slurm_synergy.model.throughput import predict
from slurm_synergy.probe import cmdfiles
from slurm_synergy.probe.affinity import job_pids
from slurm_synergy.probe.records import RECORD_S, WATCH_RECORD_S, ProbeConfig
from slurm_synergy.probe.supervise import PEAK_S, During, Started, run, watch_exit
from slurm_synergy.profiles import ProfileStore, Unmeasured, hold_note
from slurm_synergy.measure.inrun.follow import PROG, Follow, cut_cores, tree_memory
from slurm_synergy.measure.search import below_plateau, halving
from slurm_synergy.measure.lock import profiling_lock
from slurm_synergy.measure.inrun.windows import RunWindows, Window
from slurm_synergy.site import Site

USAGE_EXIT = 2


@dataclass(frozen=True)
class InRunRequest:
    """One job's run, as its script asks for it."""

    fingerprint: str
    job_name: str
    command: tuple[str, ...]
    out: Path                        # the probe's result file
    workers: int | None = None       # loader workers the probe sets (the command has no option)
    record_s: float = WATCH_RECORD_S   # the processes' record pace outside the windows


def run_job(req: InRunRequest, site: Site, log: Callable[[str], None]) -> int:
    """Run the job's command to its end, measured if it is this workload's first, its
    memory followed if its workload is measured already."""
    # The command runs once, below, whatever happens here: a fault in looking up or
    # locking the workload only means this run is not measured.
    with contextlib.ExitStack() as held:
        beside = choose(req, site, True, held, log)
        return _watch(req, list(req.command), req.workers, beside.during, beside.swept)


def file_hold(store: ProfileStore, fp: str, job_id: str, why: str,
              log: Callable[[str], None]) -> None:
    """Say why nothing is measured, in one line, and file the workload's hold: a run of
    its program would measure nothing again, so its jobs are not marked for measuring
    while the hold lasts (profiles.py). Never raises."""
    try:
        store.hold(Unmeasured(fp, why, job_id, _now()))
    except (OSError, ProfileError) as e:
        log(f"{PROG}: {why} (no hold filed: {e})")
        return
    log(f"{PROG}: {why}; {hold_note(fp)}")


def no_step_why(seen_s: float, command: str = "") -> str:
    """Why a run that took no training step in `seen_s` seconds (of `command`, where
    named) measured nothing: the reason its hold keeps and its log line starts with."""
    of = f" of {command}" if command else ""
    return (f"no training step seen in {seen_s:.0f}s{of} (no batch from a data loader, no "
            "optimizer step, no backward pass); no profile")


def held_elsewhere(store: ProfileStore, fp: str, job_id: str) -> bool:
    """Whether `fp` is held by a hold another job filed: one this job filed (a plain
    script's helper that ran long without a step, measure/inrun/no_step.py) does not stop
    its own training from being measured, and a profile saved then ends it."""
    if not store.is_held(fp):
        return False
    record = store.hold_of(fp)
    return not (job_id and record is not None and record.job_id == job_id)


@dataclass(frozen=True)
class Beside:
    """What the supervisor does beside a job's run."""

    job_id: str
    during: During | None           # the sweep, or following its memory; None: nothing
    swept: bool = False


def choose(req: InRunRequest, site: Site, marked: bool,
           held: contextlib.ExitStack, log: Callable[[str], None],
           may_sweep: bool = True) -> Beside:
    """Beside a job of this workload: follow its memory where it was decided or its
    workload is measured already; where it is `marked` (at submission, or in its comment
    since: pending.undo_pending) and `may_sweep`, and no other job measures the workload
    now, measure it (the lock is held in `held` for the run). Never raises."""
    job_id, comment = os.environ.get("SLURM_JOB_ID", ""), ""
    try:
        comment = site.slurm.comment(job_id) if job_id else ""
    except SynergyError as e:
        log(f"{PROG}: cannot read job {job_id}'s comment ({e}); it runs as submitted")
    marks = comment_format.marks(comment)
    marked = may_sweep and (marked or marks.get("profile") == "1")
    store = ProfileStore.default()
    follow = Follow(req.fingerprint, site, store, job_id, log, cut=cut_cores(comment)).during
    if comment_format.decision(comment) is not None:
        log(f"{PROG}: job {job_id} trains as decided ({marks['decision']}); its memory is "
            "followed")
        return Beside(job_id, follow)
    try:
        if store.has(req.fingerprint):
            log(f"{PROG}: {req.fingerprint} is measured already; job {job_id} trains as "
                "submitted")
            return Beside(job_id, follow)
        if not marked:
            return Beside(job_id, None)
        if held_elsewhere(store, req.fingerprint, job_id):
            log(f"{PROG}: a marked run of {req.fingerprint} had nothing to measure lately; "
                f"job {job_id} trains as submitted (`synergy profiles --forget "
                f"{req.fingerprint}` measures the next)")
            return Beside(job_id, None)
        if not held.enter_context(profiling_lock(store, req.fingerprint)):
            log(f"{PROG}: another job measures {req.fingerprint} now; job {job_id} trains "
                "as submitted")
            return Beside(job_id, None)
        # This job's own hold goes: measured now, and where that fails its next job is
        # marked again, as before the hold.
        with contextlib.suppress(OSError):
            store.forget(req.fingerprint)
        return Beside(job_id, Sweep(req, site, store, job_id, log).during, True)
    except (OSError, ProfileError) as e:
        log(f"{PROG}: cannot look up or lock {req.fingerprint} in {store.root} ({e}); "
            f"job {job_id} trains as submitted")
        return Beside(job_id, None)


def _watch(req: InRunRequest, command: list[str], workers: int | None,
           during: During | None, swept: bool = False) -> int:
    # Swept: the processes write their records at the windows' pace from the start (the
    # supervisor needs a first record to begin); the sweep's end slows them again.
    config = ProbeConfig(mode="watch", workers=workers,
                         interval_s=RECORD_S if swept else req.record_s, controlled=swept)
    try:
        result = run(config, command, req.out.resolve(), 0.0, during=during)
    except OSError as e:
        print(f"{PROG}: error: {command[0]}: {e}", file=sys.stderr)
        return 127
    return watch_exit(result)


class Sweep:
    """What the supervisor does beside the first job of a workload."""

    def __init__(self, req: InRunRequest, site: Site, store: ProfileStore, job_id: str,
                 log: Callable[[str], None]) -> None:
        self.req, self.site, self.store = req, site, store
        self.policy, self.slurm = site.policy, site.slurm
        self.job_id, self.log = job_id, log
        self.overhead = (0.0, 0.0)     # the supervisor's CPU seconds over the sweep's

    def during(self, proc: Started, folder: Path) -> None:
        """Sweep the job's cores in windows while it trains, save the profile and the decisions it
        makes, then follow the job's memory to its end."""
        allowed = os.sched_getaffinity(0)
        fp = self.req.fingerprint
        if len(allowed) < 2:
            self.log(f"{PROG}: job {self.job_id} has one core: no sweep, no profile")
            return
        bound = bound_elsewhere(proc.pid, allowed)
        if bound:
            # A launcher that binds each rank to cores of its own (numactl, DeepSpeed's
            # --bind_cores_to_rank): windows would hold every rank to the same cores,
            # and giving the cores back would undo the binding.
            self._hold(f"job {self.job_id}'s processes keep cores of their own ({bound}): "
                       "no sweep, no profile")
            return
        program = cmdfiles.of_process(proc.pid)
        windows = RunWindows(proc, folder, allowed, self.log)
        wait_s = self.policy.first_batch_timeout_s
        if not windows.wait_for_steps(time.monotonic() + wait_s):
            if not windows.alive():     # a short run, or one that failed: the next may train
                self.log(f"{PROG}: the job ended before its first training step; no profile")
            else:
                self._hold(no_step_why(wait_s))
            return
        started = _now()
        self.log(f"{PROG}: measuring {fp} ({self.req.job_name}) while job {self.job_id} "
                 f"trains: {len(allowed)} cores swept in windows of "
                 f"{self.policy.sweep_window_s:g}s")
        cpu0, wall0 = _own_cpu_s(), time.monotonic()
        try:
            runs = self._windows(windows)
        finally:
            windows.close(self.req.record_s)
        if runs:
            windows.read_peak(PEAK_S)      # at the full size again, as the offline profile
        # What watching cost, beside what the windows at fewer cores cost: the supervisor
        # shares the job's cores.
        self.overhead = (_own_cpu_s() - cpu0, time.monotonic() - wall0)
        profile = self._profile(windows, runs, started, program)
        if profile is None:
            self.log(f"{PROG}: no profile: " + "; ".join(windows.trouble.reasons or
                                                         ["no full window"]))
            return
        path = self.store.save(profile)
        self.log(f"{PROG}: {fp}: {profile.summary()}; peak {profile.model.footprint_mb:.0f} MB; "
                 f"{profile.notes[0]}; saved {path}")
        self._mark_measured()
        follow = Follow(fp, self.site, self.store, self.job_id, self.log,
                        measured=program)
        follow.apply(profile)
        # The job trains on: a later peak (validation, a bigger epoch) must count.
        follow.until_it_ends(windows.tree, windows.proc)

    def _hold(self, why: str) -> None:
        file_hold(self.store, self.req.fingerprint, self.job_id, why, self.log)

    def _windows(self, windows: RunWindows) -> list[Window]:
        """The schedule: a warm-up window left out, then full, k, full, k', full, ...;
        a count far below the full size rules out the counts below it."""
        top, s = windows.top, self.policy.sweep_window_s
        counts = halving(top, len(windows.trainers()))
        runs: list[Window] = []

        def full() -> bool:
            """Measure one window at the full core count, kept in `runs`; False where none could be."""
            w = windows.measure(top, s)
            if w is not None:
                runs.append(w)
            return w is not None
        if windows.measure(top, s) is None or not full():
            return runs
        active = counts[1:]
        for repeat in range(self.policy.sweep_repeats):
            for k in list(active):
                w = windows.measure(k, s)
                if w is None:
                    return runs
                runs.append(w)
                if not full():
                    return runs
                # A count far below the full size rules out the counts below it.
                if repeat == 0 and below_plateau(w.samples_per_s, _bracket(runs, -2)):
                    active = [c for c in active if c >= k]
        return runs

    def _profile(self, windows: RunWindows, runs: list[Window], started: str,
                 program: cmdfiles.Seen | None) -> Profile | None:
        full = [w for w in runs if w.cores == windows.top]
        if not full:
            return None
        procs = max(1, len(windows.trainers()))
        # Over all processes, as an offline point counts them (steps.to_point).
        workers = procs * max((r.loader_workers or 0 for r in windows.trainers()), default=0)
        tree = windows.tree
        mem_mb = int(os.environ.get("SLURM_MEM_PER_NODE", "0") or 0)
        gpus = int(os.environ.get("SLURM_GPUS_ON_NODE", "0") or 0)
        full_rate = statistics.median(w.samples_per_s for w in full)

        def point(k: int, rates: list[float], ws: list[Window]) -> Point:
            """The train point at `k` cores: the median of its rates and of its windows' figures."""
            return Point(measure="train", cores=k, workers=workers, mem_mb=mem_mb,
                         samples_per_s=statistics.median(rates),
                         data_stall_fraction=statistics.median(w.wait_share for w in ws),
                         host_cpu_s_per_sample=statistics.median(
                             w.trainer_cpu_s / w.samples for w in ws if w.samples),
                         step_s=sum(w.seconds for w in ws), repeats=tuple(rates),
                         **tree_memory(tree))
        points = [point(windows.top, [w.samples_per_s for w in full], full)]
        lost_s = 0.0
        for k in sorted({w.cores for w in runs if w.cores < windows.top}, reverse=True):
            # Each run against the full windows either side of it: drift cancels.
            idx = [i for i, w in enumerate(runs) if w.cores == k]
            rates = [runs[i].samples_per_s / _bracket(runs, i) * full_rate for i in idx]
            lost_s += sum(max(0.0, 1 - runs[i].samples_per_s / _bracket(runs, i))
                          * runs[i].seconds for i in idx)
            points.append(point(k, rates, [runs[i] for i in idx]))
        missing = [k for k in halving(windows.top, procs) if k not in
                   {p.cores for p in points}]
        cpu_s, wall_s = self.overhead
        aside = (f" ({windows.set_aside} more set aside for a pause in training: a "
                 "validation phase, an epoch's start)") if windows.set_aside else ""
        notes = [f"measured in the run: {len(runs)} windows{aside}; the job lost about "
                 f"{lost_s:.1f}s of training to those at fewer cores; the supervisor used "
                 f"{cpu_s / max(wall_s, 1e-9):.1%} of a core over the sweep's {wall_s:.0f}s"]
        notes += [f"incomplete: {why}" for why in windows.trouble.reasons]
        if missing and windows.trouble.reasons:
            notes.append("not measured: " + ", ".join(f"{k} cores" for k in missing))
        per_sample = [w for w in full if w.samples]
        h = statistics.median(w.trainer_cpu_s / w.samples for w in per_sample)
        p = statistics.median(w.other_cpu_s / w.samples for w in per_sample)
        stall = statistics.median(w.wait_share for w in full)
        model = ThroughputModel(
            basis="in-run", prep_core_s=p, host_core_s=h,
            device_rate=full_rate / max(0.05, 1 - stall) if gpus else None,
            footprint_mb=tree.footprint_mb, fetch=None, anon_mb=tree.memory().anon_mb)
        held = tuple(PointError(pt.cores, pt.workers, pt.samples_per_s,
                                predict(model, pt.cores, None, pt.workers), pt.spread)
                     for pt in points if pt.samples_per_s > 0)
        job = self.req
        return Profile(
            fingerprint=job.fingerprint, job_name=job.job_name, command=job.command,
            batch=round(sum(w.samples for w in full) / max(1, sum(w.steps for w in full))),
            allocation=Allocation(windows.top, mem_mb, gpus, socket.gethostname(), "in-run",
                                  self.job_id, procs),
            points=tuple(points), model=replace(model, held_out=held),
            gpu=GpuReadings(available=False, reason="an in-run profile reads no GPU; the node "
                            "epilog records the job's GPU energy and use"),
            started=started, finished=_now(), profiling_s=round(lost_s, 2),
            profiler_version=__version__, notes=tuple(notes),
            command_files=program.unchanged() if program else (),
            per_step=not all(r.batch_size_known for r in windows.trainers()))

    def _mark_measured(self) -> None:
        """measured=run in this job's comment, so sacct and the reports tell the job
        that was measured from one that only waited for its workload's decision."""
        if not self.job_id:
            return
        try:
            self.slurm.mark(self.job_id, comment_format.Marks({"measured": "run"}))
        except SynergyError as e:
            self.log(f"{PROG}: job {self.job_id}'s comment not marked: {e}")


def bound_elsewhere(top: int, allowed: set[int]) -> str:
    """A process of the tree under `top` whose CPUs are not `allowed`, as "pid N: CPUs";
    "" when every one runs on all of them."""
    for pid in job_pids(top):
        with contextlib.suppress(OSError):
            cpus = os.sched_getaffinity(pid)
            if cpus != allowed:
                return f"pid {pid}: CPUs {','.join(map(str, sorted(cpus)))}"
    return ""


def _own_cpu_s() -> float:
    """This process's CPU time so far (user and system), in seconds."""
    t = os.times()
    return t.user + t.system


def _bracket(runs: list[Window], i: int) -> float:
    """The mean rate of the full windows either side of run `i` (one at the ends)."""
    top = max(w.cores for w in runs)
    i = i % len(runs)
    near = [w.samples_per_s for w in (runs[i - 1] if i > 0 else None,
                                       runs[i + 1] if i + 1 < len(runs) else None)
            if w is not None and w.cores == top]
    return statistics.mean(near) if near else statistics.median(
        w.samples_per_s for w in runs if w.cores == top)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """Exit with USAGE_EXIT and one line naming the bad option."""
        self.exit(USAGE_EXIT, f"{PROG}: error: {message} (see --help)\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the job's command to its end, measured or followed as run_job decides; returns its
    exit status."""
    p = _Parser(prog="python -m slurm_synergy.measure.inrun.supervisor",
                description="Run a job's training command to its end, measuring it while "
                "it trains if it is its workload's first.")
    p.add_argument("--fingerprint", required=True)
    p.add_argument("--job-name", default="")
    p.add_argument("--out", type=Path, required=True, help="the probe's result file")
    p.add_argument("--workers", type=int_at_least(0),
                   help="loader workers the probe sets (the command has no worker option)")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    command = [c for c in args.command]
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        p.error("no command to run (-- COMMAND...)")

    def log(line: str) -> None:
        """One line to the job's log (this process's standard error)."""
        print(line, file=sys.stderr, flush=True)
    site = Site.load(on_bad_policy=lambda e: log(
        f"{PROG}: the default policy measures this run: {e}"))
    req = InRunRequest(args.fingerprint, args.job_name, tuple(command), args.out,
                       args.workers)
    return run_job(req, site, log)


if __name__ == "__main__":
    sys.exit(main())
