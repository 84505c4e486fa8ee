"""The job's GPUs as the profiler sees them, and the limits its power sweep tries.

The devices themselves come from the package's GPU layer (slurm_synergy.gpu); this
module only decides which of the node's GPUs belong to the job being profiled.
"""

from __future__ import annotations

import os

from slurm_synergy.gpu import Gpu, open_backend
from slurm_synergy.gpu.device import job_gpu_ids


def visible_indices(count: int) -> list[int]:
    """The NVML indices of the GPUs a process outside Slurm may use.

    The local launcher narrows a step's GPUs with CUDA_VISIBLE_DEVICES, which NVML
    ignores; indices past `count` are dropped.
    """
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return list(range(count))
    return [int(x) for x in (i.strip() for i in env.split(",")) if x.isdigit() and int(x) < count]


def open_gpus() -> tuple[list[Gpu], str]:
    """This job's GPUs and, when there are none, the reason in words.

    In a Slurm job, SLURM_JOB_GPUS names the job's devices by minor number; outside one,
    the visible indices do.
    """
    backend = open_backend()
    if not backend.gpus:
        return [], backend.reason
    ids = job_gpu_ids(dict(os.environ))
    if ids:
        gpus, _ = backend.find(ids)
    else:
        gpus = [backend.gpus[i] for i in visible_indices(len(backend.gpus))]
    return gpus, "" if gpus else "no GPU allocated to this job"


def power_limits_to_try(low_w: float, high_w: float, steps: int = 5) -> list[float]:
    """From the maximum down, evenly spaced (Zeus sweeps the same way, in 25 W steps)."""
    if high_w <= low_w or steps < 2:
        return [high_w]
    span = (high_w - low_w) / (steps - 1)
    return [round(high_w - i * span) for i in range(steps)]
