"""The site's GPU catalog: what each gres type of GPU offers, from its data sheet.

It lives in the site policy as one table per gres type (the `Type=` of gres.conf):

    [gpu.a10]
    memory_mib = 23028           # memory as the driver reports it (nvidia-smi), not the data sheet
    power_w = [100, 150, 150]    # board power limit: min, default, max (nvidia-smi -q -d POWER)
    idle_w = 15                  # drawn while the GPU waits (between a job's steps)
    speed = 0.40                 # relative training speed; the site picks the reference

A catalog is optional. One that is missing or wrong decides nothing about GPU types: the
gres rewrite then keeps the job's own request, and `synergy plugin catalog` names the
fault. It never makes a job fail.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from slurm_synergy.model.errors import SynergyError

# A gres type as gres.conf and --gres spell it.
TYPE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")
# What one type's table may hold: (kind, lowest, highest).
_FIELDS: dict[str, tuple[type, float, float]] = {
    "memory_mib": (int, 256, 1 << 22),
    "idle_w": (float, 0.0, 2000.0),
    "speed": (float, 0.001, 1000.0),
}


class CatalogError(SynergyError):
    """A catalog entry that cannot be used; the message names the type and the field."""


@dataclass(frozen=True)
class GpuType:
    name: str
    memory_mib: int
    min_power_w: float
    default_power_w: float
    max_power_w: float
    idle_w: float
    speed: float

    def describe(self) -> str:
        """The type's memory (MiB), power range and default (W), idle power and speed."""
        return (f"{self.name}: {self.memory_mib} MiB, {self.min_power_w:g}-"
                f"{self.max_power_w:g} W (default {self.default_power_w:g}), idle "
                f"{self.idle_w:g} W, speed {self.speed:g}")


@dataclass(frozen=True)
class Catalog:
    """The catalog as the engine takes it: the types, or why there are none."""

    types: Mapping[str, GpuType]
    problem: str = ""       # no catalog in the policy, or the fault that made it unusable
    faulty: bool = False    # a fault (worth reporting), not a policy without a catalog


def parse_catalog(tables: Any, where: str) -> dict[str, GpuType]:
    """The `[gpu.TYPE]` tables of a policy file, checked; CatalogError naming the first
    fault. `where` names the file in messages."""
    if not isinstance(tables, Mapping):
        raise CatalogError(f"{where}: [gpu] must hold one table per GPU type ([gpu.a10])")
    catalog = {}
    for name, table in tables.items():
        at = f"{where}: [gpu.{name}]"
        if not isinstance(name, str) or not TYPE_RE.match(name):
            raise CatalogError(f"{at}: not a gres type name (letters, digits, _ . -)")
        if not isinstance(table, Mapping):
            raise CatalogError(f"{at} must be a table")
        unknown = sorted(set(table) - {*_FIELDS, "power_w"})
        missing = sorted({*_FIELDS, "power_w"} - set(table))
        if unknown or missing:
            raise CatalogError(f"{at}: " + "; ".join(
                [f"unknown field(s) {', '.join(unknown)}"] * bool(unknown)
                + [f"missing {', '.join(missing)}"] * bool(missing)))
        values = {k: _number(table[k], k, *_FIELDS[k], at) for k in _FIELDS}
        power = table["power_w"]
        if not isinstance(power, list) or len(power) != 3:
            raise CatalogError(f"{at}: power_w must be [min, default, max] in watts")
        low, default, high = (_number(w, "power_w", float, 1.0, 5000.0, at) for w in power)
        if not low <= default <= high:
            raise CatalogError(f"{at}: power_w must rise: min {low:g} <= default "
                               f"{default:g} <= max {high:g}")
        if values["idle_w"] > low:
            raise CatalogError(f"{at}: idle_w {values['idle_w']:g} is above the lowest "
                               f"power limit {low:g}")
        catalog[name] = GpuType(name, int(values["memory_mib"]), low, default, high,
                                float(values["idle_w"]), float(values["speed"]))
    return catalog


def _number(value: Any, name: str, kind: type, low: float, high: float, at: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            kind is int and not isinstance(value, int)):
        raise CatalogError(f"{at}: {name} must be {'an integer' if kind is int else 'a number'}"
                           f", not {value!r}")
    if not low <= value <= high:
        raise CatalogError(f"{at}: {name} = {value} is outside [{low:g}, {high:g}]")
    return float(value)
