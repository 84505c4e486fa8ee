"""How far apart a point's runs lie, and when runs cannot tell two core counts apart.

One test serves twice: the decision's noise rule (keep the fewer cores when the runs
cannot place them outside the tolerance, as long as their median loses no more than the
policy's max_noise_loss) and the profiler's extra repeats (run again exactly the counts
that rule cannot yet settle), so the profiler spends its budget where the decision would
otherwise rest on noise.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Mapping, Sequence


@dataclass(frozen=True)
class NoiseRule:
    """The policy's knobs that weigh a profile's noise (model.policy.Policy.noise)."""

    tolerance: float      # a count within this of the best, by the medians, is taken
    min_spread: float     # the least spread a point with repeats is counted as
    max_spread: float     # a deciding point whose runs lie further apart decides nothing
    max_loss: float       # the most a count the runs cannot tell apart may lose, by its
                          # median, and still be taken; at or below the tolerance the
                          # medians alone decide

    def excused(self, rate: float, best: float) -> bool:
        """Whether a count the runs cannot tell apart is near enough to be taken: its
        median at most `max_loss` under the best's. Noise may place a count on either
        side of the tolerance line; it never excuses a larger loss than this."""
        return rate >= (1 - self.max_loss) * best


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


def within_noise(measured: Mapping[int, float], spreads: Mapping[int, float],
                 cpus: int, best_k: int, best: float, tolerance: float) -> list[int]:
    """The measured counts below `cpus` that the runs cannot place outside the
    tolerance, fewest first. Empty when every smaller count is clearly slower, or has
    no spread (a single run)."""
    s_best = spreads.get(best_k)
    if s_best is None:
        return []
    return [k for k in sorted(measured)
            if k < cpus and spreads.get(k) is not None
            and cannot_tell(measured[k], spreads[k], best, s_best, tolerance)]


def unsettled(runs: Mapping[int, Sequence[float]], rule: NoiseRule) -> set[int]:
    """The core counts whose runs leave the decision resting on noise: a count whose
    runs lie further apart than `max_spread` (the decision would refuse it), and a
    fewer-core count that is not within the tolerance by its median but cannot be placed
    outside it, and whose band reaches the max_loss line (more runs may move its median
    across it), with the best count it is weighed against. Empty when more runs would
    change nothing."""
    centres = {k: statistics.median(v) for k, v in runs.items() if v}
    if not centres:
        return set()
    spreads = {k: spread_of(v) for k, v in runs.items() if v}
    out = {k for k, s in spreads.items() if s is not None and s > rule.max_spread}
    best_k = max(sorted(centres), key=lambda k: centres[k])
    best = centres[best_k]
    floored = counted(spreads, rule.min_spread)
    if best_k not in floored:
        return out
    for k, c in centres.items():
        if (k < best_k and k in floored and c < (1 - rule.tolerance) * best
                and cannot_tell(c, floored[k], best, floored[best_k], rule.tolerance)
                and rule.excused(c * (1 + floored[k]), best)):
            out |= {k, best_k}
    return out
