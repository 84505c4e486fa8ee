"""A profile read from its JSON, strictly: every field present with the right type,
numbers finite and within what a node can have, read against the records' own fields
(profile.py), so a field added there is read here without a second list.

A profile is a cache of measurements; refusing a bad one costs a re-profile, while
trusting it could mis-size every later job of the workload, and its values reach the
decision table that slurmctld reads.
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, fields, replace
from typing import Any

from slurm_synergy.model.bounds import MAX_CPUS, MAX_GPUS, MAX_MEM_MB, MAX_POWER_W, MAX_PROCS
from slurm_synergy.model.comment import FINGERPRINT_RE
from slurm_synergy.model.profile import (
    PROFILE_VERSION, READ_VERSIONS, Allocation, BatchPeak, CommandFile, FetchRates,
    GpuMemory, GpuReadings, MemoryRaise, Point, PointError, PowerPoint, Profile,
    ProfileError, SlowRun, ThroughputModel)

# The most a field of that name can hold (the hard bounds of model/bounds.py where it has
# one); any other number at most BIG.
_MOST: dict[str, float] = {"cores": MAX_CPUS, "procs": MAX_PROCS, "workers": 1 << 20,
                           "gpus": MAX_GPUS, "count": MAX_GPUS, "batch": 1 << 30,
                           "limit_w": MAX_POWER_W, "power_limit_w": MAX_POWER_W,
                           "min_limit_w": MAX_POWER_W, "max_limit_w": MAX_POWER_W,
                           "mem_mb": MAX_MEM_MB}
BIG = 1e15
# The most items a list holds: a sweep's points, their repeats, a command's words. A
# profile of more is not one the profiler writes, and deciding from it costs time that
# the site's sync shares among every user.
_MOST_ITEMS: dict[str, int] = {"points": 1024}
MOST_ITEMS = 4096


def _brief(value: Any) -> str:
    """A value for an error message, cut short: it may be a megabyte of someone's JSON."""
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "..."


def _most(where: str) -> float:
    return _MOST.get(where.rsplit(".", 1)[-1].split("[", 1)[0], BIG)

def _number(value: Any, where: str, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}: expected a finite number, got {_brief(value)}")
    if value < 0:
        raise ValueError(f"{where}: negative value {_brief(value)}")
    if value > _most(where):
        raise ValueError(f"{where}: {value:.6g} is more than a profile can hold "
                         f"({_most(where):g})")
    return float(value)


def _build(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected an object, got {type(data).__name__}")
    known = {f.name: f for f in fields(cls)}
    unknown = set(data) - set(known)
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(sorted(unknown))[:80]}")
    kwargs: dict[str, Any] = {}
    for name, f in known.items():
        spot = f"{where}.{name}"
        if name not in data:
            if f.default is not MISSING or f.default_factory is not MISSING:
                continue            # has a default: optional
            raise ValueError(f"{spot}: missing")
        kwargs[name] = _convert(str(f.type), data[name], spot)
    return cls(**kwargs)


_NESTED = {"Point": Point, "FetchRates": FetchRates, "PowerPoint": PowerPoint,
           "GpuReadings": GpuReadings, "PointError": PointError,
           "ThroughputModel": ThroughputModel, "Allocation": Allocation,
           "BatchPeak": BatchPeak, "GpuMemory": GpuMemory, "MemoryRaise": MemoryRaise,
           "CommandFile": CommandFile, "SlowRun": SlowRun}


def _convert(type_name: str, value: Any, where: str) -> Any:
    optional = type_name.endswith("| None")
    base = type_name.replace("| None", "").strip()
    if value is None and optional:
        return None
    if base in _NESTED:
        return _build(_NESTED[base], value, where)
    if base.startswith("tuple["):
        inner = base[len("tuple["):-1].split(",")[0].strip()
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a list")
        most = _MOST_ITEMS.get(where.rsplit(".", 1)[-1], MOST_ITEMS)
        if len(value) > most:
            raise ValueError(f"{where}: {len(value)} items, more than a profile holds "
                             f"({most})")
        return tuple(_convert(inner, v, f"{where}[{i}]") for i, v in enumerate(value))
    if base == "str":
        if not isinstance(value, str):
            raise ValueError(f"{where}: expected text, got {_brief(value)}")
        return value
    if base == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"{where}: expected true/false, got {_brief(value)}")
        return value
    if base == "int":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{where}: expected a whole number >= 0, got {str(value)[:40]}")
        if value > _most(where):
            raise ValueError(f"{where}: {str(value)[:40]} is more than a profile can hold "
                             f"({_most(where):.0f})")
        return value
    if base == "float":
        return _number(value, where)
    raise TypeError(f"{where}: no reader for type {type_name}")


def profile_from_json(text: str, source: str) -> Profile:
    """A profile from its JSON text, every field checked for type and range;
    ProfileError naming `source` (its file) and the field where anything is off."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ProfileError(f"profile {source} is not JSON: {e}") from None
    except ValueError as e:       # a number of more digits than Python converts
        raise ProfileError(f"profile {source} is not JSON a profile can hold: "
                           f"{str(e)[:80]}") from None
    except RecursionError:
        raise ProfileError(f"profile {source} nests deeper than a profile does") from None
    if not isinstance(data, dict):
        raise ProfileError(f"profile {source} is not a JSON object")
    version = data.get("version")
    if isinstance(version, bool) or version not in READ_VERSIONS:
        raise ProfileError(f"profile {source} has version {_brief(version)}; this slurm-synergy "
                           f"reads versions {', '.join(map(str, READ_VERSIONS))} (profile the "
                           "workload again)")
    try:
        profile = replace(_build(Profile, data, "profile"), version=PROFILE_VERSION)
    except ValueError as e:
        raise ProfileError(f"profile {source} is corrupt: {e}") from None
    if not FINGERPRINT_RE.match(profile.fingerprint):
        raise ProfileError(f"profile {source} is corrupt: fingerprint "
                           f"{_brief(profile.fingerprint)} is not 16 hex digits")
    return profile
