"""The Slurm queue model (slurmqueue.py) run on one trace in each flow a site could run
(sitejobs.FLOWS): the figures `synergy simulate --scheduler slurm` prints and
bench/bench_site.py tabulates over clusters' shapes and loads."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Mapping, Sequence

from slurm_synergy.simulate.cluster import ClusterSpec
from slurm_synergy.simulate.sitejobs import FLOWS, Habits, site_jobs
from slurm_synergy.simulate.slurmqueue import Node, Scheduler, figures, run_site
from slurm_synergy.simulate.trace import SimJob
from slurm_synergy.simulate.workload import Workload


@dataclass(frozen=True)
class FlowFigures:
    """One flow's queue: times in hours, GPU-hours idle while jobs waited (`stranded`: on
    nodes short of cores or memory for any waiting job's share of a GPU), and the
    seconds the model took."""

    flow: str
    jobs: int
    mean_jct_h: float
    mean_wait_h: float
    p99_wait_h: float
    makespan_h: float
    stranded_gpu_h: float
    idle_gpu_h: float
    killed: int
    model_s: float


def nodes_of(cluster: ClusterSpec) -> list[Node]:
    """The simulated cluster's servers as the queue model's nodes."""
    return [Node(s.cpus, int(s.mem_gb * 1024), s.gpus) for s in cluster.servers]


def run_flows(trace: Sequence[SimJob], workloads: Mapping[str, Workload],
              cluster: ClusterSpec, flows: Sequence[str] = FLOWS,
              habits: Habits | None = None,
              sched: Scheduler | None = None) -> list[FlowFigures]:
    """Each flow's figures on the same trace, asked alike (asks fit the smallest server),
    with users' habits and slurm.conf's settings at their defaults where None."""
    nodes = nodes_of(cluster)
    cap = Node(min(n.cpus for n in nodes), min(n.mem_mb for n in nodes),
               max(n.gpus for n in nodes))
    out = []
    for flow in flows:
        jobs = site_jobs(trace, workloads, cap, flow, habits or Habits())
        t = time.perf_counter()
        run = run_site(jobs, nodes, sched or Scheduler(), limits="ours" if flow == "timemin" else "asked")
        took = time.perf_counter() - t
        f = figures(run.ran)
        out.append(FlowFigures(flow, len(jobs), f.mean_jct_s / 3600, f.mean_wait_s / 3600,
                               f.p99_wait_s / 3600, f.makespan_s / 3600,
                               run.stranded_gpu_s / 3600, run.idle_gpu_s / 3600, f.killed,
                               took))
    return out


def flow_table(rows: Sequence[FlowFigures]) -> str:
    """The flows side by side, each JCT against the first row's (as asked)."""
    head = ("flow", "mean JCT h", "mean wait h", "p99 wait h", "makespan h",
            "GPU-h idle for cores/memory", "JCT vs first")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lines.append(f"| {r.flow} | {r.mean_jct_h:.1f} | {r.mean_wait_h:.1f} "
                     f"| {r.p99_wait_h:.1f} | {r.makespan_h:.0f} | {r.stranded_gpu_h:.0f} "
                     f"| {rows[0].mean_jct_h / r.mean_jct_h:.2f}x |")
    return "\n".join(lines)
