"""Job priority as slurmctld computes it: priority/basic (submission order) or
priority/multifactor's age, job-size and fair-share factors with the weights a site sets.

- Age: the time pending over PriorityMaxAge (7 days by default), at most 1.
- Job size: the job's cores over the cluster's (PriorityFavorSmall=NO: larger jobs first;
  YES: one minus it).
- Fair-share, the classic formula: 2^(-U/S), where U is the user's share of the cluster's
  usage (core-seconds, Slurm's default billing), decayed with PriorityDecayHalfLife
  (7 days), and S the user's share of the shares (every user alike, one account). Slurm's
  default algorithm since 19.05, Fair Tree, ranks users by the same U/S; with one level of
  accounts the order of users is the same.
Priorities are recomputed every PriorityCalcPeriod (5 minutes) and at submission.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DAY_S = 86400.0


@dataclass(frozen=True)
class Priority:
    """slurm.conf's Priority* settings; all weights 0 is priority/basic."""

    weight_age: int = 0
    weight_fairshare: int = 0
    weight_job_size: int = 0
    max_age_s: float = 7 * DAY_S
    half_life_s: float = 7 * DAY_S
    calc_period_s: float = 300.0
    favor_small: bool = False

    @property
    def multifactor(self) -> bool:
        """Whether any factor weighs: otherwise jobs run in submission order."""
        return bool(self.weight_age or self.weight_fairshare or self.weight_job_size)


@dataclass
class Usage:
    """Each user's decayed usage in core-seconds."""

    half_life_s: float
    users: set[str] = field(default_factory=set)
    used: dict[str, float] = field(default_factory=dict)
    at: float = 0.0

    def decay_to(self, now: float) -> None:
        """Every user's usage decayed from the last update to `now`."""
        if now > self.at and self.half_life_s > 0:
            k = 0.5 ** ((now - self.at) / self.half_life_s)
            for u in self.used:
                self.used[u] *= k
        self.at = max(self.at, now)

    def add(self, user: str, core_s: float, now: float) -> None:
        """A job's core-seconds charged to its user when it ends."""
        self.decay_to(now)
        self.used[user] = self.used.get(user, 0.0) + core_s

    def factor(self, user: str) -> float:
        """2^(-U/S): 1 for a user who used nothing, 0.5 for one who used their share."""
        total = sum(self.used.values())
        if total <= 0 or not self.users:
            return 1.0
        return 2.0 ** (-(self.used.get(user, 0.0) / total) * len(self.users))


def priority(p: Priority, usage: Usage, user: str, submit_s: float, cpus: int,
             cluster_cpus: int, now: float) -> float:
    """A pending job's priority at `now` (multifactor); higher runs first."""
    age = min(1.0, max(0.0, now - submit_s) / p.max_age_s) if p.max_age_s > 0 else 1.0
    size = min(1.0, cpus / max(1, cluster_cpus))
    if p.favor_small:
        size = 1.0 - size
    return (p.weight_age * age + p.weight_job_size * size
            + p.weight_fairshare * usage.factor(user))
