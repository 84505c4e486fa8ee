"""A right-sized run's pace, against the rate its decision predicted.

A decision gives a workload's jobs the fewest cores predicted to train within the policy's
tolerance of the best; a job that then trains slower than that prediction by more than
their noise shows the bet was wrong for it, and the product carries that: the workload's
rates at those cores and fewer are counted lower from then on (model.profile.SlowRun), so
its later jobs are decided more cores. Only where the decision gave fewer cores than the
job asked: a job at its asked size that trains slower has lost nothing to right-sizing.

The trainers' own records (probe/records.py: cumulative samples at their last step
boundary, written every WATCH_RECORD_S) give the run's rate span by span. Each trainer's
first span (workers forking, caches filling) is left out, and the median over the rest
keeps a validation pass or a checkpoint from reading as a slower run. Trainers that ran
side by side (torchrun's ranks) add up; one that ran before or after them (a script that
runs several programs in turn) is left out.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from slurm_synergy.model.engine import measured_rates, speed
from slurm_synergy.model.noise import spread_of
from slurm_synergy.model.profile import Profile, SlowRun
from slurm_synergy.probe.records import ProcessRecord

# The fewest spans past its first a trainer's rate is judged on: at WATCH_RECORD_S each,
# about half a minute of training.
SPANS = 6


@dataclass(frozen=True)
class RunRate:
    """A run's rate over its spans: samples/s (steps/s where the batch is not seen)
    summed over the trainers that ran side by side, each its median over its spans."""

    rate: float
    spread: float       # of the spans' rates (noise.spread_of), the widest trainer's
    spans: int          # the fewest spans any of those trainers had


class Pace:
    """The trainers' records of one run, read as it trains (look), then its rate (rate)."""

    def __init__(self) -> None:
        self.seen: dict[int, list[tuple[float, int]]] = {}   # pid -> (clock, samples)

    def look(self, records: list[ProcessRecord]) -> None:
        """Keep each trainer's record where it is newer than the last one kept."""
        for r in records:
            if r.total_steps <= 0:
                continue
            kept = self.seen.setdefault(r.pid, [])
            if not kept or r.clock > kept[-1][0]:
                kept.append((r.clock, r.total_samples))

    def rate(self) -> RunRate | None:
        """The run's rate; None where no trainer ran SPANS spans past its first."""
        spans = {pid: _spans(kept) for pid, kept in self.seen.items()}
        spans = {pid: s for pid, s in spans.items() if len(s) >= SPANS}
        if not spans:
            return None
        # The longest-lived trainer, and those that covered most of its time beside it.
        ranges = {pid: (self.seen[pid][1][0], self.seen[pid][-1][0]) for pid in spans}
        first = max(ranges, key=lambda pid: ranges[pid][1] - ranges[pid][0])
        a, b = ranges[first]
        together = [pid for pid, (s, e) in ranges.items()
                    if min(b, e) - max(a, s) >= (b - a) / 2]
        rates = [spans[pid] for pid in together]
        return RunRate(rate=sum(statistics.median(r) for r in rates),
                       spread=max(spread_of(r) or 0.0 for r in rates),
                       spans=min(len(r) for r in rates))


def _spans(kept: list[tuple[float, int]]) -> list[float]:
    """The rate of each span between one trainer's records, its first left out."""
    return [(n1 - n0) / (t1 - t0) for (t0, n0), (t1, n1) in zip(kept[1:], kept[2:])
            if t1 > t0]


def predicted_at(profile: Profile, cores: int, mem_mb: float,
                 min_spread: float) -> tuple[float, float]:
    """The rate the profile predicts at `cores` and `mem_mb` (as the engine decides it),
    and its noise: the spread of the runs measured there, else the model's held-out
    error, at least `min_spread`."""
    measured = measured_rates(profile)
    point = next((p for p in profile.train_points() if p.cores == cores), None)
    noise = point.spread if point is not None else profile.model.mean_error
    return speed(profile, measured, cores, mem_mb), max(noise or 0.0, min_spread)


def slower(predicted: float, noise: float, cores: int, run: RunRate, job_id: str,
           at: str) -> SlowRun | None:
    """The run at `cores` as a SlowRun where it trained slower than `predicted` (±`noise`,
    predicted_at's) by more than both noises (the top of its band under the bottom of the
    prediction's); else None."""
    if not predicted > 0 or run.rate * (1 + run.spread) >= predicted * (1 - noise):
        return None
    return SlowRun(job_id or "-", cores, round(predicted, 3), round(run.rate, 3),
                   round(run.spread, 3), at)
