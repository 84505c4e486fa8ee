"""How far apart a point's runs lie, and when runs cannot tell two core counts apart.

One test serves twice: the decision's noise rule (keep the fewer cores when the runs
cannot place them outside the tolerance) and the profiler's extra repeats (run again
exactly the counts that rule cannot yet settle), so the profiler spends its budget where
the decision would otherwise rest on noise.
"""

from __future__ import annotations

import statistics
from typing import Mapping, Sequence


def spread_of(runs: Sequence[float]) -> float | None:
    """The runs' median absolute deviation over their median: for two runs half their
    range; from three on, one disturbed run no longer widens it. None with fewer than two
    runs (the noise is unknown)."""
    if len(runs) < 2:
        return None
    centre = statistics.median(runs)
    if centre <= 0:
        return None
    return statistics.median(abs(r - centre) for r in runs) / centre


def counted(spreads: Mapping[int, float | None], min_spread: float) -> dict[int, float]:
    """Each known spread as the decision counts it: at least `min_spread`, since runs a
    minute apart agree more than profiles further apart do."""
    return {k: max(s, min_spread) for k, s in spreads.items() if s is not None}


def cannot_tell(rate: float, spread: float, best: float, best_spread: float,
                tolerance: float) -> bool:
    """Whether a count measured `rate` ±spread may be within `tolerance` of `best`
    ±best_spread: the top of its band reaches the tolerance line drawn from the bottom
    of the best's."""
    return rate * (1 + spread) >= (1 - tolerance) * best * (1 - best_spread)


def cheaper_within_noise(measured: Mapping[int, float], spreads: Mapping[int, float],
                         cpus: int, best_k: int, best: float, tolerance: float) -> int | None:
    """The fewest measured cores below `cpus` that the runs cannot place outside the
    tolerance. None when every smaller count is clearly slower, or has no spread (a
    single run)."""
    s_best = spreads.get(best_k)
    if s_best is None:
        return None
    for k in sorted(measured):
        s = spreads.get(k)
        if k < cpus and s is not None and cannot_tell(measured[k], s, best, s_best,
                                                       tolerance):
            return k
    return None


def unsettled(runs: Mapping[int, Sequence[float]], tolerance: float, min_spread: float,
              max_spread: float) -> set[int]:
    """The core counts whose runs leave the decision resting on noise: a count whose
    runs lie further apart than `max_spread` (the decision would refuse it), and a
    fewer-core count that is not within the tolerance by its median but cannot be placed
    outside it, with the best count it is weighed against. Empty when more runs would
    change nothing."""
    centres = {k: statistics.median(v) for k, v in runs.items() if v}
    if not centres:
        return set()
    spreads = {k: spread_of(v) for k, v in runs.items() if v}
    out = {k for k, s in spreads.items() if s is not None and s > max_spread}
    best_k = max(sorted(centres), key=lambda k: centres[k])
    best = centres[best_k]
    floored = counted(spreads, min_spread)
    if best_k not in floored:
        return out
    for k, c in centres.items():
        if (k < best_k and k in floored and c < (1 - tolerance) * best
                and cannot_tell(c, floored[k], best, floored[best_k], tolerance)):
            out |= {k, best_k}
    return out
