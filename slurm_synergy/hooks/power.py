"""The power-limit rules the prolog, the epilog and the profiler's sweep share.

The ceiling of a GPU is the site cap, or the device's default limit where the site sets
none, held inside the device's own range. Nothing this project does leaves a GPU above
its ceiling: the prolog applies a job's limit only below it, the epilog always puts the
GPU back to it, and the profiler's sweep starts from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_synergy.gpu import GpuError, PowerRange
from slurm_synergy.model import comment as comment_format



def ceiling_mw(rng: PowerRange, cap_w: float) -> int:
    """The most a GPU may draw between and during jobs. A cap outside the device's range
    is held at the nearest end: below the minimum the GPU cannot go, above the maximum
    the cap is no constraint."""
    if cap_w > 0:
        return rng.clamp(int(round(cap_w * 1000)))
    if rng.default_mw is None:
        raise GpuError("the site sets no cap and the driver gives no default limit")
    return rng.clamp(rng.default_mw)


@dataclass(frozen=True)
class Target:
    mw: int
    why: str


def job_target(rng: PowerRange, cap_w: float, asked_w: int | None) -> Target:
    """The limit a job runs at: the one it asked for (its decision), never above the
    ceiling, never below the device's minimum; the ceiling when it asked for none."""
    top = ceiling_mw(rng, cap_w)
    cap_text = f"site cap {cap_w:g} W" if cap_w > 0 else f"default {top / 1000:g} W"
    if cap_w > 0 and top != int(round(cap_w * 1000)):
        cap_text += f", held at {top / 1000:g} W by the device's range"
    if asked_w is None:
        return Target(top, f"no decision: the ceiling ({cap_text})")
    asked = asked_w * 1000
    if asked > top:
        return Target(top, f"decision {asked_w} W is above the ceiling ({cap_text})")
    if asked < rng.min_mw:
        return Target(rng.min_mw, f"decision {asked_w} W is below the device's minimum "
                                  f"{rng.min_mw / 1000:g} W")
    return Target(asked, f"decision {asked_w} W ({cap_text})")


def asked_power_w(comment: str) -> int | None:
    """The power limit of the plugin's decision, from the job's comment (`,pNNN`).

    The comment is the user's to write too, so this is only a wish: job_target never lets it
    above the ceiling.
    """
    decided = comment_format.decision(comment or "")
    return decided.power_w if decided else None
