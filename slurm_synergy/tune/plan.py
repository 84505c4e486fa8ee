"""What `synergy tune` would change: Synergy-TUNE's fallback on a live queue.

A pending job waiting for resources that cannot start at the size it asked for (its
ideal, as the plugin decided it) on any node now, but can at its GPU-proportional share
(the engine's `proportional_share`) on some node, is shrunk to that share so it starts.
Jobs are taken in priority order and each planned change uses up the room it starts in,
so two jobs are never planned onto the same cores (a job that fits as asked keeps its
room too). Never touched: running jobs, held jobs or jobs waiting for anything but
resources, jobs without GPUs, jobs over several nodes or with several tasks, jobs
already at or under their share, and, unless the caller is an admin, other users' jobs;
nor, because the share cannot be worked out for them from here: array jobs, jobs for
another partition, jobs with node features or GPU types, jobs whose memory is per CPU or
all of a node, and jobs tuned before and not put back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Collection, Sequence

from slurm_synergy.model.engine import NodeShape, proportional_share
from slurm_synergy.model.units import gpu_types
from slurm_synergy.slurm import NodeUse, QueuedJob

WAITING_FOR_ROOM = ("Resources", "Priority")
USABLE_NODE_STATES = ("idle", "mixed", "allocated", "completing")


@dataclass(frozen=True)
class Resize:
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
        """Whether the node has this many cores, MB and GPUs free."""
        return self.cpus >= cpus and self.mem_mb >= mem_mb and self.gpus >= gpus

    def take(self, cpus: int, mem_mb: int, gpus: int) -> None:
        """Count this many cores, MB and GPUs as taken on the node."""
        self.cpus, self.mem_mb, self.gpus = self.cpus - cpus, self.mem_mb - mem_mb, \
            self.gpus - gpus


def _rooms(nodes: Sequence[NodeUse]) -> list[_Room]:
    return [_Room(n.name, NodeShape(n.cpus, n.mem_mb, n.gpus), n.cpus - n.cpus_alloc,
                  n.mem_mb - n.mem_alloc_mb, n.gpus - n.gpus_alloc)
            for n in nodes if n.gpus and n.state.rstrip("*~#") in USABLE_NODE_STATES]


def plan_resizes(queue: Sequence[QueuedJob], nodes: Sequence[NodeUse], me: str, admin: bool,
         partition: str = "", tuned: Collection[str] = (),
         memory_per_cpu: Callable[[str], bool] = lambda job_id: False,
         ) -> tuple[list[Resize], list[str]]:
    """The changes, and one line per pending job left alone saying why. `nodes` are
    `partition`'s; `tuned` the jobs the log says were tuned and not put back;
    `memory_per_cpu` is asked only of jobs that would otherwise be changed."""
    rooms = _rooms(nodes)
    changes, notes = [], []
    for job in queue:
        if job.state != "PENDING":
            continue
        why = _left_alone(job, me, admin, partition, tuned)
        if why:
            notes.append(f"{job.job_id}: {why}")
            continue
        cpus, mem = job.cpus_per_task, job.mem_mb
        fits = next((r for r in rooms if r.holds(cpus, mem, job.gpus)), None)
        if fits is not None:      # Slurm will start it there: that room is spoken for
            fits.take(cpus, mem, job.gpus)
            notes.append(f"{job.job_id}: fits as asked; Slurm will start it")
            continue
        fallback = None
        for r in rooms:
            share_c, share_m = proportional_share(r.shape, job.gpus)
            share_c, share_m = min(share_c, cpus), min(share_m, mem)
            if (share_c, share_m) != (cpus, mem) and r.holds(share_c, share_m, job.gpus):
                fallback = (r, share_c, share_m)
                break
        if fallback is None:
            notes.append(f"{job.job_id}: no node has room for its share now either")
            continue
        if memory_per_cpu(job.job_id):
            notes.append(f"{job.job_id}: its memory is per CPU; fewer cores would cut it")
            continue
        r, share_c, share_m = fallback
        r.take(share_c, share_m, job.gpus)
        changes.append(Resize(job.job_id, job.user, r.name, cpus, mem, share_c, share_m,
                              job.gpus, f"{cpus} cores, {mem} MB fit on no node now; its "
                              f"GPU-proportional share, {share_c} cores and {share_m} MB, "
                              f"fits on {r.name}"))
    return changes, notes


def _left_alone(job: QueuedJob, me: str, admin: bool, partition: str,
                tuned: Collection[str]) -> str:
    """Why a pending job is not for tuning, or "" if it may be."""
    if not admin and job.user != me:
        return f"{job.user}'s job; only an admin may tune it"
    if job.reason not in WAITING_FOR_ROOM:
        return f"waits for {job.reason}, not for resources"
    if job.nodes != 1 or job.tasks != 1 or not job.gpus:
        return "not a one-task job with GPUs on one node"
    if job.array:
        return "a job array: one change would resize every pending task"
    if partition and partition not in job.partition.split(","):
        return f"waits for partition {job.partition}, not {partition}"
    if job.features:
        return f"asks for node features ({job.features})"
    if gpu_types(job.gres):
        return f"asks for GPU type(s) {', '.join(sorted(gpu_types(job.gres)))}"
    if not job.mem_mb:
        return "asks for all of a node's memory"
    if job.job_id in tuned:
        return "tuned before and not put back; --revert it first"
    return ""
