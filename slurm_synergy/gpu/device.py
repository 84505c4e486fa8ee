"""The GPU interface every backend implements, the records it returns, and a node's set
of GPUs (`Backend`) with the lookup of a job's GPUs in it.

Power is in milliwatts and energy in millijoules, as NVML counts them, so nothing is
rounded between a reading and the limit written back. GPUs are named by UUID and PCI bus
id: NVML's indices follow PCI order and need not match the device minor numbers Slurm
hands out, so an index is never used to find a GPU again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence


class GpuError(Exception):
    """A GPU refused or failed an operation (no permission, not supported, fell off the bus)."""


@dataclass(frozen=True)
class GpuInfo:
    uuid: str
    pci_bus_id: str
    name: str
    minor: int | None          # /dev/nvidiaN: the number Slurm's gres.conf names
    # Why the board is not one job's whole ("" when it is): in MIG mode its instances are
    # other jobs', and its power limit is the board's, so a job's own limit is not set.
    shared: str = ""
    memory_mb: float | None = None    # the board's memory (MiB); None where it would not say


@dataclass(frozen=True)
class PowerRange:
    min_mw: int
    max_mw: int
    default_mw: int | None     # None: the driver would not say

    def clamp(self, mw: int) -> int:
        """`mw` brought within the range the board accepts (mW)."""
        return max(self.min_mw, min(self.max_mw, mw))


@dataclass(frozen=True)
class Sample:
    util_pct: float                   # NVML utilization.gpu: any kernel running
    sm_active_pct: float | None       # share of SMs busy (GPM, Hopper on); None where absent
    mem_used_mb: float
    power_mw: int


class Gpu(Protocol):
    info: GpuInfo

    def power_limit_mw(self) -> int:
        """The board's power limit now (mW)."""

    def power_range(self) -> PowerRange:
        """The power limits the board accepts, and its default."""

    def set_power_limit_mw(self, mw: int) -> None:
        """Set the board's power limit (mW); GpuError where it refuses."""

    def energy_mj(self) -> int | None:
        """The board's energy counter (mJ), None where it has none."""

    def sample(self) -> Sample:
        """One reading of utilisation, SM activity, memory used and power."""


@dataclass
class Backend:
    """The GPUs of one node. `reason` says why there are none; '' when there are.

    `broken`: the node has NVIDIA GPUs but they cannot be reached (NVML fails for a reason
    other than a missing driver), so nothing about their limits can be confirmed.
    """

    name: str
    gpus: list[Gpu] = field(default_factory=list)
    reason: str = ""
    broken: bool = False

    def find(self, ids: Sequence[str]) -> tuple[list[Gpu], list[str]]:
        """The GPUs named by `ids` (minor number, UUID or PCI bus id) and the ids not found.

        Slurm's SLURM_JOB_GPUS holds device numbers: the N of the /dev/nvidiaN files in
        gres.conf, which NVML reports as the minor number, not as its own index.
        """
        found: list[Gpu] = []
        missing: list[str] = []
        for raw in ids:
            key = raw.strip()
            if not key:
                continue
            match = next((g for g in self.gpus if _matches(g, key)), None)
            if match is None:
                missing.append(key)
            elif match not in found:
                found.append(match)
        return found, missing


def _matches(gpu: Gpu, key: str) -> bool:
    info = gpu.info
    if key.isdigit():
        return info.minor == int(key)
    if key.upper().startswith(("GPU-", "MIG-")):
        return info.uuid.upper() == key.upper()
    return _pci(info.pci_bus_id) == _pci(key)


def _pci(bus_id: str) -> str:
    """NVML writes 00000000:17:00.0, lspci and sysfs 0000:17:00.0: compare the tail."""
    head, _, device = bus_id.strip().lower().rpartition(":")
    domain, _, bus = head.rpartition(":")
    try:
        return f"{int(domain or '0', 16):x}:{bus}:{device}"
    except ValueError:      # not a bus id at all: it can only match itself
        return bus_id.strip().lower()


def job_gpu_ids(env: dict[str, str]) -> list[str]:
    """The job's GPUs as Slurm names them to a prolog or epilog.

    CUDA_VISIBLE_DEVICES is deliberately not read: outside the job's cgroup it is not the
    job's view of the devices.
    """
    return [x for x in env.get("SLURM_JOB_GPUS", "").split(",") if x.strip()]
