"""GPUs: one interface (`device.Gpu`), one backend per kind of node (NVML, or none).

`open_backend()` picks NVML when the driver answers and otherwise the none backend, which
has no GPUs and says why, so every caller handles "no GPUs on this node" the same way.
"""

from slurm_synergy.gpu.backend import Backend, open_backend
from slurm_synergy.gpu.device import Gpu, GpuError, GpuInfo, PowerRange, Sample

__all__ = ["Backend", "Gpu", "GpuError", "GpuInfo", "PowerRange", "Sample", "open_backend"]
