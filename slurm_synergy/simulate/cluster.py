"""The simulated cluster: servers with GPUs, cores and memory, from a TOML file or from
the nodes of a real Slurm partition (so an admin can simulate the cluster they have).

    round_s = 300                  # lease length, as in Synergy
    [[servers]]
    count = 4
    gpus = 8
    cpus = 24
    mem_gb = 500
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from slurm_synergy import paths
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.engine import shape_of
from slurm_synergy.slurm import Slurm

CLUSTERS = paths.ETC / "simulate"


@dataclass(frozen=True)
class Server:
    gpus: int
    cpus: int
    mem_gb: float


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    servers: tuple[Server, ...]
    round_s: float = 300.0

    @property
    def gpus(self) -> int:
        """The cluster's GPUs, all servers together."""
        return sum(s.gpus for s in self.servers)

    @property
    def cpus(self) -> int:
        """The cluster's cores, all servers together."""
        return sum(s.cpus for s in self.servers)

    @property
    def mem_gb(self) -> float:
        """The cluster's memory (GB), all servers together."""
        return sum(s.mem_gb for s in self.servers)

    @property
    def smallest(self) -> Server:
        """The server with the fewest cores, then least memory, per GPU: jobs are sized
        for it, as the plugin sizes for the smallest node."""
        return min(self.servers, key=lambda s: (s.cpus / s.gpus, s.mem_gb / s.gpus))

    @property
    def share(self) -> tuple[int, float]:
        """The GPU-proportional share every server can give: cores and GB per GPU."""
        return (max(1, int(min(s.cpus / s.gpus for s in self.servers))),
                min(s.mem_gb / s.gpus for s in self.servers))

    def describe(self) -> str:
        """The servers in one line, alike ones counted together (GPUs, CPUs, GB each)."""
        kinds: dict[Server, int] = {}
        for s in self.servers:
            kinds[s] = kinds.get(s, 0) + 1
        return ", ".join(f"{n} x ({s.gpus} GPUs, {s.cpus} CPUs, {s.mem_gb:g} GB)"
                         for s, n in kinds.items())


def builtin() -> list[str]:
    """The names of the built-in clusters (the TOML files in etc/simulate/)."""
    return sorted(p.stem for p in CLUSTERS.glob("*.toml"))


def load_cluster(spec: str, slurm: Slurm | None = None) -> ClusterSpec:
    """`spec` is a TOML file, the name of one in etc/simulate/, or `slurm[:PARTITION]`
    for the nodes of a live partition."""
    if spec == "slurm" or spec.startswith("slurm:"):
        return _from_slurm(spec.partition(":")[2] or None, slurm or Slurm())
    path = Path(spec)
    if not path.suffix and not path.exists():
        path = CLUSTERS / f"{spec}.toml"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SynergyError(f"cluster {spec}: no such file (built in: {', '.join(builtin())}; "
                           "or slurm[:PARTITION])") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise SynergyError(f"cluster {path} cannot be read: {e}") from None
    groups = data.get("servers")
    if not isinstance(groups, list) or not groups:
        raise SynergyError(f"cluster {path}: needs at least one [[servers]] table")
    servers: list[Server] = []
    for n, g in enumerate(groups, start=1):
        if not isinstance(g, dict):
            raise SynergyError(f"cluster {path}, servers #{n}: a [[servers]] table, not "
                               f"{g!r}")
        count, gpus, cpus = (g.get(k, 1 if k == "count" else 0)
                             for k in ("count", "gpus", "cpus"))
        mem = g.get("mem_gb")
        if not all(type(v) is int for v in (count, gpus, cpus)) or \
                type(mem) not in (int, float):
            raise SynergyError(f"cluster {path}, servers #{n}: count, gpus and cpus must "
                               "be whole numbers, mem_gb a number")
        count, gpus, cpus, mem = int(count), int(gpus), int(cpus), float(cast(float, mem))   # checked above
        if count < 1 or gpus < 1 or cpus < 1 or not 0 < mem < math.inf:
            raise SynergyError(f"cluster {path}, servers #{n}: count, gpus, cpus and mem_gb "
                               "must be above 0")
        servers += [Server(gpus, cpus, mem)] * count
    round_s = data.get("round_s", 300)
    if type(round_s) not in (int, float) or not 0 < round_s < math.inf:
        raise SynergyError(f"cluster {path}: round_s must be a finite number of seconds above 0")
    return ClusterSpec(str(data.get("name", path.stem)), tuple(servers), float(round_s))


def _from_slurm(partition: str | None, slurm: Slurm) -> ClusterSpec:
    servers = []
    for node in slurm.nodes(partition):
        gpus = shape_of([node]).gpus
        if gpus:
            servers.append(Server(gpus, node.cpus, node.mem_mb / 1024))
    if not servers:
        raise SynergyError(f"partition {partition or '(default)'} has no nodes with GPUs")
    return ClusterSpec(f"slurm:{partition or 'default'}", tuple(servers))
