"""What a simulated job's model does with cores and memory: a throughput table per GPU.

Two sources: Synergy's matrix format (`data/synergy/synergy_model_profiles.csv`: per
model, throughput normalised to the GPU-proportional share on a grid of CPUs x memory
per GPU) and the project's own profiles, read through the decision engine's `speed()` so
the simulator sees a workload exactly as the plugin does.
"""

from __future__ import annotations

import bisect
import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from slurm_synergy import paths
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.engine import speed
from slurm_synergy.model.profile import Profile

REFERENCE_MATRIX = paths.DATA / "synergy" / "synergy_model_profiles.csv"
_MATRIX_COLUMNS = ("model", "cpus_per_gpu", "mem_per_gpu_gb", "norm_throughput",
                   "ideal_cpus_per_gpu", "ideal_mem_per_gpu_gb", "speedup_at_ideal",
                   "iter_time_s_at_proportional")


@dataclass(frozen=True)
class Workload:
    """One model's speed, per GPU, against the cores and memory it gets per GPU.

    `table[i][j]` is the throughput at `cpus[i]` cores and `mem_gb[j]` GB per GPU,
    relative to the GPU-proportional share (1.0). Between grid points the speed is that
    of the grid point below (a job does not run faster for a fraction of a core).
    """

    name: str
    cpus: tuple[int, ...]
    mem_gb: tuple[float, ...]
    table: tuple[tuple[float, ...], ...]
    iter_s: float                 # one iteration at the proportional share
    ideal_cpus: int               # Synergy's demand vector, per GPU
    ideal_mem_gb: float
    ideal_speedup: float

    def rate(self, cpus: float, mem_gb: float) -> float:
        """The speed at `cpus` cores and `mem_gb` GB per GPU: the grid point's at or below them."""
        i = max(0, bisect.bisect_right(self.cpus, cpus + 1e-9) - 1)
        j = max(0, bisect.bisect_right(self.mem_gb, mem_gb + 1e-9) - 1)
        return self.table[i][j]

    @property
    def sensitive(self) -> bool:
        """Whether the model runs faster at its ideal than at the share."""
        return self.ideal_speedup > 1.0 + 1e-9


def read_matrix(path: Path = REFERENCE_MATRIX) -> dict[str, Workload]:
    """Synergy's per-model matrices; a bad file is refused, naming the line."""
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    except OSError as e:
        raise SynergyError(f"throughput matrix {path} cannot be read: {e}") from None
    if not rows or not set(_MATRIX_COLUMNS) <= set(rows[0]):
        raise SynergyError(f"throughput matrix {path}: expected the columns "
                           f"{', '.join(_MATRIX_COLUMNS)}")
    cells: dict[str, dict[tuple[int, float], float]] = {}
    meta: dict[str, tuple[float, ...]] = {}
    for n, row in enumerate(rows, start=2):
        try:
            name = row["model"].strip()
            c, m = int(row["cpus_per_gpu"]), float(row["mem_per_gpu_gb"])
            value = float(row["norm_throughput"])
            info = (float(row["ideal_cpus_per_gpu"]), float(row["ideal_mem_per_gpu_gb"]),
                    float(row["speedup_at_ideal"]), float(row["iter_time_s_at_proportional"]))
        except (TypeError, ValueError):
            raise SynergyError(f"throughput matrix {path}, line {n}: not a number where "
                               "one belongs") from None
        if (not name or c < 1 or not 0 < m < math.inf or not 0 <= value < math.inf
                or not all(0 < x < math.inf for x in info)):
            raise SynergyError(f"throughput matrix {path}, line {n}: out of range")
        cells.setdefault(name, {})[(c, m)] = value
        meta.setdefault(name, info)
    out = {}
    for name, grid in cells.items():
        cpus = tuple(sorted({c for c, _ in grid}))
        mems = tuple(sorted({m for _, m in grid}))
        missing = [(c, m) for c in cpus for m in mems if (c, m) not in grid]
        if missing:
            raise SynergyError(f"throughput matrix {path}: {name} lacks {len(missing)} grid "
                               f"point(s), e.g. {missing[0][0]} CPUs x {missing[0][1]} GB")
        ideal_c, ideal_m, ideal_s, iter_s = meta[name]
        out[name] = Workload(name, cpus, mems, tuple(tuple(grid[c, m] for m in mems)
                                                     for c in cpus),
                             iter_s, int(ideal_c), ideal_m, ideal_s)
    return out


def from_profile(profile: Profile, share_cpus: int, share_mem_gb: float,
                 max_cpus: int, max_mem_gb: float) -> Workload:
    """A stored profile as a simulator workload: the engine's `speed()` on a grid of
    cores (1..max_cpus) and memory per GPU, relative to the GPU-proportional share.
    One iteration is one batch."""
    gpus = max(1, profile.allocation.gpus)
    measured = {p.cores: p.samples_per_s for p in profile.train_points()}
    # speed() is per job; the table is per GPU, so cores and memory scale by the GPUs.
    mems = sorted({share_mem_gb / 4, share_mem_gb / 2, share_mem_gb, 2 * share_mem_gb,
                   max_mem_gb})
    cpus = list(range(1, max_cpus + 1))

    def rate(c: int, m: float) -> float:
        """The engine's speed at `c` cores and `m` GB per GPU, for the job's GPUs together."""
        return speed(profile, measured, c * gpus, m * 1024 * gpus)

    base = rate(share_cpus, share_mem_gb)
    if not base > 0:
        raise SynergyError(f"profile {profile.fingerprint} predicts no throughput at the "
                           "GPU-proportional share")
    table = tuple(tuple(rate(c, m) / base for m in mems) for c in cpus)
    top = max(max(row) for row in table)
    ideal = next((c, m) for c in cpus for m in mems if rate(c, m) / base >= top - 1e-9)
    return Workload(profile.job_name or profile.fingerprint, tuple(cpus), tuple(mems), table,
                    profile.batch / base, ideal[0], ideal[1], top)


def models_of(workloads: Mapping[str, Workload], names: Iterable[str], where: str) -> None:
    """Refuse a trace that names models the workloads do not have."""
    unknown = sorted(set(names) - set(workloads))
    if unknown:
        raise SynergyError(f"{where}: no throughput profile for model(s) {', '.join(unknown)}"
                           f"; known: {', '.join(sorted(workloads))}")
