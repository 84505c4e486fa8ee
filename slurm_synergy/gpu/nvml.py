"""The NVIDIA backend, through nvidia-ml-py (module pynvml)."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from .backend import Backend
from .device import Gpu, GpuError, GpuInfo, PowerRange, Sample

T = TypeVar("T")


def _call(what: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except Exception as e:   # pynvml.NVMLError_*: no permission, not supported, GPU lost
        raise GpuError(f"{what}: {e}") from None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlGpu:
    def __init__(self, nvml: Any, handle: Any) -> None:
        self._nvml = nvml
        self._h = handle
        try:
            minor: int | None = int(nvml.nvmlDeviceGetMinorNumber(handle))
        except Exception:    # Windows and some MIG set-ups have no minor number
            minor = None
        self.info = GpuInfo(uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                            pci_bus_id=_text(nvml.nvmlDeviceGetPciInfo(handle).busId),
                            name=_text(nvml.nvmlDeviceGetName(handle)), minor=minor)
        self._gpm: Any = None          # the previous GPM sample, where the GPU has GPM
        try:
            if nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
                self._gpm = nvml.nvmlGpmSampleGet(handle, nvml.nvmlGpmSampleAlloc())
        except Exception:     # pre-Hopper GPUs and older drivers: utilisation only
            self._gpm = None

    def power_limit_mw(self) -> int:
        return int(_call("read the power limit",
                         lambda: self._nvml.nvmlDeviceGetPowerManagementLimit(self._h)))

    def power_range(self) -> PowerRange:
        low, high = _call("read the power-limit range", lambda: self._nvml.
                          nvmlDeviceGetPowerManagementLimitConstraints(self._h))
        default = _call("read the default power limit", lambda: self._nvml.
                        nvmlDeviceGetPowerManagementDefaultLimit(self._h))
        return PowerRange(int(low), int(high), int(default))

    def set_power_limit_mw(self, mw: int) -> None:
        _call(f"set the power limit to {mw / 1000:g} W",
              lambda: self._nvml.nvmlDeviceSetPowerManagementLimit(self._h, int(mw)))

    def energy_mj(self) -> int | None:
        try:    # Volta and later count millijoules since the driver loaded; older GPUs not
            return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._h))
        except Exception:
            return None

    def sample(self) -> Sample:
        nvml, h = self._nvml, self._h
        util = _call("read utilisation", lambda: nvml.nvmlDeviceGetUtilizationRates(h).gpu)
        mem = _call("read memory", lambda: nvml.nvmlDeviceGetMemoryInfo(h).used)
        power = _call("read power", lambda: nvml.nvmlDeviceGetPowerUsage(h))
        return Sample(util_pct=float(util), sm_active_pct=self._sm_active(),
                      mem_used_mb=mem / 2**20, power_mw=int(power))

    def _sm_active(self) -> float | None:
        """Busy SMs between this sample and the last (GPM's SM_UTIL). utilization.gpu is
        100% as soon as one kernel runs, so it says little about how busy the GPU is."""
        if self._gpm is None:
            return None
        nvml = self._nvml
        try:
            now = nvml.nvmlGpmSampleGet(self._h, nvml.nvmlGpmSampleAlloc())
            query = nvml.c_nvmlGpmMetricsGet_t()
            query.version = nvml.NVML_GPM_METRICS_GET_VERSION
            query.numMetrics = 1
            query.sample1, query.sample2 = self._gpm, now
            query.metrics[0].metricId = nvml.NVML_GPM_METRIC_SM_UTIL
            nvml.nvmlGpmMetricsGet(query)
            nvml.nvmlGpmSampleFree(self._gpm)
            self._gpm = now
            return float(query.metrics[0].value)
        except Exception:
            return None


def open_nvml() -> Backend:
    try:
        import pynvml
    except ImportError:
        return Backend("none", reason="no GPUs on this node (nvidia-ml-py is not installed)")
    try:
        pynvml.nvmlInit()
    except Exception as e:   # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return Backend("none", reason=f"no GPUs on this node (NVML: {e})")
    try:
        count = pynvml.nvmlDeviceGetCount()
    except Exception as e:
        return Backend("none", reason=f"NVML could not count this node's GPUs: {e}")
    gpus: list[Gpu] = []
    for i in range(count):
        try:
            gpus.append(NvmlGpu(pynvml, pynvml.nvmlDeviceGetHandleByIndex(i)))
        except Exception:   # inside a job's cgroup the other jobs' GPUs cannot be opened
            continue
    return Backend("nvml", gpus=gpus, reason="" if gpus else "no GPUs on this node")
