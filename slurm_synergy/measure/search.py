"""Synergy's search over a job's cores, shared by both ways of measuring: halve the cores
from the job's own while throughput stays within a plateau of the best; a count that falls
below it rules out the counts below it (inrun/supervisor.py in windows while the job
trains, offline/sweep.py in steps of its own)."""

from __future__ import annotations

# Synergy's plateau: fewer cores are worth trying while the last count kept within this
# share of the best throughput (the offline profiler's --plateau).
PLATEAU = 0.10


def halving(top: int, floor: int = 1) -> list[int]:
    """`top`, `top // 2`, ... while a count keeps at least `floor` cores (one per process)."""
    counts, k = [top], top
    while k // 2 >= max(1, floor):
        k //= 2
        counts.append(k)
    return counts


def below_plateau(speed: float, best: float, plateau: float = PLATEAU) -> bool:
    """Whether `speed` fell more than `plateau` (a share) below `best`."""
    return speed < (1.0 - plateau) * best
