"""The NVIDIA backend, through nvidia-ml-py (module pynvml)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, TypeVar

from slurm_synergy.gpu.device import Backend, Gpu, GpuError, GpuInfo, PowerRange, Sample

T = TypeVar("T")
# What NVML says on a node without the NVIDIA driver: no GPUs, not a fault.
NO_DRIVER = ("NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded")
GPM_MIN_INTERVAL_S = 0.1     # NVML needs GPM samples at least this far apart


def _call(what: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except Exception as e:   # pynvml.NVMLError_*: no permission, not supported, GPU lost
        raise GpuError(f"{what}: {e}") from None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _mig(nvml: Any, handle: Any) -> str:
    """Why the board is shared ("" where it is not): MIG mode on."""
    try:
        current, _ = nvml.nvmlDeviceGetMigMode(handle)
    except Exception:       # a board without MIG: whole
        return ""
    return "in MIG mode (its instances may be other jobs')" \
        if current == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1) else ""


def _memory_mb(nvml: Any, handle: Any) -> float | None:
    """The board's memory (MiB): what a job's peak is held against where it failed."""
    try:
        return float(nvml.nvmlDeviceGetMemoryInfo(handle).total) / 2**20
    except Exception:    # a GPU fallen off the bus: its other readings say so
        return None


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
                            name=_text(nvml.nvmlDeviceGetName(handle)), minor=minor,
                            shared=_mig(nvml, handle), memory_mb=_memory_mb(nvml, handle))
        # GPM (SM activity) is set up by the first sample, so hooks that only set limits
        # never allocate it: None unknown, False unsupported, else (sample, taken at).
        self._gpm: Any = None

    def power_limit_mw(self) -> int:
        """The board's power-management limit now (mW)."""
        return int(_call("read the power limit",
                         lambda: self._nvml.nvmlDeviceGetPowerManagementLimit(self._h)))

    def power_range(self) -> PowerRange:
        """The limits NVML accepts (mW), with the default where the driver says it."""
        low, high = _call("read the power-limit range", lambda: self._nvml.
                          nvmlDeviceGetPowerManagementLimitConstraints(self._h))
        try:
            default: int | None = int(self._nvml.nvmlDeviceGetPowerManagementDefaultLimit(self._h))
        except Exception:    # only needed where the site sets no cap (power.ceiling_mw)
            default = None
        return PowerRange(int(low), int(high), default)

    def set_power_limit_mw(self, mw: int) -> None:
        """Set the power-management limit (mW); GpuError where NVML refuses (without root, say)."""
        _call(f"set the power limit to {mw / 1000:g} W",
              lambda: self._nvml.nvmlDeviceSetPowerManagementLimit(self._h, int(mw)))

    def energy_mj(self) -> int | None:
        """Energy since the driver loaded (mJ); None on GPUs before Volta."""
        try:    # Volta and later count millijoules since the driver loaded; older GPUs not
            return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._h))
        except Exception:
            return None

    def sample(self) -> Sample:
        """One reading: utilisation, SM activity (None where GPM is absent), memory (MB), power (mW)."""
        nvml, h = self._nvml, self._h
        util = _call("read utilisation", lambda: nvml.nvmlDeviceGetUtilizationRates(h).gpu)
        mem = _call("read memory", lambda: nvml.nvmlDeviceGetMemoryInfo(h).used)
        power = _call("read power", lambda: nvml.nvmlDeviceGetPowerUsage(h))
        return Sample(util_pct=float(util), sm_active_pct=self._sm_active(),
                      mem_used_mb=mem / 2**20, power_mw=int(power))

    def _sm_active(self) -> float | None:
        """Busy SMs between this sample and the last (GPM's SM_UTIL). utilization.gpu is
        100% as soon as one kernel runs, so it says little about how busy the GPU is."""
        nvml, h = self._nvml, self._h
        if self._gpm is False:
            return None
        if self._gpm is None:
            try:
                supported = bool(nvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)
                self._gpm = (nvml.nvmlGpmSampleGet(h, nvml.nvmlGpmSampleAlloc()),
                             time.monotonic()) if supported else False
            except Exception:     # pre-Hopper GPUs and older drivers: utilisation only
                self._gpm = False
            return None
        before, taken = self._gpm
        if time.monotonic() - taken < GPM_MIN_INTERVAL_S:
            return None
        now = nvml.nvmlGpmSampleAlloc()
        try:
            nvml.nvmlGpmSampleGet(h, now)
            query = nvml.c_nvmlGpmMetricsGet_t()
            query.version = nvml.NVML_GPM_METRICS_GET_VERSION
            query.numMetrics = 1
            query.sample1, query.sample2 = before, now
            query.metrics[0].metricId = nvml.NVML_GPM_METRIC_SM_UTIL
            nvml.nvmlGpmMetricsGet(query)
        except Exception:
            nvml.nvmlGpmSampleFree(now)
            return None
        nvml.nvmlGpmSampleFree(before)
        self._gpm = (now, time.monotonic())
        metric = query.metrics[0]
        return float(metric.value) if metric.nvmlReturn == nvml.NVML_SUCCESS else None


def open_nvml() -> Backend:
    """This node's NVIDIA GPUs through NVML; a Backend with none, and the reason, where there
    are none or NVML cannot reach them."""
    try:
        import pynvml
    except ImportError:
        if Path("/dev/nvidiactl").exists():   # a driver, but this Python cannot reach it
            return Backend("nvml", reason="NVIDIA driver present but nvidia-ml-py is not "
                           "installed for this Python", broken=True)
        return Backend("none", reason="no GPUs on this node (nvidia-ml-py is not installed)")
    try:
        pynvml.nvmlInit()
    except Exception as e:
        if type(e).__name__ in NO_DRIVER:
            return Backend("none", reason=f"no GPUs on this node (NVML: {e})")
        return Backend("nvml", reason=f"NVML failed to start: {e}", broken=True)
    try:
        count = pynvml.nvmlDeviceGetCount()
    except Exception as e:
        return Backend("nvml", reason=f"NVML could not count this node's GPUs: {e}",
                       broken=True)
    gpus: list[Gpu] = []
    for i in range(count):
        try:
            gpus.append(NvmlGpu(pynvml, pynvml.nvmlDeviceGetHandleByIndex(i)))
        except Exception:   # inside a job's cgroup the other jobs' GPUs cannot be opened
            continue
    return Backend("nvml", gpus=gpus, reason="" if gpus else "no GPUs on this node")
