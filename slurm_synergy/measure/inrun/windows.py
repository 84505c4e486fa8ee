"""Windows of a running job: its processes held to k of its cores for a few seconds, and
what they did meanwhile.

The probe's hooks in every training process keep cumulative counters (steps, samples,
time waiting on data) up to their last step boundary, and follow the supervisor's
orders (probe/records.py CONTROL_NAME): a window starts at each process's first step
boundary after it has seen the order (its torch threads matched to the window, its
threads already held to the window's cores), and ends at the last boundary it recorded
before the cores change again, so a window counts only whole steps run under it. The
loader workers' and the trainers' CPU time comes from the processes' own counters.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil

from slurm_synergy.fileio import atomic_write_text
from slurm_synergy.probe.affinity import first_cpus, job_pids, pin
from slurm_synergy.probe.records import CONTROL_NAME, RECORD_S, ProcessRecord, read_records
from slurm_synergy.probe.supervise import PEAK_LOOK_S, Started
from slurm_synergy.probe.tree import ProcessTree

# The longest a window waits for every trainer's first boundary after an order, and
# then for a step recorded after it: a step may take longer than a window, or a trainer
# at the lowest CPU priority beside busier work may not run for a second or more.
ACK_S = 30.0
# How often a window looks at the job's processes (their memory; threads to hold) and
# reads their proportional memory (smaps_rollup). The supervisor runs beside the job on
# its cores: at four looks a second with smaps_rollup each time it took 5% of a core,
# from the full windows only (at fewer cores it had a core of its own), which made fewer
# cores look better. A process forked in a window inherits its parent's narrow set
# meanwhile.
LOOK_S = 1.0
PSS_LOOK_S = 5.0
# A step of a window that lasted PAUSE_RATIO times its others' mean and took PAUSE_SHARE
# of the window is a pause in training (a validation phase, an epoch's start, a
# checkpoint): that window is set aside and measured again, up to RETRIES times, since
# where the pause falls would decide its rate.
PAUSE_RATIO = 4.0
PAUSE_SHARE = 0.05
RETRIES = 2


@dataclass(frozen=True)
class Window:
    """One window: the job's trainers at `cores`, summed over its training processes."""

    cores: int
    seconds: float                  # the longest trainer's measured span
    steps: int
    samples: int
    samples_per_s: float            # the trainers' rates added up
    wait_share: float               # of the step time waiting on data, mean of trainers
    trainer_cpu_s: float            # CPU time of the training processes
    other_cpu_s: float              # of every other process of the job (loader workers)
    pause_s: float = 0.0            # a pause's time beyond a step, where one fell in it


@dataclass
class Trouble:
    """What kept the measurement from being whole: each reason once, in order."""

    reasons: list[str] = field(default_factory=list)

    def add(self, why: str) -> None:
        """Note `why`, unless it is noted already."""
        if why not in self.reasons:
            self.reasons.append(why)


def _cpu_s(pids: list[int]) -> dict[int, float]:
    out = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            out[pid] = t.user + t.system
    return out


class RunWindows:
    """Opens windows on one running job; gives every core back when closed."""

    def __init__(self, proc: Started, folder: Path, allowed: set[int],
                 log: Callable[[str], None]) -> None:
        self.proc, self.folder, self.allowed, self.log = proc, folder, allowed, log
        self.top = len(allowed)
        self.tree = ProcessTree(proc.pid, pss_every_s=PSS_LOOK_S)
        self.trouble = Trouble()
        self.order = 0
        self.set_aside = 0     # windows measured again for a pause in them

    def alive(self) -> bool:
        """Whether the job's process still runs."""
        return self.proc.poll() is None

    def trainers(self) -> list[ProcessRecord]:
        """The processes that take batches (their record says they stepped)."""
        return [r for r in read_records(self.folder) if r.total_steps > 0]

    def _command(self, cores: int | None, record_s: float) -> None:
        self.order += 1
        write_order(self.folder, self.order, cores, self.top, record_s)

    def _hold(self, cpus: set[int]) -> None:
        done = pin(job_pids(self.proc.pid), cpus)
        for failure in done.failed[:3]:
            self.trouble.add(f"a thread could not be pinned ({failure})")

    def wait_for_steps(self, until: float) -> bool:
        """Block until a trainer has stepped (or the run ended, or `until`)."""
        while self.alive() and time.monotonic() < until:
            self.tree.look()
            if self.trainers():
                return True
            time.sleep(LOOK_S)
        return False

    def measure(self, cores: int, seconds: float) -> Window | None:
        """The job held to `cores` for `seconds` or until each trainer has recorded a step
        in it, whichever is longer; measured again where a pause in training fell in it
        (the last try kept); None when the run ended or a trainer did not take the order
        or step (the reason is in `trouble`)."""
        for _ in range(RETRIES):
            window = self._measure(cores, seconds)
            if window is None or not window.pause_s:
                return window
            self.set_aside += 1
        return self._measure(cores, seconds)

    def _measure(self, cores: int, seconds: float) -> Window | None:
        """One window at `cores` (measure)."""
        cpus = first_cpus(self.allowed, cores)
        self._hold(cpus)
        self._command(cores, RECORD_S)
        order = self.order
        start = self._acknowledged(order)
        if start is None:
            return None
        pids = job_pids(self.proc.pid)
        cpu0 = _cpu_s(pids)
        opened = time.monotonic()
        while self.alive() and time.monotonic() - opened < seconds:
            time.sleep(LOOK_S)
            self.tree.look()
            if cores < self.top:      # a process forked in the window: held too
                self._hold(cpus)
        end = self._stepped(start, cpus if cores < self.top else None)
        if end is None:
            self.trouble.add("the job ended inside a window" if not self.alive() else
                             f"a training process took no step in a window in {ACK_S:.0f}s")
            return None
        return _window(cores, start, end, cpu0, _cpu_s(job_pids(self.proc.pid)))

    def _stepped(self, start: dict[int, ProcessRecord],
                 cpus: set[int] | None) -> dict[int, ProcessRecord] | None:
        """Every trainer's latest record once each has recorded a step after `start`:
        a window ends on whole steps, so one shorter than a step stretches to it. None
        when the job ended first or ACK_S passed (a trainer stopped stepping: a
        validation phase). Processes forked meanwhile are held to `cpus`."""
        deadline = time.monotonic() + ACK_S
        looked = time.monotonic()
        while self.alive():
            end = {r.pid: r for r in self.trainers()}
            if all(_stepped_since(a, end.get(pid)) for pid, a in start.items()):
                return end
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.1)
            if time.monotonic() - looked >= LOOK_S:
                looked = time.monotonic()
                self.tree.look()
                if cpus is not None:
                    self._hold(cpus)
        return None

    def _acknowledged(self, order: int) -> dict[int, ProcessRecord] | None:
        deadline = time.monotonic() + ACK_S
        while self.alive() and time.monotonic() < deadline:
            ranks = self.trainers()
            if ranks and all(r.window >= order for r in ranks):
                return {r.pid: r for r in ranks}
            time.sleep(0.05)
        self.trouble.add("the job ended inside a window" if not self.alive() else
                         f"a training process did not take a window's order in {ACK_S:.0f}s "
                         "(its loader is read outside its steps, or it stopped stepping)")
        return None

    def read_peak(self, seconds: float) -> None:
        """The job's memory read ten times a second for `seconds` (supervise.PEAK_S),
        proportional memory at every look: the reads LOOK_S and PSS_LOOK_S apart, which
        keep the windows' cost down, miss a short-lived loader worker's pages."""
        until = time.monotonic() + seconds
        while self.alive() and time.monotonic() < until:
            self.tree.look(proportional=True)
            time.sleep(PEAK_LOOK_S)

    def close(self, record_s: float) -> None:
        """Every core back to every thread of the job, torch's threads to their own,
        records at their usual pace. Twice over the processes: one forked during the
        first pass inherits the narrow set."""
        with contextlib.suppress(OSError):
            self._command(None, record_s)
        for _ in range(2):
            self._hold(self.allowed)


def write_order(folder: Path, window: int, cores: int | None, of: int,
                record_s: float) -> None:
    """The supervisor's order to the job's processes (records.CONTROL_NAME), whole: from
    their next step, window `window` at `cores` of their `of` (None: their own), their
    records every `record_s` seconds."""
    atomic_write_text(folder / CONTROL_NAME, json.dumps(
        {"window": window, "cores": cores, "of": of, "record_s": record_s}), durable=False)


def _stepped_since(first: ProcessRecord, last: ProcessRecord | None) -> bool:
    """Whether `last` records a step taken after `first` (a later record of one trainer)."""
    return last is not None and last.clock > first.clock and \
        last.total_steps > first.total_steps


def _window(cores: int, start: dict[int, ProcessRecord], end: dict[int, ProcessRecord],
            cpu0: dict[int, float], cpu1: dict[int, float]) -> Window | None:
    """The window from each trainer's first and last record in it; None when a trainer
    took no step in it."""
    spans = [(first, end[pid]) for pid, first in start.items()
             if _stepped_since(first, end.get(pid))]
    if not spans or len(spans) < len(start):
        return None
    samples = sum(b.total_samples - a.total_samples for a, b in spans)
    trainers = {a.pid for a, _ in spans}
    used = {pid: cpu1[pid] - cpu0[pid] for pid in cpu1 if pid in cpu0}
    return Window(
        cores=cores, seconds=max(b.clock - a.clock for a, b in spans),
        steps=min(b.total_steps - a.total_steps for a, b in spans), samples=samples,
        samples_per_s=sum((b.total_samples - a.total_samples) / (b.clock - a.clock)
                          for a, b in spans),
        wait_share=sum((b.total_wait_s - a.total_wait_s) / (b.clock - a.clock)
                       for a, b in spans) / len(spans),
        trainer_cpu_s=sum(v for pid, v in used.items() if pid in trainers),
        other_cpu_s=sum(v for pid, v in used.items() if pid not in trainers),
        pause_s=max(_pause_s(a, b) for a, b in spans))


def _pause_s(first: ProcessRecord, last: ProcessRecord) -> float:
    """The time one trainer's longest step in the window took beyond its other steps'
    mean, where that makes it a pause in training (PAUSE_RATIO, PAUSE_SHARE); else 0.
    Three steps at least: with fewer, no step is the usual one."""
    steps = last.total_steps - first.total_steps
    span = last.clock - first.clock
    if steps < 3:
        return 0.0
    usual = (span - last.longest_step_s) / (steps - 1)
    excess = last.longest_step_s - usual
    return excess if last.longest_step_s > PAUSE_RATIO * usual and \
        excess > PAUSE_SHARE * span else 0.0
