"""GPUs as the profiler sees them: one interface, one backend per vendor (NVML here).

Readings are taken at a low rate (NVML calls are cheap but not free, and the EuroMLSys'23
monitoring study found sub-second sampling enough for utilisation and power). Without a
GPU, or without NVML, `open_gpus` returns an empty set and says why; nothing raises.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Protocol, Sequence


class Gpu(Protocol):
    name: str

    def utilisation_pct(self) -> float: ...
    def memory_used_mb(self) -> float: ...
    def power_w(self) -> float: ...
    def energy_j(self) -> float | None: ...
    def power_limit_w(self) -> float: ...
    def power_limit_range_w(self) -> tuple[float, float]: ...
    def set_power_limit_w(self, watts: float) -> None: ...


class NvmlGpu:
    """One NVIDIA GPU through nvidia-ml-py (module pynvml)."""

    def __init__(self, nvml: object, handle: object) -> None:
        self._nvml = nvml
        self._h = handle
        name = nvml.nvmlDeviceGetName(handle)  # type: ignore[attr-defined]
        self.name = name.decode() if isinstance(name, bytes) else str(name)

    def utilisation_pct(self) -> float:
        return float(self._nvml.nvmlDeviceGetUtilizationRates(self._h).gpu)  # type: ignore[attr-defined]

    def memory_used_mb(self) -> float:
        return self._nvml.nvmlDeviceGetMemoryInfo(self._h).used / 2**20  # type: ignore[attr-defined]

    def power_w(self) -> float:
        return self._nvml.nvmlDeviceGetPowerUsage(self._h) / 1000.0  # type: ignore[attr-defined]

    def energy_j(self) -> float | None:
        try:   # Volta and later keep a millijoule counter; older GPUs do not.
            return self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._h) / 1000.0  # type: ignore[attr-defined]
        except Exception:
            return None

    def power_limit_w(self) -> float:
        return self._nvml.nvmlDeviceGetPowerManagementLimit(self._h) / 1000.0  # type: ignore[attr-defined]

    def power_limit_range_w(self) -> tuple[float, float]:
        low, high = self._nvml.nvmlDeviceGetPowerManagementLimitConstraints(self._h)  # type: ignore[attr-defined]
        return low / 1000.0, high / 1000.0

    def set_power_limit_w(self, watts: float) -> None:
        self._nvml.nvmlDeviceSetPowerManagementLimit(self._h, int(watts * 1000))  # type: ignore[attr-defined]


def visible_indices(count: int) -> list[int]:
    """The NVML indices of the GPUs this job may use.

    Slurm sets CUDA_VISIBLE_DEVICES for a job with GPUs; NVML ignores it and numbers every
    GPU on the node, so the job's own ones are picked out here. (Slurm numbers the job's
    devices from 0 when its cgroup hides the others; then indices past `count` are
    dropped.)
    """
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return list(range(count))
    picked = []
    for item in env.split(","):
        item = item.strip()
        if item.isdigit() and int(item) < count:
            picked.append(int(item))
    return picked


def open_gpus() -> tuple[list[Gpu], str]:
    """This job's GPUs and, when there are none, the reason in words."""
    try:
        import pynvml
    except ImportError:
        return [], "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as e:   # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return [], f"NVML unavailable on this node ({e}): no NVIDIA driver, so no GPU readings"
    try:
        count = pynvml.nvmlDeviceGetCount()
        gpus: list[Gpu] = [NvmlGpu(pynvml, pynvml.nvmlDeviceGetHandleByIndex(i))
                           for i in visible_indices(count)]
    except Exception as e:
        return [], f"NVML could not list the GPUs: {e}"
    return gpus, "" if gpus else "no GPU allocated to this job"


@dataclass
class Readings:
    util_pct: float
    mem_used_mb: float
    avg_power_w: float
    energy_j: float | None
    samples: int


class Sampler:
    """Samples every GPU every `interval_s` in a thread while a step runs."""

    def __init__(self, gpus: Sequence[Gpu], interval_s: float = 0.5) -> None:
        self.gpus = list(gpus)
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._util: list[float] = []
        self._mem: list[float] = []
        self._power: list[float] = []
        self._energy0: list[float | None] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            for g in self.gpus:
                try:
                    self._util.append(g.utilisation_pct())
                    self._mem.append(g.memory_used_mb())
                    self._power.append(g.power_w())
                except Exception:     # a GPU that falls off the bus must not stop the step
                    continue

    def __enter__(self) -> "Sampler":
        self._energy0 = [g.energy_j() for g in self.gpus]
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def readings(self) -> Readings | None:
        if not self.gpus or not self._power:
            return None
        ends = [g.energy_j() for g in self.gpus]
        energy: float | None = None
        if all(e is not None for e in ends + self._energy0):
            energy = sum(e1 - e0 for e0, e1 in zip(self._energy0, ends))  # type: ignore[operator]
        per_gpu = len(self.gpus)
        return Readings(util_pct=sum(self._util) / len(self._util),
                        mem_used_mb=max(self._mem),
                        avg_power_w=sum(self._power) / len(self._power) * per_gpu,
                        energy_j=energy, samples=len(self._power))


def zeus_cost(energy_j: float, time_s: float, max_power_w: float, eta: float) -> float:
    """Zeus (NSDI'23): eta * E + (1 - eta) * MaxPower * T, to be minimised."""
    return eta * energy_j + (1.0 - eta) * max_power_w * time_s


def power_limits_to_try(low_w: float, high_w: float, steps: int = 5) -> list[float]:
    """From the maximum down, evenly spaced (Zeus sweeps the same way, in 25 W steps)."""
    if high_w <= low_w or steps < 2:
        return [high_w]
    span = (high_w - low_w) / (steps - 1)
    return [round(high_w - i * span) for i in range(steps)]
