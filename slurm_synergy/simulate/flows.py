"""How a job comes to be right-sized: the three flows the plugin can run a workload by.

A workload is a model at a GPU count: the plugin's fingerprint hashes a job's GPUs with
its command (`JobSpec.fingerprint`), so one profile serves the jobs of one model and
size. A job without its workload's profile runs at its asked size, the GPU-proportional
share; a right-sized one is sized by the allocator under test.

- known: every profile exists before the trace starts; every job is right-sized from
  its arrival (the simulator before flows).
- in-run (the plugin's default): the first job of a workload to start sweeps its cores
  during its first `sweep_s` of run time at its asked size, losing `sweep_lost_s` of
  training to the sweep's windows, and runs on at its asked size to its end. Once the
  sweep ends the decision exists: its siblings still waiting are right-sized where they
  are in the queue, those already running stay at their asked size, later arrivals are
  right-sized at submission.
- resubmit (the old flow): a job submitted while its workload has no profile is marked
  for profiling. The first marked job to start profiles for `profile_s` at its asked
  size, trains nothing, and submits itself again, right-sized: a second wait in the
  queue. A marked sibling that starts once the profile exists submits itself again after
  `restart_s`; one that starts while another job is profiling trains as submitted (the
  profiler's lock, `measure/offline/run.py`).

A lease is held whole, as every lease in the round model is: a job that resubmits
itself 30 s into a round leaves its GPUs idle until the round ends, and they count in
its GPU-hours. The resubmitted job arrives again when it left, and joins the queue at the
next round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from slurm_synergy.model.errors import SynergyError
from slurm_synergy.simulate.order import JobState

FLOWS = ("known", "in-run", "resubmit")


@dataclass(frozen=True)
class FlowCosts:
    """What profiling costs a job. Assumptions, not measurements: no profiling run's
    length has been recorded on a cluster yet. 18 s is 0.5% of a one-hour job; the
    profiler's `--budget` for its optional steps alone is 72 s."""

    profile_s: float = 600.0      # resubmit: the profiling job's allocation, training nothing
    restart_s: float = 30.0       # resubmit: a marked sibling's start before it resubmits
    sweep_s: float = 300.0        # in-run: run time until the sweep's decision exists
    sweep_lost_s: float = 18.0    # in-run: training lost to the sweep's windows

    def __post_init__(self) -> None:
        if not all(0 <= x < math.inf for x in (self.profile_s, self.restart_s, self.sweep_s,
                                                self.sweep_lost_s)):
            raise SynergyError("profiling costs must be finite seconds, 0 or more")
        if self.sweep_lost_s > self.sweep_s:
            raise SynergyError(f"the sweep cannot lose {self.sweep_lost_s:g} s of training "
                               f"in the {self.sweep_s:g} s it runs")


@dataclass(slots=True)
class _Overhead:
    """Lease time a job spends on something other than training, from its next lease."""

    left_s: float
    lost_s: float         # of left_s, the seconds that train nothing
    requeue: bool         # it resubmits itself when done
    profiles: bool        # its workload's profile exists when done


WorkloadKey = tuple[str, int]              # model, GPUs
Resize = Callable[[int, bool], None]       # job index; right-sized, or its asked size


class Flow:
    """One run's profiles: which workloads have one and from when, and what a job's
    start does. The simulator asks it at each job's arrival, each round's start and
    each lease it grants."""

    def __init__(self, name: str, costs: FlowCosts, jobs: Sequence[JobState], resize: Resize):
        if name not in FLOWS:
            raise SynergyError(f"flow {name!r} is not one of {', '.join(FLOWS)}")
        self.name, self.costs, self.jobs, self.resize = name, costs, jobs, resize
        self.profile_at: dict[WorkloadKey, float] = {}   # when its profile came to exist
        self.profiling: set[WorkloadKey] = set()         # a job has begun its profile
        self.marked: set[int] = set()                    # jobs whose next start decides
        self.waiting: dict[WorkloadKey, list[int]] = {}  # in-run: asked, for the decision
        self.decided: list[WorkloadKey] = []             # in-run: profiles of the last round
        self.overhead: dict[int, _Overhead] = {}

    @staticmethod
    def workload(j: JobState) -> WorkloadKey:
        """The job's workload: its model and GPU count."""
        return j.model, j.gpus

    def joined(self, j: JobState) -> None:
        """A job joins the queue (at j.queued_s, before this round): right-sized if its
        workload's profile exists by then, else at its asked size and marked."""
        if self.name == "known":
            return
        w = self.workload(j)
        at = self.profile_at.get(w)
        sized = at is not None and at <= j.queued_s
        self.resize(j.index, sized)
        if sized:
            return
        self.marked.add(j.index)
        if self.name == "in-run":
            self.waiting.setdefault(w, []).append(j.index)

    def round_starts(self) -> None:
        """In-run: the siblings that have not started yet take the decisions made in
        the last round, keeping their place in the queue."""
        for w in self.decided:
            for i in self.waiting.pop(w, ()):
                if self.jobs[i].first_start_s is None:
                    self.resize(i, True)
                    self.marked.discard(i)
        self.decided.clear()

    def leased(self, j: JobState, now: float, round_s: float) -> tuple[float, float | None]:
        """The seconds of this lease the job trains, and, if it resubmits itself during
        it, when it arrives again."""
        if j.index in self.marked:
            self._starts(j, now)
        o = self.overhead.get(j.index)
        if o is None:
            return round_s, None
        used = min(round_s, o.left_s)
        lost = min(used, o.lost_s)
        o.left_s -= used
        o.lost_s -= lost
        if o.left_s > 0:
            return round_s - lost, None
        del self.overhead[j.index]
        if o.profiles:
            w = self.workload(j)
            self.profile_at[w] = now + used
            self.decided.append(w)
        if o.requeue:
            return 0.0, now + used
        return round_s - lost, None

    def _starts(self, j: JobState, now: float) -> None:
        """A marked job starts: what it does with its allocation."""
        self.marked.discard(j.index)
        w = self.workload(j)
        c = self.costs
        if w not in self.profiling:
            self.profiling.add(w)
            self.overhead[j.index] = (
                _Overhead(c.sweep_s, c.sweep_lost_s, False, True) if self.name == "in-run"
                else _Overhead(c.profile_s, c.profile_s, True, True))
        elif self.name == "resubmit" and self.profile_at.get(w, math.inf) <= now:
            self.overhead[j.index] = _Overhead(c.restart_s, c.restart_s, True, False)
        # Else the workload is being profiled now: the job trains at its asked size.
