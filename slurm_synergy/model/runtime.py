"""A job's run time, predicted from its workload's finished jobs, and the --time-min that
lets Slurm's backfill start it sooner without making it the job's kill time.

Slurm lowers a pending job's time limit to no less than its time_min where that starts it
earlier; the user's --time stays the limit otherwise. The prediction is an upper bound
more than a mean (Tsafrir et al.: the scheduler needs a limit a job rarely passes):
- the longest of the key's last HISTORY completed jobs, each scaled to the job's work
  (a job list's row carries its iterations or epochs: a run of a tenth of them counts
  ten times longer, a longer one as long) and size:
  a job that ran on more cores than this one is counted `slowdown` times longer (the
  decision's best rate over its predicted one, at least the rate it ran at over the
  decided rate, since no size measured faster than the best; without a decision such
  runs are left out), one on as many or fewer as it took;
- times a margin: the policy's, twice it where one job is all the history, and at least
  3x the history's spread (max - min over the median);
- none where a recent job ran out of its limit (its need is unknown), or the history is
  shorter than the policy asks.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

# The most recent completed jobs of a key a prediction rests on: a workload that changes
# (more data, another model size) is followed within this many jobs.
HISTORY = 5
# States whose elapsed time is the job's whole work; TIMEOUT is a lower bound of it.
DONE = "COMPLETED"
RAN_OUT = ("TIMEOUT", "DEADLINE")


@dataclass(frozen=True)
class Finished:
    """One ended job of a workload, as sacct (not its user) reports it."""

    job_id: int
    uid: int
    fingerprint: str
    state: str           # sacct's, first word: COMPLETED, TIMEOUT, FAILED, ...
    elapsed_s: int
    cpus: int            # the cores it ran with (AllocCPUS)
    work: tuple[str, int] | None = None   # its known work (model/comment.work), if any


@dataclass(frozen=True)
class Prediction:
    """How long the next job of a key runs at its decided size, and what that rests on."""

    seconds: float       # the longest recent run, scaled to the decided size, s
    jobs: int            # completed jobs it rests on
    spread: float        # (max - min) / median of their scaled run times; 0 for one job
    margin: float        # the share added for the limit

    @property
    def limit_s(self) -> float:
        """The run time a time_min is set from, s."""
        return self.seconds * (1 + self.margin)

    def basis(self) -> str:
        """What the prediction rests on, in words."""
        return (f"{self.seconds:.0f} s, the longest of {self.jobs} completed job(s) at "
                f"this size (spread {self.spread:.0%}), +{self.margin:.0%}")


@dataclass(frozen=True)
class TimeRule:
    """The policy's knobs for time_min (model.policy.Policy.time_rule)."""

    enabled: bool = True
    margin: float = 0.5         # added to the predicted run time
    min_jobs: int = 1           # completed jobs of a key before it gets a time_min
    floor_min: int = 2          # no time_min under this many minutes


def predict(history: Sequence[Finished], decided_cpus: int, slowdown: float,
            rule: TimeRule, work: tuple[str, int] | None = None) -> Prediction | None:
    """The next run's time on `decided_cpus` cores from one key's ended jobs (any order);
    None where they do not say enough. `slowdown` >= 1: how much longer a job that ran on
    more cores would have taken on `decided_cpus`, at most (inf: unknown, such runs are
    left out). `work`: the job's known work; a run of less of the same work counts as
    many times longer, one of more as long, one of other work or none is left out."""
    recent = sorted(history, key=lambda f: f.job_id, reverse=True)[:HISTORY]
    if any(f.state in RAN_OUT for f in recent):
        return None
    # A run on more cores than this job has says nothing of it without a bound.
    done = [f for f in recent if f.state == DONE and f.elapsed_s > 0
            and (f.cpus <= decided_cpus or math.isfinite(slowdown))
            and (f.work is None) == (work is None)
            and (work is None or f.work is not None and f.work[0] == work[0])]
    if len(done) < max(1, rule.min_jobs):
        return None
    scaled = [f.elapsed_s * (max(1.0, slowdown) if f.cpus > decided_cpus else 1.0)
              * (max(1.0, work[1] / f.work[1]) if work and f.work else 1.0)
              for f in done]
    spread = (max(scaled) - min(scaled)) / statistics.median(scaled) if len(scaled) > 1 else 0.0
    margin = max(rule.margin * (2 if len(done) == 1 else 1), 3 * spread)
    return Prediction(max(scaled), len(done), spread, margin)


def time_min_minutes(prediction: Prediction, limit_min: int, rule: TimeRule) -> int | None:
    """The job's --time-min in minutes, where it is below the job's own limit
    (`limit_min`, its --time); None where it would not be."""
    minutes = max(rule.floor_min, math.ceil(prediction.limit_s / 60))
    return minutes if minutes < limit_min else None
