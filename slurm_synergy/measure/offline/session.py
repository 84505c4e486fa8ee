"""The steps of one profile as they run: how many iterations each measures, what each
measured, the progress shown, and the time budget that decides whether an optional step
runs."""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from typing import Any, Callable, Sequence

from tqdm import tqdm

from slurm_synergy.gpu.sampler import Sampler
from slurm_synergy.model.profile import Point, combine
from slurm_synergy.probe.records import LEAST_STEPS
from slurm_synergy.probe.supervise import PEAK_S
from slurm_synergy.measure.errors import PROG, NothingToMeasure, ProfilingError
from slurm_synergy.measure.offline.steps import Runner, Step, to_point

MOST_ITERATIONS = 20     # measured in a step, unless asked (--max-iterations) or LEAST_MEASURE_S
FIRST_ITERATIONS = 10    # the first step's, whose rate sets the window of the rest
# A step measured over less than this reads its start more than the workload: the loader's
# batches fetched ahead during its warm-up (prefetch_factor per worker) are taken at once.
# The hard-coded loop's 20 iterations (0.2 s, 2 workers) read 7,400-8,200 samples/s where
# steps of 4 s, and the run itself, read 5,500-6,500 (docs/profiling.md, the styles).
LEAST_MEASURE_S = 1.0


class Session:
    def __init__(self, runner: Runner, *, top: int, procs: int, mem_mb: int, gpus: list[Any],
                 workers_at: Callable[[int], int], window_s: float, max_iterations: int,
                 least_s: float, budget_s: float, steps: int, desc: str,
                 log: Callable[[str], None], t0: float) -> None:
        self.runner, self.top, self.procs, self.mem_mb, self.gpus = runner, top, procs, mem_mb, gpus
        self.workers_at = workers_at                     # a training step's workers, by cores
        self.window_s, self.max_iterations, self.budget_s = window_s, max_iterations, budget_s
        self.least_s = least_s                           # the shortest measurement that counts
        self.log = log
        self.t0 = t0                                     # the profile's start (perf_counter)
        self.runs: dict[int, list[Point]] = {}           # the core sweep's runs, by cores
        self.measured: dict[int, dict[str, Any]] = {}    # each count's first measurement
        self.sampler: Sampler | None = None              # GPU readings of the first top run
        # `steps` is the least the profile takes; more where the budget allows.
        self.bar = tqdm(total=steps, unit="step", desc=desc, file=sys.stderr, disable=None)

    def close(self) -> None:
        """Close the progress bar."""
        self.bar.close()

    def spent_s(self) -> float:
        """Seconds since the profile started."""
        return time.perf_counter() - self.t0

    def fits(self, seconds: float) -> bool:
        """Whether steps that took `seconds` last time still end within the budget."""
        return self.spent_s() + seconds <= self.budget_s

    def counts_fit(self, counts: Sequence[int]) -> bool:
        """Whether one more run of each of `counts` fits, each taking as long as its
        own last run did (a count's runs cost alike; counts differ by their start-up)."""
        return self.fits(sum(self.runs[k][-1].step_s for k in counts))

    def measure(self, k: int) -> float:
        """A training run on k cores (the sweep's unit); its samples/s."""
        step = Step("train", k, self.workers_at(k))
        self.bar.set_postfix_str(f"{k} cores")
        # Each count's first run starts the script as the job will: its memory is the
        # job's, and the footprint is the highest of several such runs (one alone put
        # a workload 2% either side of a rounding step from one profile to the next).
        fresh = k not in self.runs
        # The first run, at the most cores and workers, trains on past its measurement
        # while its memory is read often (PEAK_S).
        peak_s = PEAK_S if not self.runs else 0.0
        if k == self.top and self.gpus and self.sampler is None:
            with Sampler(self.gpus) as self.sampler:
                m, wall = self._step(step, fresh, peak_s)
        else:
            m, wall = self._step(step, fresh, peak_s)
        pt = to_point(step, m, wall, self.mem_mb, self.procs)
        if not self.measured:
            # The first run sets the window of every later one, so those measure alike.
            self.runner.iterations = window_iterations(m, self.window_s, self.max_iterations,
                                                       self.least_s)
            seconds = measured_s(m)
            if seconds is not None and seconds < self.least_s:
                pt = self._rate_again(step, pt, seconds)
        self.measured.setdefault(k, m)
        self.runs.setdefault(k, []).append(pt)
        if self.bar.total is not None and self.runner.steps_run > self.bar.total:
            self.bar.total = self.runner.steps_run
        n = len(self.runs[k])
        self.advance(f"{k} cores, {step.workers} worker(s) per process: "
                     f"{pt.samples_per_s:.1f} samples/s, "
                     f"{pt.data_stall_fraction:.0%} waiting on data ({pt.step_s:.0f}s)"
                     + (f", run {n}" if n > 1 else ""))
        return pt.samples_per_s

    def _step(self, step: Step, fresh: bool = False, peak_s: float = 0.0
              ) -> tuple[dict[str, Any], float]:
        """Runner.run, where a step that sees no training step after an earlier one did
        is a failed step (ProfilingError), not a workload with nothing to measure: only
        the first step's NothingToMeasure holds the workload (run.py)."""
        try:
            return self.runner.run(step, fresh, peak_s)
        except NothingToMeasure as e:
            if not self.measured:
                raise
            raise ProfilingError(f"{e} (its training steps were measured before)") from e

    def _rate_again(self, step: Step, first: Point, seconds: float) -> Point:
        """A first run too short for its rate to count: the rate of a run of the window
        just set; the memory is still the first's (the script's own start). Where that
        run fails (a script a fork of the warm interpreter cannot run), the first's."""
        try:
            again, more = self.runner.run(step, False, 0.0)
        except ProfilingError as e:
            self.log(f"{PROG}: the first run measured {seconds:.2f}s, under "
                     f"{self.least_s:g}s, and its second run failed "
                     f"({str(e).splitlines()[0]}): its own rate counts")
            return first
        rerun = to_point(step, again, more, self.mem_mb, self.procs)
        self.log(f"{PROG}: the first run measured {seconds:.2f}s, under {self.least_s:g}s: "
                 f"its rate is a second run's, of {self.runner.iterations} iterations")
        return replace(first, samples_per_s=rerun.samples_per_s,
                       data_stall_fraction=rerun.data_stall_fraction,
                       host_cpu_s_per_sample=rerun.host_cpu_s_per_sample,
                       step_s=first.step_s + more)

    def rates(self, k: int) -> list[float]:
        """The samples/s of each run at `k` cores, in the order they ran."""
        return [r.samples_per_s for r in self.runs[k]]

    def train_points(self, counts: list[int]) -> list[Point]:
        """One train point per count, its repeated runs combined into one (`combine`)."""
        return [combine(self.runs[k]) for k in counts]

    def run(self, step: Step) -> Point:
        """One step outside the sweep (a component, fewer GPUs)."""
        m, wall = self._step(step)
        return to_point(step, m, wall, self.mem_mb, self.procs)

    def component(self, step: Step) -> Point:
        """One component step (loader or compute alone), counted on the progress bar."""
        self.bar.set_postfix_str(f"{step.measure} only")
        pt = self.run(step)
        self.advance(f"{step.measure} only, {step.cores} cores: {pt.samples_per_s:.1f} "
                     f"samples/s ({pt.step_s:.0f}s)")
        return pt

    def shared_core(self) -> tuple[Point, Point] | None:
        """The one-core pair, for the counts where the loader's worker and the trainer
        take turns on a core: the input-only step alone on one core, then the
        compute-only and input-only steps at once on that core (the trainer's CPU time
        per sample there is what counts). None where steps cannot share a core, or the
        pair failed (logged): the components apart then count, as before the pair."""
        if not self.runner.can_pair():
            return None
        try:
            alone = self.component(Step("loader", 1, 1))
            self.bar.set_postfix_str("compute beside loader")
            (beside, _), wall = self.runner.run_together((Step("compute", 1, 1),
                                                          Step("loader", 1, 1)))
        except ProfilingError as e:
            self.log(f"{PROG}: the one-core pair failed, so the components apart set the "
                     f"model at one core: {e}")
            return None
        pt = to_point(Step("shared", 1, 1), beside, wall, self.mem_mb, self.procs)
        self.advance(f"compute only beside loader only, on 1 core: {pt.samples_per_s:.1f} "
                     f"samples/s, {pt.host_cpu_s_per_sample * 1e3:.2f} ms of CPU a sample "
                     f"({wall:.0f}s)")
        return alone, pt

    def advance(self, line: str) -> None:
        """Count one step done; in a batch log (no bar drawn), a line saying what it measured."""
        self.bar.update(1)
        if self.bar.disable:     # a batch log: a line per step instead of a redrawn bar
            self.log(f"{PROG}: step {self.runner.steps_run}: {line}")


def measured_s(measured: dict[str, Any]) -> float | None:
    """The seconds a step's measurement spanned, where the probe says."""
    seconds = measured.get("seconds")
    return float(seconds) if isinstance(seconds, (int, float)) and seconds > 0 else None


def window_iterations(measured: dict[str, Any], window_s: float, most: int,
                      least_s: float = 0.0) -> int:
    """Measured iterations that fill about `window_s` seconds at the rate of a step just
    run: slow workloads get fewer (the profile's cost stays near its share of the job),
    never fewer than LEAST_STEPS nor more than `most`, except that a fast one gets as
    many as fill `least_s` (LEAST_MEASURE_S where the iterations were not asked for),
    `window_s` still capping them. A count, not a deadline, so every rank of a DDP job
    stops at the same step."""
    steps, seconds = measured.get("steps"), measured_s(measured)
    if not isinstance(steps, (int, float)) or seconds is None or steps <= 0:
        return most
    rate = steps / seconds
    most = max(most, round(least_s * rate))
    return max(min(most, LEAST_STEPS), min(most, round(window_s * rate)))
