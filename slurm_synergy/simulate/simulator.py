"""The round loop: leases of `round_s` seconds, as in Synergy's simulator.

At each round boundary every lease ends, the waiting and running jobs are put in the
scheduling policy's order, and the allocation policy places them afresh on an empty
cluster (a job left out waits; a job moved is not charged for it, as in Synergy). A
job placed runs the whole round: it does `floor(round_s * speed / iter_s)` iterations,
its speed given by the speed model from the cores and memory per GPU it got, and it
ends with the lease in which its last iteration ran. Rounds start where Synergy's
simulator starts them: on the grid of multiples of `round_s` from t=0, the first at or
after the first arrival; a static trace (every job in within its first second) starts
one second after its first arrival, so that all of it starts together. A job arriving
between boundaries waits for the next. Rounds with nothing to run are skipped. How each
job comes to be right-sized, and what profiling costs it, is the flow's (flows.py).
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Mapping, Sequence

from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.policy import Policy
from slurm_synergy.simulate.allocate import Allocator, Free, Want, greedy, proportional, synergy_slurm, tune
from slurm_synergy.simulate.cluster import ClusterSpec
from slurm_synergy.simulate.demand import SPEED_MODELS, DemandBook, Demands
from slurm_synergy.simulate.flows import Flow, FlowCosts
from slurm_synergy.simulate.optimal import optimal
from slurm_synergy.simulate.order import ORDERS, JobState
from slurm_synergy.simulate.trace import SimJob
from slurm_synergy.simulate.workload import Workload, models_of

# Made afresh for each run: opt keeps per-server optima from round to round.
ALLOCATORS: dict[str, Callable[[], Allocator]] = {
    "proportional": lambda: proportional, "greedy": lambda: greedy, "tune": lambda: tune,
    "opt": lambda: partial(optimal, memo={}), "synergy-slurm": lambda: synergy_slurm,
}


@dataclass(frozen=True)
class Setup:
    order: str
    alloc: str
    speed: str = "matrix"
    flow: str = "known"
    costs: FlowCosts = FlowCosts()

    @property
    def label(self) -> str:
        """The setup in one word for tables and plots: order/alloc, and /flow unless "known"."""
        return f"{self.order}/{self.alloc}" + ("" if self.flow == "known" else f"/{self.flow}")


@dataclass
class Rounds:
    """One entry per round that ran."""

    start_s: list[float] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)        # GPUs held
    cpus: list[float] = field(default_factory=list)      # cores allocated
    mem_gb: list[float] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    alloc_s: list[float] = field(default_factory=list)   # the allocator's own time


@dataclass
class Outcome:
    setup: Setup
    cluster: ClusterSpec
    jobs: list[JobState]
    rounds: Rounds
    wall_s: float


def _nominal(alloc: str, book: DemandBook, work: Workload, gpus: int) -> float:
    d = book.of(work, gpus)
    return {"proportional": d.share.rate, "greedy": d.ideal.rate, "tune": d.ideal.rate,
            }.get(alloc, d.claim.rate)


def _asked(d: Demands) -> Demands:
    """A job's demands before its workload has a profile: its share and nothing else, so
    that every allocator gives it the share or nothing."""
    return Demands(d.share, d.share, d.share, d.share, (d.share,))


def _first_round(first_arrival: float, last_arrival: float, round_s: float) -> float:
    """When the first round starts: Synergy's --static runs at 1 s, its other runs on
    its round grid (ceil(first arrival / round) rounds in)."""
    if last_arrival - first_arrival < 1.0:
        return first_arrival + 1.0
    return math.ceil(first_arrival / round_s) * round_s


def simulate(trace: Sequence[SimJob], workloads: Mapping[str, Workload],
             cluster: ClusterSpec, setup: Setup, policy: Policy | None = None) -> Outcome:
    """Run the trace on the cluster in lease rounds under the setup's policies and speed
    model; returns every job's outcome and each round's use."""
    if setup.order not in ORDERS:
        raise SynergyError(f"scheduling policy {setup.order!r} is not one of "
                           f"{', '.join(ORDERS)}")
    if setup.alloc not in ALLOCATORS:
        raise SynergyError(f"allocation policy {setup.alloc!r} is not one of "
                           f"{', '.join(ALLOCATORS)}")
    if setup.speed not in SPEED_MODELS:
        raise SynergyError(f"speed model {setup.speed!r} is not one of "
                           f"{', '.join(SPEED_MODELS)}")
    models_of(workloads, (j.model for j in trace), "trace")
    total_gpus = cluster.gpus
    too_big = [j.job_id for j in trace if j.gpus > total_gpus]
    if too_big:
        raise SynergyError(f"job(s) {', '.join(too_big[:5])} ask for more GPUs than the "
                           f"cluster's {total_gpus}")
    began = time.perf_counter()
    speed = SPEED_MODELS[setup.speed]
    book = DemandBook(cluster, policy or Policy(), setup.speed)
    allocate = ALLOCATORS[setup.alloc]()
    order = ORDERS[setup.order]
    jobs = [JobState(i, j.job_id, j.model, j.arrival_s, j.iters, j.gpus,
                     workloads[j.model].iter_s,
                     _nominal(setup.alloc, book, workloads[j.model], j.gpus))
            for i, j in enumerate(trace)]
    sized = [book.of(workloads[j.model], j.gpus) for j in trace]
    wants = [Want(i, j.gpus, workloads[j.model], sized[i]) for i, j in enumerate(trace)]

    def resize(i: int, right: bool) -> None:
        """Size job `i` by its decision (`right`) or at its share, as the flow says."""
        w = wants[i]
        w.demands = sized[i] if right else _asked(sized[i])
        jobs[i].nominal = _nominal(setup.alloc if right else "proportional", book, w.work,
                                   w.gpus)

    flow = Flow(setup.flow, setup.costs, jobs, resize)
    arrivals = sorted(jobs, key=lambda j: (j.arrival_s, j.index))
    R = cluster.round_s
    rounds = Rounds()
    t0 = _first_round(arrivals[0].arrival_s, arrivals[-1].arrival_s, R)
    active: list = []
    again: list[tuple[float, int]] = []     # resubmitted jobs: (arrival, index), a heap
    now, nxt = t0, 0
    while nxt < len(arrivals) or active or again:
        while nxt < len(arrivals) and arrivals[nxt].arrival_s <= now:
            active.append(arrivals[nxt])
            flow.joined(arrivals[nxt])
            nxt += 1
        while again and again[0][0] <= now:
            j = jobs[heapq.heappop(again)[1]]
            active.append(j)
            flow.joined(j)
        if not active:      # idle: on to the boundary at or after the next arrival
            soonest = min(([arrivals[nxt].arrival_s] if nxt < len(arrivals) else [])
                          + ([again[0][0]] if again else []))
            now = t0 + math.ceil((soonest - t0) / R) * R
            continue
        flow.round_starts()
        active.sort(key=lambda j: order(j, now))
        free = Free(cluster)
        tick = time.perf_counter()
        for j in active:
            wants[j.index].weight = 1.0 / max(j.remaining_s(), 1.0)
        grants = allocate([wants[j.index] for j in active], free)
        rounds.alloc_s.append(time.perf_counter() - tick)
        if not grants and nxt == len(arrivals) and not again:
            raise SynergyError(f"{setup.label}: no job of the {len(active)} left can be "
                               f"placed on {cluster.name}, even on an empty cluster")
        ran, left = set(), set()
        cpus = mem = 0.0
        for g in grants:
            j = jobs[g.key]
            want = wants[g.key]
            # The speed its allocation gives it, whatever the allocator sized it by.
            s = speed(want.work, sized[g.key], g.cpus, g.mem_gb)
            step = math.floor(R / (j.iter_s / s)) if s > 0 else 0
            if not step:    # it would hold its GPUs for ever: the model cannot run it
                raise SynergyError(
                    f"{setup.label}: job {j.job_id} ({j.model}) does not finish one "
                    f"iteration in a {R:g} s round at the speed it got ({s:.2f} x its "
                    f"share, {j.iter_s:g} s an iteration there); make round_s longer")
            train_s, back = flow.leased(j, now, R)
            if train_s < R:
                step = math.floor(train_s / (j.iter_s / s))
            if back is not None:
                j.queued_s = back
                heapq.heappush(again, (back, j.index))
                left.add(j.index)
            j.done = min(j.iters, j.done + step)
            j.attained_s += R * j.gpus
            j.speed_sum += s
            j.last_speed = s
            if j.first_start_s is None:
                j.first_start_s = now
            if j.done >= j.iters:
                j.end_s = now + R
            ran.add(g.key)
            cpus += g.cpus * j.gpus
            mem += g.mem_gb * j.gpus
        for j in active:
            if j.index not in ran or j.index in left:
                j.last_speed = None
        rounds.start_s.append(now)
        rounds.gpus.append(total_gpus - free.total_gpus)
        rounds.cpus.append(cpus)
        rounds.mem_gb.append(mem)
        rounds.running.append(len(grants))
        rounds.waiting.append(len(active) - len(grants))
        active = [j for j in active if j.end_s is None and j.index not in left]
        now += R
    return Outcome(setup, cluster, jobs, rounds, time.perf_counter() - began)
