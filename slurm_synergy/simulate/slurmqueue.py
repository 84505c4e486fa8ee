"""A cluster's queue as slurmctld runs it with sched/backfill and select/cons_tres, job by
job, over nodes of any shapes: what the lease-round simulator (simulator.py) does not
model, and what decides whether the cores and memory right-sizing frees run anything.

- Priority (priority.py): submission order (priority/basic), or priority/multifactor's
  age, job-size and fair-share factors.
- A job runs on one node (jobs here ask at most a node), the first in order that fits it
  (cons_tres with equal node weights), in its partition (a node in none is in every one).
- The main scheduler runs at every submission and every end: it tests up to
  default_queue_depth pending jobs in priority order, starts those that fit, and skips
  every later job of a partition once one of its jobs does not fit.
- Every `bf_interval_s` the backfill scheduler gives each of the first bf_max_job_test
  pending jobs, in priority order, the earliest start at which it fits on one node for
  its time limit beside the running jobs and the starts given to jobs ahead of it
  (nodespace.py), within bf_window, and starts those whose earliest start is now. Slurm
  knows a running job's end only from its time limit (rounded up to bf_resolution), so a
  job jumps ahead only where its own limit ends before a job ahead of it would start; it
  then really ends after its run time. A pass that no pending job could use now (none of
  them fits on any node) starts nothing and is not computed.
- A workload's first job to start, while it has no decision, is measured (it runs as
  asked, for its measuring run time); when it ends its decision right-sizes the
  workload's jobs still pending and every later one (the in-place update and the shim).
  Jobs of the workload that start while it is measured run as asked.
- Slurm 26.05's --mem-update (`QueueJob.mem_update`): a running job's memory lowered once,
  after a delay, to what it then holds plus a margin; the memory freed is free at once.
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

import bisect
import heapq
import math
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from slurm_synergy.model.runtime import Finished, TimeRule, predict, time_min_minutes
from slurm_synergy.simulate.nodespace import NodeSpace
from slurm_synergy.simulate.priority import Priority, Usage, priority

LIMITS = ("asked", "history", "ours")
RAISE_LEFT_S = 60.0       # the local cluster's timer's (decisions/timelimits.raise_left_s(15))


@dataclass(frozen=True)
class Scheduler:
    """slurm.conf's SchedulerParameters and Priority* settings, at Slurm's defaults."""

    bf_interval_s: float = 30.0
    bf_resolution_s: float = 60.0
    bf_window_s: float = 1440 * 60.0
    bf_max_job_test: int = 500
    queue_depth: int = 100          # default_queue_depth
    priority: Priority = Priority()


@dataclass(frozen=True)
class Size:
    """What a job holds and how long it runs holding it."""

    cpus: int
    mem_mb: int
    run_s: float
    gpus: int = 1

    @property
    def triple(self) -> tuple[int, int, int]:
        """(cores, MB, GPUs), as the node map counts them."""
        return (self.cpus, self.mem_mb, self.gpus)


@dataclass(frozen=True)
class QueueJob:
    job_id: int
    workload: str             # a user's workload: its jobs share one decision
    submit_s: float
    limit_s: float            # the job's time limit (--time), seconds
    asked: Size
    decided: Size | None = None     # None: never right-sized (the plugin off)
    measuring_s: float = 0.0        # run time of the run that measures it (0: asked's)
    user: str = ""                  # whose job: fair-share and a history-based --time
    partition: str = ""
    mem_update: tuple[float, int] | None = None   # (delay s, MB it is lowered to)


@dataclass(frozen=True)
class Node:
    cpus: int
    mem_mb: int
    gpus: int
    partitions: tuple[str, ...] = ()    # () : in every partition


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
    node: int = 0


@dataclass(frozen=True)
class QueueRun:
    """Every job's run, and the GPU-seconds left idle while jobs waited: all of them, and
    those on nodes with too few free cores or too little free memory for any waiting
    job's share of one GPU (sampled every backfill interval)."""

    ran: list[Ran]
    idle_gpu_s: float
    stranded_gpu_s: float


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
    nodes: Sequence[Node]
    sched: Scheduler
    limits: str = "asked"
    rule: TimeRule = TimeRule()
    pending: list[tuple[tuple, QueueJob]] = field(default_factory=list)
    running: dict[int, _Running] = field(default_factory=dict)
    events: list[tuple[float, int, int]] = field(default_factory=list)   # (t, 0 end/1 mem, id)
    decided: set[str] = field(default_factory=set)
    measuring: set[str] = field(default_factory=set)
    done: list[Ran] = field(default_factory=list)
    ended: dict[str, list[Finished]] = field(default_factory=dict)
    by_user: dict[str, list[float]] = field(default_factory=dict)
    changed: bool = True

    def __post_init__(self) -> None:
        self.caps = np.array([(n.cpus, n.mem_mb, n.gpus) for n in self.nodes], dtype=np.int64)
        self.free = self.caps.copy()
        self.usage = Usage(self.sched.priority.half_life_s)
        self.cluster_cpus = int(self.caps[:, 0].sum())
        self._masks: dict[str, np.ndarray] = {}

    def mask(self, partition: str) -> np.ndarray:
        """The nodes a job of `partition` may run on."""
        if partition not in self._masks:
            self._masks[partition] = np.array(
                [not partition or not n.partitions or partition in n.partitions
                 for n in self.nodes])
        return self._masks[partition]

    def key(self, job: QueueJob, now: float) -> tuple:
        """Its place in the queue: highest priority first, then submission."""
        p = self.sched.priority
        if not p.multifactor:
            return (job.submit_s, job.job_id)
        return (-priority(p, self.usage, job.user or job.workload, job.submit_s,
                          self.size(job).cpus, self.cluster_cpus, now),
                job.submit_s, job.job_id)

    def submit(self, job: QueueJob, now: float) -> None:
        """A job joins the queue at its priority now."""
        self.usage.users.add(job.user or job.workload)
        bisect.insort(self.pending, (self.key(job, now), job), key=lambda e: e[0])
        self.changed = True

    def reprioritise(self, now: float) -> None:
        """Every pending job's priority recomputed (PriorityCalcPeriod)."""
        self.usage.decay_to(now)
        self.pending = sorted(((self.key(j, now), j) for _, j in self.pending),
                              key=lambda e: e[0])

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

    def first_fit(self, size: Size, partition: str) -> int:
        """The first node with room for `size` now; -1 where none has."""
        fits = (self.free >= size.triple).all(axis=1) & self.mask(partition)
        n = int(fits.argmax())
        return n if fits[n] else -1

    def span_s(self, limit_s: float) -> float:
        """A limit as backfill plans with it: rounded up to bf_resolution."""
        r = self.sched.bf_resolution_s
        return math.ceil(limit_s / r) * r

    def start(self, job: QueueJob, node: int, now: float, backfilled: bool = False) -> None:
        """Start a pending job on `node` at `now`: measured (as asked) where it is its
        undecided workload's first; its limit lowered where backfill starts it under
        "ours", its run cut at the prediction under "history"."""
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
        self.free[node] -= size.triple
        self.running[job.job_id] = _Running(
            Ran(job.job_id, job.submit_s, now, now + run_s, size.cpus, job.asked.cpus,
                killed, 0 < lowered < run_s, node), job, size, measures, lowered)
        heapq.heappush(self.events, (now + run_s, 0, job.job_id))
        if job.mem_update and job.mem_update[0] < run_s and job.mem_update[1] < size.mem_mb:
            heapq.heappush(self.events, (now + job.mem_update[0], 1, job.job_id))
        self.changed = True

    def lower_mem(self, job_id: int) -> None:
        """--mem-update: the running job's memory lowered once; the rest freed at once."""
        r = self.running[job_id]
        assert r.job.mem_update is not None
        lowered = r.job.mem_update[1]
        self.free[r.ran.node, 1] += r.size.mem_mb - lowered
        self.running[job_id] = replace(r, size=replace(r.size, mem_mb=lowered))
        self.changed = True

    def end(self, job_id: int) -> None:
        """End a running job: its workload decided if it measured it, its run kept in the
        histories the time limits and fair-share read."""
        r = self.running.pop(job_id)
        self.free[r.ran.node] += r.size.triple
        if r.measures:
            self.measuring.discard(r.job.workload)
            self.decided.add(r.job.workload)
        run_s = r.ran.end_s - r.ran.start_s
        self.by_user.setdefault(r.job.user or r.job.workload, []).append(run_s)
        self.ended.setdefault(r.job.workload, []).append(Finished(
            r.ran.job_id, 0, "", "TIMEOUT" if r.ran.killed else "COMPLETED",
            math.ceil(run_s), r.size.cpus))
        if self.sched.priority.multifactor:
            self.usage.add(r.job.user or r.job.workload, r.size.cpus * run_s, r.ran.end_s)
        self.done.append(r.ran)
        self.changed = True


def _main(q: _Queue, now: float) -> None:
    """The main scheduler: up to queue_depth jobs in order; a partition stops at its first
    job that does not fit."""
    blocked: set[str] = set()
    started: list[int] = []
    for i, (_, job) in enumerate(q.pending[:q.sched.queue_depth]):
        if job.partition in blocked:
            continue
        n = q.first_fit(q.size(job), job.partition)
        if n < 0:
            blocked.add(job.partition)
            continue
        q.start(job, n, now)
        started.append(i)
    for i in reversed(started):
        del q.pending[i]


def _backfill(q: _Queue, now: float) -> None:
    """Each of the first bf_max_job_test jobs' earliest start against limits and the starts
    given ahead of it; those that can start now do."""
    head = q.pending[:q.sched.bf_max_job_test]
    sizes = np.array([q.size(j).triple for _, j in head], dtype=np.int64)
    states, where = np.unique(q.free, axis=0, return_inverse=True)
    room = np.asarray((states[None, :, :] >= sizes[:, None, :]).all(axis=2))  # job x state
    parts = {j.partition for _, j in head}
    if parts == {""}:
        can = room.any(axis=1)
    else:
        can = np.array([room[i, np.unique(where.ravel()[q.mask(j.partition)])].any()
                        for i, (_, j) in enumerate(head)])
    if not can.any():
        return
    last = int(np.flatnonzero(can)[-1])
    held: list[list[tuple[float, tuple[int, int, int]]]] = [[] for _ in q.nodes]
    for r in q.running.values():
        end = max(r.ran.start_s + q.span_s(r.limit_at(now)), now + 1e-9)
        held[r.ran.node].append((end, r.size.triple))
    space = NodeSpace(q.caps, held, now, q.sched.bf_window_s)
    started: list[int] = []
    for i, (_, job) in enumerate(head[:last + 1]):
        size, span = q.size(job), q.span_s(q.planned_s(job))
        at, n = space.earliest(size.triple, span, q.mask(job.partition))
        if n < 0:
            continue
        if at <= now:
            q.start(job, n, now, backfilled=True)
            space.start(n, now + span, size.triple)
            started.append(i)
        else:
            space.reserve(n, at, at + span, size.triple)
    for i in reversed(started):
        del q.pending[i]


def _idle(q: _Queue) -> tuple[int, int]:
    """GPUs idle now, and those of them whose node cannot hold any waiting job's share of
    one GPU in cores or memory."""
    idle = q.free[:, 2]
    gpu_jobs = [q.size(j) for _, j in q.pending[:q.sched.bf_max_job_test]
                if q.size(j).gpus > 0]
    if not gpu_jobs:
        return int(idle.sum()), 0
    cpg = min(s.cpus / s.gpus for s in gpu_jobs)
    mpg = min(s.mem_mb / s.gpus for s in gpu_jobs)
    short = (q.free[:, 0] < cpg) | (q.free[:, 1] < mpg)
    return int(idle.sum()), int(idle[short].sum())


def run_site(jobs: Sequence[QueueJob], nodes: Node | Sequence[Node],
             sched: Scheduler = Scheduler(), limits: str = "asked",
             rule: TimeRule | None = None) -> QueueRun:
    """Every job's start and end, in job id order, on `nodes` as `sched` schedules them,
    with time limits as `limits` says (`rule`: the time_min rule of "ours", the shipped
    policy's where None)."""
    if limits not in LIMITS:
        raise ValueError(f"limits must be one of {', '.join(LIMITS)}, not {limits!r}")
    nodes = [nodes] if isinstance(nodes, Node) else list(nodes)
    q = _Queue(nodes, sched, limits=limits, rule=rule or TimeRule())
    arrivals = sorted(jobs, key=lambda j: (j.submit_s, j.job_id))
    if not arrivals:
        return QueueRun([], 0.0, 0.0)
    for job in arrivals:
        if q.first_fit(job.asked, job.partition) < 0:
            raise ValueError(f"job {job.job_id} asks more than any node of its partition has")
    tick = arrivals[0].submit_s + sched.bf_interval_s
    recalc = arrivals[0].submit_s + sched.priority.calc_period_s
    idle_s = stranded_s = 0.0
    idle = stranded = 0
    at = 0
    while at < len(arrivals) or q.pending or q.running:
        next_event = q.events[0][0] if q.events else math.inf
        next_arrival = arrivals[at].submit_s if at < len(arrivals) else math.inf
        now = min(next_event, next_arrival, tick if q.pending else math.inf)
        if now == next_event:
            while q.events and q.events[0][0] == now:
                _, kind, jid = heapq.heappop(q.events)
                if jid not in q.running:
                    continue
                if kind:
                    q.lower_mem(jid)
                else:
                    q.end(jid)
            _main(q, now)
        elif now == next_arrival:
            while at < len(arrivals) and arrivals[at].submit_s == now:
                q.submit(arrivals[at], now)
                at += 1
            _main(q, now)
        else:
            if sched.priority.multifactor and now >= recalc:
                q.reprioritise(now)
                recalc = now + sched.priority.calc_period_s
                q.changed = True
            if q.changed:
                q.changed = False
                _backfill(q, now)
                idle, stranded = _idle(q)
            idle_s += idle * sched.bf_interval_s
            stranded_s += stranded * sched.bf_interval_s
            tick += sched.bf_interval_s
        while tick <= now:
            tick += sched.bf_interval_s
    return QueueRun(sorted(q.done, key=lambda r: r.job_id), idle_s, stranded_s)


def run_queue(jobs: Sequence[QueueJob], nodes: Node | Sequence[Node],
              bf_interval_s: float = 30.0, limits: str = "asked",
              rule: TimeRule | None = None) -> list[Ran]:
    """`run_site`'s runs, with Slurm's defaults but the backfill interval."""
    return run_site(jobs, nodes, Scheduler(bf_interval_s=bf_interval_s), limits, rule).ran


@dataclass(frozen=True)
class QueueFigures:
    makespan_s: float
    mean_jct_s: float
    mean_wait_s: float
    killed: int = 0
    past_time_min: int = 0
    p99_wait_s: float = 0.0


def figures(ran: Sequence[Ran]) -> QueueFigures:
    """Makespan from the first submission to the last end; JCT from submission to end."""
    if not ran:
        return QueueFigures(0.0, 0.0, 0.0)
    waits = sorted(r.start_s - r.submit_s for r in ran)
    return QueueFigures(
        makespan_s=max(r.end_s for r in ran) - min(r.submit_s for r in ran),
        mean_jct_s=sum(r.end_s - r.submit_s for r in ran) / len(ran),
        mean_wait_s=sum(waits) / len(ran),
        killed=sum(r.killed for r in ran), past_time_min=sum(r.past_time_min for r in ran),
        p99_wait_s=waits[min(len(waits) - 1, math.ceil(0.99 * len(waits)) - 1)])
