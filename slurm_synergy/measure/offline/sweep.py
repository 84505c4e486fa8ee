"""What is swept: cores (Synergy's halving search, then its repeats), the GPUs' readings
during the widest step, and the GPU power limits (Zeus's)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

from slurm_synergy.gpu import Gpu, GpuError
from slurm_synergy.gpu.sampler import Sampler
from slurm_synergy.hooks.power import ceiling_mw
from slurm_synergy.model.profile import GpuReadings, PowerPoint
from slurm_synergy.measure.search import below_plateau, halving
from slurm_synergy.measure.offline.gpu import power_limits_to_try
from slurm_synergy.measure.offline.steps import Runner, Step


def core_sweep(top: int, measure: Callable[[int], float], plateau: float,
               step: int = 1) -> list[int]:
    """Synergy's search: all cores, then halve while within `plateau` of the best; where
    a halving falls below, step down from the last good count in units of `step` (the
    job's GPUs) until one falls below too. Returns the counts tried, in order."""
    tried = [top]
    best = measure(top)
    good = top
    for k in halving(top)[1:]:
        tried.append(k)
        speed = measure(k)
        best = max(best, speed)
        if below_plateau(speed, best, plateau):
            break
        good = k
    else:
        return tried                    # within the plateau down to one core
    for j in range(good - step, k, -step):
        tried.append(j)
        speed = measure(j)
        best = max(best, speed)
        if below_plateau(speed, best, plateau):
            break
    return tried


def repeat_sweep(swept: Sequence[int], runs: Callable[[int], Sequence[float]],
                 measure: Callable[[int], float], fits: Callable[[Sequence[int]], bool],
                 repeats: int, max_repeats: int,
                 unclear: Callable[[dict[int, Sequence[float]]], set[int]],
                 after: Callable[[], None] = lambda: None) -> None:
    """Measure the swept core counts again, round-robin in the sweep's order, so that no
    count's runs are back to back and a change in the machine's load falls on all of them.

    First until each has `repeats` runs (budget or not: without them the noise is
    unknown); then, a round at a time while `fits` says one more run of each fits the
    budget, only the counts `unclear` names (those the decision's noise rule cannot yet
    settle), up to `max_repeats`; then `after` (what the budget buys once the decision
    is settled)."""
    while True:
        short = [k for k in swept if len(runs(k)) < repeats]
        if not short:
            break
        for k in short:
            measure(k)
    while True:
        open_counts = unclear({k: runs(k) for k in swept})
        todo = [k for k in swept if k in open_counts and len(runs(k)) < max_repeats]
        if not todo or not fits(todo):
            break
        for k in todo:
            measure(k)
    after()


def gpu_readings(sampler: Sampler | None, reason: str, gpus: list[Gpu],
                 summary: dict[str, Any]) -> GpuReadings:
    """The profile's GPU fields: the GPUs' mean utilisation (%), memory peak (MB), summed mean
    power (W) and energy from the sampler, with their power limits; unavailable without GPUs."""
    if not gpus:
        return GpuReadings(available=False, reason=reason)
    try:
        rng, limit = gpus[0].power_range(), gpus[0].power_limit_mw()
    except GpuError as e:     # readings go on; only the power fields stay empty
        rng, limit, reason = None, None, str(e)
    peak = summary.get("peak_gpu_mem_mb")
    utils = [t.util_mean for t in sampler.totals if t.util_mean is not None] if sampler else []
    powers = [t.power_mean_w for t in sampler.totals
              if t.power_mean_w is not None] if sampler else []
    return GpuReadings(
        available=True, name=gpus[0].info.name, count=len(gpus),
        util_pct=sum(utils) / len(utils) if utils else None,
        mem_used_mb=max(t.mem_peak_mb for t in sampler.totals) if utils and sampler else None,
        peak_torch_mem_mb=float(peak) if isinstance(peak, (int, float)) else None,
        avg_power_w=sum(powers) if powers else None,
        energy_j=sampler.energy_j() if sampler else None, reason=reason,
        power_limit_w=limit / 1000 if limit is not None else None,
        min_limit_w=rng.min_mw / 1000 if rng else None,
        max_limit_w=rng.max_mw / 1000 if rng else None)


def power_sweep(runner: Runner, step: Step, gpus: list[Gpu], readings: GpuReadings,
                cap_w: float) -> GpuReadings:
    """Zeus's sweep: each limit from the top down, the step's warm-up left out of the
    throughput (the trainer does that), the limit put back afterwards whatever happens.
    The top is the GPU's ceiling (the site's cap `cap_w` in W, else with 0 the default
    limit), which no job exceeds."""
    try:
        top = ceiling_mw(gpus[0].power_range(), cap_w) / 1000
        before = [g.power_limit_mw() for g in gpus]
    except GpuError as e:
        return replace(readings, power_sweep_note=f"no power sweep: {e}")
    points: list[PowerPoint] = []
    try:
        for limit in power_limits_to_try(readings.min_limit_w or top, top):
            try:
                for g in gpus:
                    g.set_power_limit_mw(int(limit * 1000))
            except GpuError as e:   # no permission for a normal user
                return replace(readings, power_sweep_note=f"power limits cannot be set by this "
                               f"job ({e}); the node prolog applies them as root")
            with Sampler(gpus) as sampler:
                summary, _ = runner.run(step)
            powers = [t.power_mean_w for t in sampler.totals if t.power_mean_w is not None]
            points.append(PowerPoint(limit, float(summary["samples_per_s"]), sum(powers)))
    finally:
        for g, mw in zip(gpus, before):
            try:
                g.set_power_limit_mw(mw)
            except GpuError:
                pass
    return replace(readings, power_sweep=tuple(points))
