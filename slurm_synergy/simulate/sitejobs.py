"""A site's queue for the Slurm queue model (slurmqueue.py): Synergy's dynamic workload as
a site's users would submit it, in each of the flows a site could run.

A job's model needs, per GPU, the cores and memory of its ideal in Synergy's matrices
(where it runs fastest). Users ask by habit: what a job needs over an efficiency drawn
for each job from a Beta distribution whose mean is what sites' accounting reports
(`Habits`: cores 0.6 and memory 0.19, King's College London's CREATE, July-December
2025), at most a node (or, `at_most_share`, the GPU-proportional share), at least a core
per GPU; and a --time its run fills a uniform share of (0.1-1: users' estimates, Tsafrir
et al.), rounded up to minutes. A job runs at the speed the matrix gives its cores and
memory per GPU.

  asked       as submitted
  synergy     the plugin: a workload (a user's model at a GPU count) is measured by its
              first job as asked (losing the in-run sweep's windows); then its jobs are
              right-sized: per GPU the fewest cores, then the least memory, on the
              matrix's grid at which it keeps its asked speed within the decision's noise
  timemin     synergy, with --time-min from history (the queue model's "ours" limits)
  mem-update  Slurm 26.05's --mem-update=10@5 alone: each job as asked, its memory
              lowered after 5 minutes to what it uses plus 10% (never below 10% of the
              ask), never raised
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Mapping, Sequence

from slurm_synergy.simulate.slurmqueue import Node, QueueJob, Size
from slurm_synergy.simulate.trace import SimJob
from slurm_synergy.simulate.workload import Workload

FLOWS = ("asked", "synergy", "timemin", "mem-update")
NOISE = 0.03               # the decision keeps the asked speed within this
SWEEP_LOST_S = 18.0        # the in-run sweep's windows (FlowCosts.sweep_lost_s)
MEM_UPDATE = (300.0, 0.10, 0.10)   # --mem-update=10@5: delay, margin, floor of the ask


@dataclass(frozen=True)
class Habits:
    """How users ask: Beta(a, b) efficiencies (used over asked) and --time accuracy."""

    cpu_efficiency: tuple[float, float] = (3.0, 2.0)     # mean 0.6
    mem_efficiency: tuple[float, float] = (2.0, 8.5)     # mean 0.19
    limit_accuracy: tuple[float, float] = (0.1, 1.0)     # run over --time, uniform
    users: int = 16
    seed: int = 7
    at_most_share: bool = False   # asks capped at the GPU-proportional share (a site's
                                  # MaxMemPerGPU and MaxCPUsPerGPU, or its defaults taken)


@dataclass(frozen=True)
class _Ask:
    user: str
    cpus: int
    mem_gb: float
    limit_s: float


def _asks(trace: Sequence[SimJob], workloads: Mapping[str, Workload], node: Node,
          habits: Habits) -> list[_Ask]:
    rng = random.Random(habits.seed)
    out = []
    for job in trace:
        w = workloads[job.model]
        eff_c = max(0.05, rng.betavariate(*habits.cpu_efficiency))
        eff_m = max(0.05, rng.betavariate(*habits.mem_efficiency))
        acc = rng.uniform(*habits.limit_accuracy)
        share = job.gpus / node.gpus if habits.at_most_share else 1.0
        cpus = min(math.floor(node.cpus * share),
                   max(job.gpus, math.ceil(w.ideal_cpus * job.gpus / eff_c)))
        mem = min(node.mem_mb / 1024 * share, w.ideal_mem_gb * job.gpus / eff_m)
        run = job.iters * w.iter_s / w.rate(cpus / job.gpus, mem / job.gpus)
        out.append(_Ask(f"u{rng.randrange(habits.users)}", cpus, mem,
                        60.0 * math.ceil(run / acc / 60)))
    return out


def _decide(w: Workload, gpus: int, ask: _Ask) -> tuple[int, float]:
    """The fewest cores, then the least memory, per GPU on the grid that keep the asked
    speed within NOISE; never more than asked."""
    c_ask, m_ask = ask.cpus / gpus, ask.mem_gb / gpus
    want = (1 - NOISE) * w.rate(c_ask, m_ask)
    c = next((c for c in w.cpus if c <= c_ask and w.rate(c, m_ask) >= want), c_ask)
    m = next((m for m in w.mem_gb if m <= m_ask and w.rate(c, m) >= want), m_ask)
    return math.ceil(c * gpus), m * gpus


def _size(w: Workload, job: SimJob, cpus: int, mem_gb: float) -> Size:
    """A job's size at `cpus` and `mem_gb`, running its iterations at the matrix's speed."""
    return Size(cpus, math.ceil(mem_gb * 1024),
                job.iters * w.iter_s / w.rate(cpus / job.gpus, mem_gb / job.gpus), job.gpus)


def site_jobs(trace: Sequence[SimJob], workloads: Mapping[str, Workload], node: Node,
              flow: str, habits: Habits = Habits()) -> list[QueueJob]:
    """The trace's jobs as `flow` submits them to nodes like `node`."""
    if flow not in FLOWS:
        raise ValueError(f"flow must be one of {', '.join(FLOWS)}, not {flow!r}")
    out = []
    for job, ask in zip(trace, _asks(trace, workloads, node, habits)):
        w = workloads[job.model]
        asked = _size(w, job, ask.cpus, ask.mem_gb)
        decided, mem_update, measuring = None, None, 0.0
        if flow in ("synergy", "timemin"):
            decided = _size(w, job, *_decide(w, job.gpus, ask))
            measuring = asked.run_s + SWEEP_LOST_S
        elif flow == "mem-update":
            delay, margin, floor = MEM_UPDATE
            used_gb = min(ask.mem_gb, w.ideal_mem_gb * job.gpus)
            mem_update = (delay, math.ceil(1024 * max(used_gb * (1 + margin),
                                                      floor * ask.mem_gb)))
        out.append(QueueJob(int(job.job_id) + 1, f"{ask.user}/{job.model}/{job.gpus}",
                            job.arrival_s, ask.limit_s, asked, decided, measuring,
                            ask.user, mem_update=mem_update))
    return out


def rate_for_load(load: float, gpus: int) -> float:
    """Jobs an hour of the dynamic workload that bring `load` times `gpus` GPU-hours an
    hour at the GPU-proportional share: a job's mean is 16.77 h (the run-time mix) x
    1.9 GPUs (the GPU mix)."""
    mean_s = 60 * (0.8 * (1e3 - 10 ** 1.5) / (1.5 * math.log(10))
                   + 0.2 * (1e4 - 1e3) / math.log(10))
    return load * gpus / (mean_s / 3600 * 1.9)
