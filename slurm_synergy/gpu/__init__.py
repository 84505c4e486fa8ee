"""GPUs: one interface (`device.Gpu`), one backend per kind of node (NVML, or none).

`open_backend()` picks NVML when the driver answers and otherwise the none backend, which
has no GPUs and says why, so every caller handles "no GPUs on this node" the same way.
"""

from __future__ import annotations

import os

from slurm_synergy.gpu.device import (Backend, Gpu, GpuError, GpuInfo, PowerRange, Sample,
                                      job_gpu_ids)

__all__ = ["Backend", "Gpu", "GpuError", "GpuInfo", "PowerRange", "Sample", "job_gpu_ids",
           "open_backend"]


def open_backend(env: dict[str, str] | None = None) -> Backend:
    """NVML when its library and driver answer; otherwise none, with the reason.

    SYNERGY_GPU_BACKEND=none turns GPU handling off on a node whatever it has.
    """
    env = dict(os.environ) if env is None else env
    if env.get("SYNERGY_GPU_BACKEND", "").strip().lower() == "none":
        return Backend("none", reason="no GPUs on this node (SYNERGY_GPU_BACKEND=none)")
    from slurm_synergy.gpu import nvml
    return nvml.open_nvml()
