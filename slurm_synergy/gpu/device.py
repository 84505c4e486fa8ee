"""The GPU interface every backend implements, and the records it returns.

Power is in milliwatts and energy in millijoules, as NVML counts them, so nothing is
rounded between a reading and the limit written back. GPUs are named by UUID and PCI bus
id: NVML's indices follow PCI order and need not match the device minor numbers Slurm
hands out, so an index is never used to find a GPU again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class GpuError(Exception):
    """A GPU refused or failed an operation (no permission, not supported, fell off the bus)."""


@dataclass(frozen=True)
class GpuInfo:
    uuid: str
    pci_bus_id: str
    name: str
    minor: int | None          # /dev/nvidiaN: the number Slurm's gres.conf names


@dataclass(frozen=True)
class PowerRange:
    min_mw: int
    max_mw: int
    default_mw: int | None     # None: the driver would not say

    def clamp(self, mw: int) -> int:
        return max(self.min_mw, min(self.max_mw, mw))


@dataclass(frozen=True)
class Sample:
    util_pct: float                   # NVML utilization.gpu: any kernel running
    sm_active_pct: float | None       # share of SMs busy (GPM, Hopper on); None where absent
    mem_used_mb: float
    power_mw: int


class Gpu(Protocol):
    info: GpuInfo

    def power_limit_mw(self) -> int: ...
    def power_range(self) -> PowerRange: ...
    def set_power_limit_mw(self, mw: int) -> None: ...
    def energy_mj(self) -> int | None: ...
    def sample(self) -> Sample: ...
