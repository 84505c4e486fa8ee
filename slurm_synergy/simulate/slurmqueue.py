"""One node's queue as slurmctld runs it with sched/backfill and priority/basic (the local
cluster's slurm.conf), job by job: what the lease-round simulator (simulator.py) does not
model, and what decides whether cores that right-sizing frees run anything.

- Priority is submission order (priority/basic).
- The main scheduler runs at every submission and every end: it starts pending jobs in
  priority order while they fit, and stops at the first that does not (a blocked
  partition keeps its order).
- Every `bf_interval_s` (Slurm's default 30 s, from the first submission) the backfill
  scheduler gives each pending job, in priority order, the earliest start at which it
  fits beside the running jobs and the starts given to jobs ahead of it, and starts those
  whose earliest start is now. Slurm knows a running job's end only from its time limit
  (rounded up to bf_resolution, 60 s), so a job jumps ahead only where its own limit ends
  before a job ahead of it would start; it then really ends after its run time.
- A workload's first job to start, while it has no decision, is measured (it runs as
  asked, for its measuring run time); when it ends its decision right-sizes the
  workload's jobs still pending and every later one (the in-place update and the shim).
  Jobs of the workload that start while it is measured run as asked.
- Time limits (`limits`), which backfill plans with:
    asked    every job's --time;
    history  a user's jobs get the mean run of the user's last two ended jobs as their
             --time (Tsafrir et al.'s predictor, as the kill time): a job whose run is
             longer is killed at it (TIMEOUT; its JCT is then its kill time);
    ours     root's timer (decisions/timelimits.py, the same rule: model/runtime.py) sets
             --time-min from the workload's ended jobs; backfill plans a job with it and
             starts it with its limit lowered to it, and the limit goes back to --time
             RAISE_LEFT_S before it would end a job that still runs: none is killed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from slurm_synergy.model.runtime import Finished, TimeRule, predict, time_min_minutes

BF_INTERVAL_S = 30.0      # slurm.conf SchedulerParameters bf_interval, Slurm's default
BF_RESOLUTION_S = 60.0    # bf_resolution: backfill's clock, Slurm's default
LIMITS = ("asked", "history", "ours")
RAISE_LEFT_S = 60.0       # the local cluster's timer's (decisions/timelimits.raise_left_s(15))


@dataclass(frozen=True)
class Size:
    """What a job holds and how long it runs holding it."""

    cpus: int
    mem_mb: int
    run_s: float
    gpus: int = 1


@dataclass(frozen=True)
class QueueJob:
    job_id: int
    workload: str             # a user's workload: its jobs share one decision
    submit_s: float
    limit_s: float            # the job's time limit (--time), seconds
    asked: Size
    decided: Size | None = None     # None: never right-sized (the plugin off)
    measuring_s: float = 0.0        # run time of the run that measures it (0: asked's)
    user: str = ""                  # whose job: a history-based --time follows the user


@dataclass(frozen=True)
class Node:
    cpus: int
    mem_mb: int
    gpus: int


@dataclass(frozen=True)
class Ran:
    job_id: int
    submit_s: float
    start_s: float
    end_s: float
    cpus: int
    asked_cpus: int
    killed: bool = False          # ended by a limit shorter than its run
    past_time_min: bool = False   # ran past the time_min it started with


@dataclass(frozen=True)
class _Running:
    ran: Ran
    job: QueueJob
    size: Size
    measures: bool
    lowered_s: float = 0.0        # the limit it started with where lower than --time

    def limit_at(self, now: float) -> float:
        """Its limit as slurmctld has it at `now`: a lowered one until it is put back."""
        if self.lowered_s and now < self.ran.start_s + self.lowered_s - RAISE_LEFT_S:
            return self.lowered_s
        return self.job.limit_s


@dataclass
class _Queue:
    node: Node
    pending: list[QueueJob] = field(default_factory=list)
    running: dict[int, _Running] = field(default_factory=dict)
    decided: set[str] = field(default_factory=set)
    measuring: set[str] = field(default_factory=set)
    done: list[Ran] = field(default_factory=list)
    limits: str = "asked"
    rule: TimeRule = TimeRule()
    ended: dict[str, list[Finished]] = field(default_factory=dict)
    by_user: dict[str, list[float]] = field(default_factory=dict)

    def planned_s(self, job: QueueJob) -> float:
        """The limit backfill plans a pending job with."""
        if self.limits == "history":
            return self.history_s(job)
        if self.limits == "ours":
            return self.time_min_s(job) or job.limit_s
        return job.limit_s

    def history_s(self, job: QueueJob) -> float:
        """A history-based --time: the mean of the user's last two ended runs."""
        last = self.by_user.get(job.user or job.workload, [])[-2:]
        return min(job.limit_s, sum(last) / len(last)) if last else job.limit_s

    def time_min_s(self, job: QueueJob) -> float:
        """The --time-min the timer would set now (0: none)."""
        size = self.size(job)
        slowdown = (max(1.0, size.run_s / job.asked.run_s)
                    if job.decided is not None and size is job.decided else math.inf)
        p = predict(self.ended.get(job.workload, []), size.cpus, slowdown, self.rule)
        minutes = time_min_minutes(p, math.ceil(job.limit_s / 60), self.rule) if p else None
        return 60.0 * minutes if minutes else 0.0

    def size(self, job: QueueJob) -> Size:
        """What a pending job asks for now: its decision once its workload has one."""
        if job.decided is not None and job.workload in self.decided:
            return job.decided
        return job.asked

    def free(self) -> tuple[int, int, int]:
        """What the node has free beside the running jobs: (cpus, mem_mb, gpus)."""
        return _left(self.node, [r.size for r in self.running.values()])

    def start(self, job: QueueJob, now: float, backfilled: bool = False) -> None:
        """Start a pending job at `now`: measured (as asked) where it is its undecided workload's
        first; its limit lowered where backfill starts it under "ours", its run cut at the
        prediction under "history"."""
        measures = job.decided is not None and job.workload not in self.decided \
            and job.workload not in self.measuring
        size = self.size(job)
        run_s = (job.measuring_s or job.asked.run_s) if measures else size.run_s
        lowered = self.time_min_s(job) if self.limits == "ours" and backfilled else 0.0
        killed = self.limits == "history" and run_s > self.history_s(job)
        if killed:
            run_s = self.history_s(job)
        if measures:
            self.measuring.add(job.workload)
        self.pending.remove(job)
        self.running[job.job_id] = _Running(
            Ran(job.job_id, job.submit_s, now, now + run_s, size.cpus, job.asked.cpus,
                killed, 0 < lowered < run_s), job, size, measures, lowered)

    def end(self, job_id: int) -> None:
        """End a running job: its workload decided if it measured it, and its run kept in the
        histories the time limits read."""
        r = self.running.pop(job_id)
        if r.measures:
            self.measuring.discard(r.job.workload)
            self.decided.add(r.job.workload)
        self.by_user.setdefault(r.job.user or r.job.workload, []).append(
            r.ran.end_s - r.ran.start_s)
        self.ended.setdefault(r.job.workload, []).append(Finished(
            r.ran.job_id, 0, "", "TIMEOUT" if r.ran.killed else "COMPLETED",
            math.ceil(r.ran.end_s - r.ran.start_s), r.size.cpus))
        self.done.append(r.ran)


def _fits(size: Size, free: tuple[int, int, int]) -> bool:
    return size.cpus <= free[0] and size.mem_mb <= free[1] and size.gpus <= free[2]


def _main(q: _Queue, now: float) -> None:
    for job in sorted(q.pending, key=lambda j: (j.submit_s, j.job_id)):
        if not _fits(q.size(job), q.free()):
            return
        q.start(job, now)


def _limit(limit_s: float) -> float:
    return math.ceil(limit_s / BF_RESOLUTION_S) * BF_RESOLUTION_S


def _backfill(q: _Queue, now: float) -> None:
    """Each pending job's earliest start against limits and the starts given ahead of it;
    those that can start now do."""
    # (start, end, size) of what holds the node in Slurm's view
    holds: list[tuple[float, float, Size]] = [
        (now, max(r.ran.start_s + _limit(r.limit_at(now)), now + 1e-9), r.size)
        for r in q.running.values()]
    for job in sorted(q.pending, key=lambda j: (j.submit_s, j.job_id)):
        size, span = q.size(job), _limit(q.planned_s(job))
        at = _earliest(q.node, holds, size, now, span)
        if at <= now:
            q.start(job, now, backfilled=True)
        holds.append((at, at + span, size))


def _earliest(node: Node, holds: Sequence[tuple[float, float, Size]], size: Size,
              now: float, span: float) -> float:
    for at in sorted({now, *(end for _, end, _ in holds if end > now)}):
        points = [at, *(s for s, _, _ in holds if at < s < at + span)]
        if all(_fits(size, _free_at(node, holds, p)) for p in points):
            return at
    return math.inf


def _free_at(node: Node, holds: Sequence[tuple[float, float, Size]],
             t: float) -> tuple[int, int, int]:
    return _left(node, [s for start, end, s in holds if start <= t < end])


def _left(node: Node, held: Sequence[Size]) -> tuple[int, int, int]:
    """What the node has free (cpus, mem_mb, gpus) beside the sizes `held`."""
    return (node.cpus - sum(s.cpus for s in held), node.mem_mb - sum(s.mem_mb for s in held),
            node.gpus - sum(s.gpus for s in held))


def run_queue(jobs: Sequence[QueueJob], node: Node,
              bf_interval_s: float = BF_INTERVAL_S, limits: str = "asked",
              rule: TimeRule | None = None) -> list[Ran]:
    """Every job's start and end, in job id order, with time limits as `limits` says
    (`rule`: the time_min rule of "ours", the shipped policy's where None)."""
    if limits not in LIMITS:
        raise ValueError(f"limits must be one of {', '.join(LIMITS)}, not {limits!r}")
    q = _Queue(node, limits=limits, rule=rule or TimeRule())
    arrivals = sorted(jobs, key=lambda j: (j.submit_s, j.job_id))
    if not arrivals:
        return []
    for job in arrivals:
        if not _fits(job.asked, (node.cpus, node.mem_mb, node.gpus)):
            raise ValueError(f"job {job.job_id} asks more than the node has")
    first = arrivals[0].submit_s
    tick = first + bf_interval_s
    at = 0
    while at < len(arrivals) or q.pending or q.running:
        next_end = min((r.ran.end_s for r in q.running.values()), default=math.inf)
        next_arrival = arrivals[at].submit_s if at < len(arrivals) else math.inf
        now = min(next_end, next_arrival, tick if q.pending else math.inf)
        if now == next_end:
            for jid in [j for j, r in q.running.items() if r.ran.end_s == now]:
                q.end(jid)
            _main(q, now)
        elif now == next_arrival:
            while at < len(arrivals) and arrivals[at].submit_s == now:
                q.pending.append(arrivals[at])
                at += 1
            _main(q, now)
        else:
            _backfill(q, now)
            tick += bf_interval_s
        while tick <= now:
            tick += bf_interval_s
    return sorted(q.done, key=lambda r: r.job_id)


@dataclass(frozen=True)
class QueueFigures:
    makespan_s: float
    mean_jct_s: float
    mean_wait_s: float
    killed: int = 0
    past_time_min: int = 0


def figures(ran: Sequence[Ran]) -> QueueFigures:
    """Makespan from the first submission to the last end; JCT from submission to end."""
    if not ran:
        return QueueFigures(0.0, 0.0, 0.0)
    return QueueFigures(
        makespan_s=max(r.end_s for r in ran) - min(r.submit_s for r in ran),
        mean_jct_s=sum(r.end_s - r.submit_s for r in ran) / len(ran),
        mean_wait_s=sum(r.start_s - r.submit_s for r in ran) / len(ran),
        killed=sum(r.killed for r in ran), past_time_min=sum(r.past_time_min for r in ran))

