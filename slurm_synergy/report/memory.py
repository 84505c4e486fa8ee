"""A job's memory peak as Slurm charges it: per node, the steps on that node together,
against what the job may hold on a node; the job's figure is its worst node.

sacct keeps memory per step: TRESUsageInTot's mem is its tasks' peaks summed, and
TRESUsageInMax's the largest task's, on TRESUsageInMaxNode's node. A step on one node
puts its sum there. A step over several nodes puts an even share of its sum on each, and
its largest task's peak at least on that task's node: sacct keeps no per-node split, so
those are estimates, and said to be. Steps that overlap in time on a node add up (the
batch script's shell beside its srun step): the node's peak is the largest sum of the
steps running at any one step's start. Every peak is a task's high-water mark, so the sum
bounds the node's true peak from above.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Sequence


@dataclass(frozen=True)
class StepMemory:
    """One step's memory readings as sacct gives them (MB; times as sacct's Start/End)."""

    step: str                   # "batch", "extern", "0", ...
    nodes: tuple[str, ...]      # the step's nodes, expanded
    start: datetime | None
    end: datetime | None        # None: still running
    total_mb: float | None      # the tasks' peaks summed (TRESUsageInTot mem)
    largest_mb: float | None    # the largest task's peak (TRESUsageInMax mem)
    largest_node: str           # where it ran (TRESUsageInMaxNode mem)
    unread: bool = False        # used the CPU, yet reads no memory: never sampled


@dataclass(frozen=True)
class NodePeak:
    """A job's worst node: its peak and what the job may hold there (MB)."""

    node: str
    peak_mb: float
    allowed_mb: float
    estimated: bool             # a step spread over nodes was split evenly (see above)

    @property
    def efficiency(self) -> float | None:
        """The peak as a share of what the job may hold on the node; None where that is 0."""
        return self.peak_mb / self.allowed_mb if self.allowed_mb > 0 else None


@dataclass(frozen=True)
class JobMemory:
    """The worst node, or None and why the peak cannot be known."""

    worst: NodePeak | None
    why_unknown: str = ""


@functools.lru_cache(maxsize=4096)     # a report's thousands of steps share few node lists
def expand_nodes(text: str) -> tuple[str, ...]:
    """A Slurm host list (`node[1-3,5],gpu7`) as its names, in order."""
    names: list[str] = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]*)\])?", text):
        prefix, ranges = m.group(1), m.group(2)
        if ranges is None:
            names.append(prefix)
            continue
        for part in ranges.split(","):
            low, _, high = part.partition("-")
            if not high:
                names.append(prefix + low)
                continue
            width = len(low) if low.startswith("0") else 0
            names += [f"{prefix}{i:0{width}d}" for i in range(int(low), int(high) + 1)]
    return tuple(n for n in names if n and n not in ("None", "(null)", "None assigned"))


def _on_nodes(step: StepMemory) -> dict[str, float]:
    """What the step held on each of its nodes at its peak, as far as sacct tells."""
    if step.total_mb is None or not step.nodes:
        return {}
    if len(step.nodes) == 1:
        return {step.nodes[0]: step.total_mb}
    share = step.total_mb / len(step.nodes)
    held = dict.fromkeys(step.nodes, share)
    if step.largest_node in held and step.largest_mb is not None:
        held[step.largest_node] = max(share, step.largest_mb)
    return held


def job_memory(steps: Sequence[StepMemory], node_allowed_mb: float | None) -> JobMemory:
    """The job's worst node from its steps; `node_allowed_mb` is what it may hold on one
    node (--mem, or its share of --mem-per-cpu)."""
    if not steps:
        return JobMemory(None, "no steps in accounting")
    unread = [s.step for s in steps if s.unread]
    if unread:
        return JobMemory(None, f"step {', '.join(unread)} ran but was never sampled (shorter "
                               "than the accounting interval)")
    if all(s.total_mb is None for s in steps):
        return JobMemory(None, "no memory readings yet")
    held = [(s, _on_nodes(s)) for s in steps if s.total_mb is not None]
    per_node: dict[str, float] = {}
    for node in {n for s in steps for n in s.nodes}:
        here = [(s, on[node]) for s, on in held if node in on]
        # The largest sum over the moments a step starts: every overlap begins at one.
        per_node[node] = max(
            sum(mb for s, mb in here if s is t or _running(s, t.start))
            for t, _ in here) if here else 0.0
    if not per_node:
        return JobMemory(None, "no node named in accounting")
    node = max(per_node, key=lambda n: (per_node[n], n))
    spread = any(len(s.nodes) > 1 and node in s.nodes and s.total_mb for s in steps)
    return JobMemory(NodePeak(node, per_node[node], node_allowed_mb or 0.0, spread))


def _running(step: StepMemory, at: datetime | None) -> bool:
    if at is None or step.start is None:
        return True             # no times: counted as overlapping, the safe side
    return step.start <= at and (step.end is None or at < step.end)
