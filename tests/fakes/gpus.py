"""GPUs in memory behind the package's GPU interface, for the hooks' logic tests."""

from __future__ import annotations

from slurm_synergy.gpu import Backend, GpuError, GpuInfo, PowerRange, Sample


class FakeGpu:
    def __init__(self, minor: int, limit_w: float = 300, min_w: float = 100,
                 max_w: float = 400, default_w: float = 300, energy_j: float | None = 1000.0,
                 refuse: bool = False, unreadable: bool = False) -> None:
        self.info = GpuInfo(uuid=f"GPU-fake-{minor}", pci_bus_id=f"00000000:{0x10 + minor:02X}:00.0",
                            name="Fake GPU", minor=minor, memory_mb=24576.0)
        self.limit_mw = int(limit_w * 1000)
        self.range = PowerRange(int(min_w * 1000), int(max_w * 1000), int(default_w * 1000))
        self.energy = None if energy_j is None else int(energy_j * 1000)
        self.refuse, self.unreadable = refuse, unreadable
        self.sets: list[int] = []
        self.util, self.power_mw = 80.0, 250_000

    def power_limit_mw(self) -> int:
        if self.unreadable:
            raise GpuError("read the power limit: GPU is lost")
        return self.limit_mw

    def power_range(self) -> PowerRange:
        if self.unreadable:
            raise GpuError("read the power-limit range: GPU is lost")
        return self.range

    def set_power_limit_mw(self, mw: int) -> None:
        if self.refuse:
            raise GpuError(f"set the power limit to {mw / 1000:g} W: Insufficient Permissions")
        if not self.range.min_mw <= mw <= self.range.max_mw:
            raise GpuError("Invalid Argument")
        self.sets.append(mw)
        self.limit_mw = mw

    def energy_mj(self) -> int | None:
        return self.energy

    def sample(self) -> Sample:
        return Sample(self.util, None, 1024.0, self.power_mw)

    def run_for(self, seconds: float) -> None:
        """The job ran: the energy counter advanced at the GPU's power."""
        if self.energy is not None:
            self.energy += int(self.power_mw * seconds)


def backend(*gpus: FakeGpu) -> Backend:
    return Backend("fake", gpus=list(gpus))
