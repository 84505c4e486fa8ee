"""What `synergy tune` would change: Synergy-TUNE's fallback on a live queue.

A pending job waiting for resources that cannot start at the size it asked for (its
ideal, as the plugin decided it) on any node now, but can at its GPU-proportional share
(the engine's `proportional_share`) on some node, is shrunk to that share so it starts.
Jobs are taken in priority order and each planned change uses up the room it starts in,
so two jobs are never planned onto the same cores. Never touched: running jobs, held
jobs or jobs waiting for anything but resources, jobs without GPUs, jobs over several
nodes or with several tasks, jobs already at or under their share, and, unless the
caller is an admin, other users' jobs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..plugin.engine import NodeShape, proportional_share
from ..slurm import NodeUse, QueuedJob

WAITING_FOR_ROOM = ("Resources", "Priority")
USABLE_NODE_STATES = ("idle", "mixed", "allocated", "completing")


@dataclass(frozen=True)
class Change:
    job_id: str
    user: str
    node: str                    # where the share fits now
    cpus_before: int
    mem_before_mb: int
    cpus_after: int
    mem_after_mb: int
    gpus: int
    why: str


@dataclass
class _Room:
    name: str
    shape: NodeShape
    cpus: int
    mem_mb: int
    gpus: int

    def holds(self, cpus: int, mem_mb: int, gpus: int) -> bool:
        return self.cpus >= cpus and self.mem_mb >= mem_mb and self.gpus >= gpus


def _rooms(nodes: Sequence[NodeUse]) -> list[_Room]:
    return [_Room(n.name, NodeShape(n.cpus, n.memory_mb, n.gpus), n.cpus - n.cpus_alloc,
                  n.memory_mb - n.mem_alloc_mb, n.gpus - n.gpus_alloc)
            for n in nodes if n.gpus and n.state.rstrip("*~#") in USABLE_NODE_STATES]


def plan(queue: Sequence[QueuedJob], nodes: Sequence[NodeUse], me: str,
         admin: bool) -> tuple[list[Change], list[str]]:
    """The changes, and one line per pending job left alone saying why."""
    rooms = _rooms(nodes)
    changes, notes = [], []
    for job in queue:
        if job.state != "PENDING":
            continue
        if not admin and job.user != me:
            notes.append(f"{job.job_id}: {job.user}'s job; only an admin may tune it")
            continue
        if job.reason not in WAITING_FOR_ROOM:
            notes.append(f"{job.job_id}: waits for {job.reason}, not for resources")
            continue
        if job.nodes != 1 or job.tasks != 1 or not job.gpus:
            notes.append(f"{job.job_id}: not a one-task job with GPUs on one node")
            continue
        cpus, mem = job.cpus_per_task, job.mem_mb
        if any(r.holds(cpus, mem, job.gpus) for r in rooms):
            notes.append(f"{job.job_id}: fits as asked; Slurm will start it")
            continue
        fallback = None
        for r in rooms:
            share_c, share_m = proportional_share(r.shape, job.gpus)
            share_c, share_m = min(share_c, cpus), min(share_m, mem or share_m)
            if (share_c, share_m) != (cpus, mem) and r.holds(share_c, share_m, job.gpus):
                fallback = (r, share_c, share_m)
                break
        if fallback is None:
            notes.append(f"{job.job_id}: no node has room for its share now either")
            continue
        r, share_c, share_m = fallback
        r.cpus, r.mem_mb, r.gpus = r.cpus - share_c, r.mem_mb - share_m, r.gpus - job.gpus
        changes.append(Change(job.job_id, job.user, r.name, cpus, mem, share_c, share_m,
                              job.gpus, f"{cpus} cores, {mem} MB fit on no node now; its "
                              f"GPU-proportional share, {share_c} cores and {share_m} MB, "
                              f"fits on {r.name}"))
    return changes, notes
