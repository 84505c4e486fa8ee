"""Zeus²'s own choice, re-derived from its published method, for comparison only.

Zeus² (the zeus_extension project) splits a global batch between one GPU of each of two
types. Per type and power limit it fits the measured time and average power (energy /
time) against batch size as quadratics (least squares); it then scores every split
b1 + b2 = B, b1 in [0, B), and every pair of limits by

    sum over the two GPUs of (0.5 * power(b) + 0.5 * limit) * time(b)

with negative fitted values taken as 0, and keeps the lowest. The fits are evaluated
far beyond the measured batch sizes, the two GPUs' times are added as if neither waited
for the other, and a GPU that finishes first is charged nothing for waiting: the
planner in plan.py does none of these, and evaluates this choice with its own model.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

import numpy as np

from slurm_synergy.hetero.traces import TypeTrace


@dataclass(frozen=True)
class Choice:
    batches: tuple[int, int]
    limits: tuple[float, float]
    score: float                 # Zeus²'s own objective, in its units


def _fits(trace: TypeTrace) -> dict[float, tuple[np.ndarray, np.ndarray]]:
    """Quadratic coefficients of time and of average power against batch, per limit."""
    out = {}
    for limit in trace.limits:
        sizes = trace.batches(limit)
        costs = [trace.points[limit][b] for b in sizes]
        x = np.array(sizes, dtype=float)
        time = np.array([c.time_s for c in costs])
        power = np.array([c.energy_j / c.time_s for c in costs])
        out[limit] = (np.polyfit(x, time, 2), np.polyfit(x, power, 2))
    return out


def zeus2_choice(first: TypeTrace, second: TypeTrace, global_batch: int) -> Choice:
    """Zeus²'s split of `global_batch` between one GPU of each type, and their limits: the
    lowest of its score over every split and pair of measured limits."""
    fits = [_fits(first), _fits(second)]
    b1 = np.arange(global_batch)
    shares = (b1, global_batch - b1)
    best: Choice | None = None
    for limits in product(first.limits, second.limits):
        score = np.zeros(global_batch)
        for fit, share, limit in zip(fits, shares, limits):
            time_c, power_c = fit[limit]
            time = np.maximum(np.polyval(time_c, share), 0.0)
            power = np.maximum(np.polyval(power_c, share), 0.0)
            score += (0.5 * power + 0.5 * limit) * time
        i = int(np.argmin(score))
        if best is None or score[i] < best.score:
            best = Choice((int(b1[i]), int(global_batch - b1[i])), limits, float(score[i]))
    assert best is not None
    return best
