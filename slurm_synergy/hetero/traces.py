"""One GPU type's measurements for the planner: time and energy per (batch, power limit).

The format is Zeus's power-limit trace, as Zeus² publishes it: a JSON object keyed by
batch size, each a list of `{"power_limit": W, "energy": J, "time": s}` measured over the
same number of training steps. Between measured batch sizes the planner interpolates, at
one power limit, linearly; beyond them it never goes (`at` says None).
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from slurm_synergy.model.errors import SynergyError


class TraceError(SynergyError):
    """A trace that cannot be used; the message names the file and the entry."""


@dataclass(frozen=True)
class Cost:
    time_s: float       # the measured window's time at this batch and limit
    energy_j: float     # the energy the GPU drew over it


@dataclass(frozen=True)
class TypeTrace:
    """One GPU type's measured points: {power limit: {batch: Cost}}."""

    gpu_type: str
    points: Mapping[float, Mapping[int, Cost]]
    source: str = ""

    @property
    def limits(self) -> list[float]:
        """The measured power limits (W), lowest first."""
        return sorted(self.points)

    @property
    def max_limit_w(self) -> float:
        """The highest measured power limit (W)."""
        return max(self.points)

    def batches(self, limit: float) -> list[int]:
        """The batch sizes measured at `limit`, smallest first."""
        return sorted(self.points[limit])

    def at(self, batch: float, limit: float) -> Cost | None:
        """Time and energy at `batch` under `limit`, between the batches measured at that
        limit (linearly); None outside them or for a limit never measured."""
        measured = self.points.get(limit)
        if not measured:
            return None
        sizes = sorted(measured)
        if not sizes[0] <= batch <= sizes[-1]:
            return None
        i = bisect_left(sizes, batch)
        if sizes[i] == batch:
            return measured[sizes[i]]
        lo, hi = sizes[i - 1], sizes[i]
        w = (batch - lo) / (hi - lo)
        a, b = measured[lo], measured[hi]
        return Cost(a.time_s + w * (b.time_s - a.time_s),
                    a.energy_j + w * (b.energy_j - a.energy_j))


def _positive(value: Any, where: str, zero_ok: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TraceError(f"{where}: expected a number, got {value!r}")
    if value < 0 or (value == 0 and not zero_ok):
        raise TraceError(f"{where}: must be {'at least' if zero_ok else 'above'} 0, "
                         f"got {value!r}")
    return float(value)


def trace_from(data: Any, gpu_type: str, source: str) -> TypeTrace:
    """A TypeTrace from a trace's parsed JSON; TraceError naming `source` and the entry if
    malformed."""
    if not isinstance(data, dict) or not data:
        raise TraceError(f"{source}: expected a JSON object keyed by batch size")
    points: dict[float, dict[int, Cost]] = {}
    for key, runs in data.items():
        if not (isinstance(key, str) and key.isdigit() and int(key) > 0):
            raise TraceError(f"{source}: key {key!r} is not a batch size (a whole number "
                             "above 0)")
        batch = int(key)
        if not isinstance(runs, list) or not runs:
            raise TraceError(f"{source}[{key}]: expected a list of measurements")
        for i, run in enumerate(runs):
            where = f"{source}[{key}][{i}]"
            if not isinstance(run, dict) or set(run) != {"power_limit", "energy", "time"}:
                raise TraceError(f"{where}: expected power_limit, energy and time, got "
                                 f"{run!r}")
            limit = _positive(run["power_limit"], f"{where}.power_limit")
            if batch in points.get(limit, {}):
                raise TraceError(f"{where}: power limit {limit:g} W measured twice at "
                                 f"batch {batch}")
            points.setdefault(limit, {})[batch] = Cost(
                _positive(run["time"], f"{where}.time"),
                _positive(run["energy"], f"{where}.energy", zero_ok=True))
    return TypeTrace(gpu_type, points, source)


def zeus_trace(batch: int, sweep: Sequence[tuple[float, float, float]]) -> dict[str, Any]:
    """A profile's power sweep in Zeus's format: per measured limit (W, samples/s, mean
    W), one step's time and energy at the profile's batch, the only batch it ran."""
    runs = [{"power_limit": limit, "energy": power * batch / rate, "time": batch / rate}
            for limit, rate, power in sweep if rate > 0]
    if batch < 1 or not runs:
        raise TraceError("the profile has no power sweep to make a trace of (it needs a GPU "
                         "whose limits the job may set)")
    return {str(batch): runs}


def read_trace(path: Path, gpu_type: str) -> TypeTrace:
    """The trace in `path` for `gpu_type`; TraceError where it cannot be read or used."""
    try:
        text = path.read_text()
    except OSError as e:
        raise TraceError(f"trace for {gpu_type}: cannot read {path}: {e.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceError(f"{path}: not JSON: {e}") from None
    return trace_from(data, gpu_type, str(path))
