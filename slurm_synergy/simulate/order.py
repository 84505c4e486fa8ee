"""Scheduling policies: the order in which a round offers jobs to the allocator.

- fifo: by arrival in the queue (a resubmitted job's arrival is its resubmission, as
  Slurm sees a new job).
- srtf: shortest remaining time first, at the speed the job ran at in the last round
  (or, if it did not run then, the speed its allocator promises: its nominal speed).
- las: least attained service first, in GPU-seconds held (Tiresias's discipline).
- ftf: finish-time fairness (Themis): the job furthest behind a fair finish first, by
  (time since arrival + remaining time) / its run time alone at the share.
Ties go to the earlier arrival, then the trace order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass(slots=True)
class JobState:
    index: int
    job_id: str
    model: str
    arrival_s: float              # its first arrival: JCT counts from here
    iters: int
    gpus: int
    iter_s: float                 # one iteration at the share
    nominal: float                # the speed its allocator promises
    done: int = 0
    attained_s: float = 0.0       # GPU-seconds held
    last_speed: float | None = None   # speed in the previous round; None: did not run
    first_start_s: float | None = None
    end_s: float | None = None
    speed_sum: float = 0.0        # sum of per-round speeds, for the mean speed
    queued_s: float = field(init=False)   # when it last joined the queue (flows.py)

    def __post_init__(self) -> None:
        self.queued_s = self.arrival_s

    @property
    def started_s(self) -> float:
        """When it first ran; asked only of a job the simulation ran to the end."""
        if self.first_start_s is None:
            raise ValueError(f"job {self.job_id} never started")
        return self.first_start_s

    @property
    def finished_s(self) -> float:
        """When it ended; asked only of a job the simulation ran to the end."""
        if self.end_s is None:
            raise ValueError(f"job {self.job_id} has not finished")
        return self.end_s

    def remaining_s(self) -> float:
        """Seconds of work left at the last round's speed (the nominal one if it did not run)."""
        speed = self.last_speed or self.nominal
        return (self.iters - self.done) * self.iter_s / speed


OrderKey = Callable[[JobState, float], tuple]

ORDERS: dict[str, OrderKey] = {
    "fifo": lambda j, now: (j.queued_s, j.index),
    "srtf": lambda j, now: (j.remaining_s(), j.queued_s, j.index),
    "las": lambda j, now: (j.attained_s, j.queued_s, j.index),
    "ftf": lambda j, now: (-(now - j.queued_s + j.remaining_s()) / (j.iters * j.iter_s),
                           j.queued_s, j.index),
}
