"""Sampling GPUs at a fixed period: per-GPU running totals, never a growing series.

Two users: the profiler samples its widest step from a thread (`Sampler`); the node
prolog starts `sample_job` in a detached process for a job's whole life, which writes
its totals every `flush_s` so that a sampler killed with the job loses at most that.
The EuroMLSys'23 monitoring study found a 1 s period enough for utilisation and power.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

from slurm_synergy.gpu.device import Gpu


@dataclass
class Totals:
    """One GPU's running totals; `energy_mj` integrates power over time (trapezoids)."""

    uuid: str
    samples: int = 0
    util_sum: float = 0.0
    sm_samples: int = 0
    sm_sum: float = 0.0
    mem_peak_mb: float = 0.0
    power_sum_mw: float = 0.0
    energy_mj: float = 0.0
    errors: int = 0
    first_t: float | None = None
    last_t: float | None = None
    _last_power_mw: int | None = field(default=None, repr=False)

    def add(self, t: float, util_pct: float, sm_active_pct: float | None, mem_used_mb: float,
            power_mw: int) -> None:
        """Count one reading taken at `t` (s), adding the energy since the last one."""
        if self.last_t is not None and self._last_power_mw is not None and t > self.last_t:
            self.energy_mj += (self._last_power_mw + power_mw) / 2 * (t - self.last_t)
        if self.first_t is None:
            self.first_t = t
        self.last_t, self._last_power_mw = t, power_mw
        self.samples += 1
        self.util_sum += util_pct
        if sm_active_pct is not None:
            self.sm_samples += 1
            self.sm_sum += sm_active_pct
        self.mem_peak_mb = max(self.mem_peak_mb, mem_used_mb)
        self.power_sum_mw += power_mw

    @property
    def util_mean(self) -> float | None:
        """Mean utilisation (%), None before any sample."""
        return self.util_sum / self.samples if self.samples else None

    @property
    def sm_active_mean(self) -> float | None:
        """Mean share of SMs busy (%), None where no sample had it."""
        return self.sm_sum / self.sm_samples if self.sm_samples else None

    @property
    def power_mean_w(self) -> float | None:
        """Mean power draw (W), None before any sample."""
        return self.power_sum_mw / self.samples / 1000 if self.samples else None

    def to_dict(self) -> dict[str, object]:
        """The totals as JSON-ready fields, without the last reading's power."""
        d = asdict(self)
        d.pop("_last_power_mw")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> "Totals":
        """Totals from `to_dict`'s fields; fields it does not know are dropped."""
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d and not k.startswith("_")}
        return cls(**known)  # type: ignore[arg-type]


def sample_once(gpus: Sequence[Gpu], totals: Sequence[Totals], clock: Callable[[], float]) -> None:
    """Add one reading of each GPU to its totals; a GPU that fails counts an error instead."""
    for gpu, tot in zip(gpus, totals):
        try:
            s = gpu.sample()
        except Exception:      # a GPU that falls off the bus must not stop the others
            tot.errors += 1
            continue
        tot.add(clock(), s.util_pct, s.sm_active_pct, s.mem_used_mb, s.power_mw)


class Sampler:
    """Samples `gpus` every `period_s` from a thread while a block of work runs."""

    def __init__(self, gpus: Sequence[Gpu], period_s: float = 0.5) -> None:
        self.gpus = list(gpus)
        self.period_s = period_s
        self.totals = [Totals(g.info.uuid) for g in self.gpus]
        self.energy_start: list[int | None] = []
        self.energy_end: list[int | None] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        sample_once(self.gpus, self.totals, time.monotonic)
        while not self._stop.wait(self.period_s):
            sample_once(self.gpus, self.totals, time.monotonic)

    def __enter__(self) -> "Sampler":
        self.energy_start = [g.energy_mj() for g in self.gpus]
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        sample_once(self.gpus, self.totals, time.monotonic)
        self.energy_end = [g.energy_mj() for g in self.gpus]

    def energy_j(self) -> float | None:
        """All GPUs' energy: the hardware counter where every GPU has one, else the
        integral of the power readings."""
        pairs = [(a, b) for a, b in zip(self.energy_start, self.energy_end)
                 if a is not None and b is not None and b >= a]
        if pairs and len(pairs) == len(self.energy_start):
            return sum(b - a for a, b in pairs) / 1000
        if any(t.samples >= 2 for t in self.totals):
            return sum(t.energy_mj for t in self.totals) / 1000
        return None
