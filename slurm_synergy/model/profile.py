"""The profile of one workload: what the profiler measured, as a record and its JSON.

Profiles are checked field by field when read (profile_read.py, which reads each field
these records declare, so a field added here is read there): a corrupt or foreign file is
refused with a message naming it, never half-used. Where they are kept is
slurm_synergy.profiles.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field, replace
from typing import Iterable, Sequence

from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.noise import spread_of

# Written by this version. 2 added `raised` and `command_files`, 3 `slowed`; each may be
# absent, so an older profile reads as one of this version that has none, and is saved
# as this version: a reader of an older one alone then refuses it by its version, not as
# corrupt.
PROFILE_VERSION = 3
READ_VERSIONS = (1, 2, PROFILE_VERSION)
MEASURES = ("train", "loader", "compute", "shared")


class ProfileError(SynergyError):
    """A profile file that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class Point:
    """One profiling step: the workload run for a few iterations under fixed limits."""

    # train (end to end), loader (input only), compute (no input), shared (compute beside
    # an input-only step on the same core)
    measure: str
    cores: int
    workers: int                 # loader workers over all the step's processes
    mem_mb: int
    samples_per_s: float
    data_stall_fraction: float
    host_cpu_s_per_sample: float  # CPU time of the training process per sample
    peak_rss_mb: float
    step_s: float                # wall time of the whole step, start-up included
    gpus: int | None = None      # GPUs of the step; None = the allocation's
    # samples/s of each repeat, in the order they ran (interleaved with other points'):
    # samples_per_s is their median. Empty in profiles from before repeats.
    repeats: tuple[float, ...] = ()
    # each repeat's peak memory (footprint_mb's measure); footprint_mb the highest
    peaks_mb: tuple[float, ...] = ()
    # The peak of the part the page cache cannot take back: anonymous and shared memory,
    # each page once, as the cgroup charges it (libraries' file pages it can). None where
    # the kernel does not tell it apart, and in profiles from before it was measured.
    anon_mb: float | None = None
    # A fork of the profiler's warm interpreter (measure/offline/steps.py), not the script
    # started anew: a fork maps fewer of the libraries' pages and shares the rest, so its
    # memory is not the job's and only its rates count. Combined: all its runs were.
    forked: bool = False
    # The tree's peak with each page once (Pss); peak_rss_mb sums its processes'
    # resident memory, so a page the loader workers share with their trainer counts in
    # each. Pss shares a library's pages with every process on the node that maps it,
    # so it falls while other jobs run there. None where the kernel does not tell it,
    # and in profiles from before it was measured.
    peak_pss_mb: float | None = None
    # The tree's own peak (probe.records.TreeMemory.own_mb): its anonymous and shared
    # memory each page once and its file pages whole, whatever else runs on the node.
    # None where the kernel does not tell it, and in profiles from before it was measured.
    peak_own_mb: float | None = None

    @property
    def footprint_mb(self) -> float:
        """The point's peak memory in MB: the tree's own where measured, else each page
        once, else the processes' resident memory summed (more than the job holds)."""
        return self.peak_own_mb or self.peak_pss_mb or self.peak_rss_mb

    @property
    def spread(self) -> float | None:
        """How far apart the repeats lie (noise.spread_of: half the range of two, the
        median absolute deviation of more, over their median). None with fewer than two
        repeats (the noise is unknown)."""
        return spread_of(self.repeats)

    @property
    def peak_spread(self) -> float | None:
        """Half the range of the repeats' memory peaks over the highest; None as above."""
        if len(self.peaks_mb) < 2 or max(self.peaks_mb) <= 0:
            return None
        return (max(self.peaks_mb) - min(self.peaks_mb)) / 2 / max(self.peaks_mb)


def combine(runs: Sequence[Point]) -> Point:
    """Repeats of one point, in the order they ran, as one point: rates and shares are
    their medians (robust to one disturbed run), the memory peak the highest of the runs
    that started the script anew (all runs' where none did), the wall time the sum (what
    the point cost to profile)."""
    if not runs:
        raise ValueError("no runs to combine")
    mem = started_anew(runs)
    def median(name: str) -> float:
        """The runs' median of one field."""
        return statistics.median(getattr(r, name) for r in runs)
    return replace(runs[0], samples_per_s=median("samples_per_s"),
                   data_stall_fraction=median("data_stall_fraction"),
                   host_cpu_s_per_sample=median("host_cpu_s_per_sample"),
                   peak_rss_mb=max(r.peak_rss_mb for r in mem),
                   step_s=sum(r.step_s for r in runs),
                   repeats=tuple(r.samples_per_s for r in runs),
                   peaks_mb=tuple(r.footprint_mb for r in mem),
                   peak_pss_mb=highest_known(r.peak_pss_mb for r in mem),
                   peak_own_mb=highest_known(r.peak_own_mb for r in mem),
                   anon_mb=highest_known(r.anon_mb for r in mem),
                   forked=all(r.forked for r in runs))


def started_anew(points: Sequence[Point]) -> list[Point]:
    """The points (or runs) whose memory is the job's: those that started the script
    anew; all of them where none did (profiles from before forked runs)."""
    return [p for p in points if not p.forked] or list(points)


def memory_points(profile: Profile) -> list[Point]:
    """The swept points whose memory is the job's (started_anew)."""
    return started_anew(profile.train_points())


def highest_known(values: Iterable[float | None]) -> float | None:
    """The highest of figures every run has; None if one lacks it."""
    known = list(values)
    return None if not known or None in known else max(v for v in known if v is not None)


@dataclass(frozen=True)
class FetchRates:
    """DS-Analyzer's fetch side: page cache (C) and storage (S) read rates on the node."""

    cache_mb_s: float
    storage_mb_s: float
    dataset_mb: float
    sample_mb: float
    files_read: int


@dataclass(frozen=True)
class PowerPoint:
    limit_w: float
    samples_per_s: float
    avg_power_w: float


@dataclass(frozen=True)
class GpuReadings:
    """NVML readings during the widest end-to-end step; `reason` says why when absent."""

    available: bool
    reason: str = ""
    name: str = ""
    count: int = 0
    util_pct: float | None = None
    mem_used_mb: float | None = None
    peak_torch_mem_mb: float | None = None
    avg_power_w: float | None = None
    energy_j: float | None = None
    power_limit_w: float | None = None
    min_limit_w: float | None = None
    max_limit_w: float | None = None
    power_sweep: tuple[PowerPoint, ...] = ()
    power_sweep_note: str = ""


@dataclass(frozen=True)
class PointError:
    cores: int
    workers: int
    measured: float
    predicted: float
    # The error the runs' own noise could make: the point's spread, and how far the
    # prediction moves with each component's (None: profiles from before it was kept).
    noise: float | None = None

    @property
    def error(self) -> float:
        """The prediction's error as a share of the measured samples/s."""
        return abs(self.predicted - self.measured) / self.measured


@dataclass(frozen=True)
class ThroughputModel:
    """speed = min(F(x), cores/(p+h), workers/p, G): see slurm_synergy/model/throughput.py.

    `basis` says what the parameters were fitted to: "components" (input-only and
    compute-only steps, so every end-to-end point is held out), "steps" (the training
    steps alone, for a script with no data loader: nothing runs apart from its step),
    "in-run" (windows of a running job) or "end-to-end" (the script could not run the
    components; errors are then leave-one-out).
    """

    basis: str
    prep_core_s: float           # p: CPU-seconds of input pipeline per sample
    host_core_s: float           # h: CPU-seconds of the training process per sample
    device_rate: float | None    # G: samples/s of the device when fed; None = it is the CPU
    footprint_mb: float          # host memory the job needs besides page cache
    fetch: FetchRates | None
    held_out: tuple[PointError, ...] = ()
    # The footprint's part the page cache cannot take back (Point.anon_mb): what the
    # dataset's pages compete with under a memory limit. None: the whole footprint.
    anon_mb: float | None = None
    # CPU-seconds per sample of input and training on one shared core: the input-only
    # step alone on it, plus the trainer's CPU time beside an input-only step on the
    # same core (measure/offline/session.py). None: not measured (the components apart count).
    shared_core_s: float | None = None

    @property
    def resident_mb(self) -> float:
        """The memory the page cache cannot have: the job's unreclaimable memory where
        measured, else its whole footprint (less room for the dataset: the safe side)."""
        return self.footprint_mb if self.anon_mb is None else self.anon_mb

    @property
    def mean_error(self) -> float | None:
        """The held-out points' mean error (a share); None where none was held out."""
        errs = [e.error for e in self.held_out]
        return sum(errs) / len(errs) if errs else None

    @property
    def max_error(self) -> float | None:
        """The held-out points' largest error (a share); None where none was held out."""
        return max((e.error for e in self.held_out), default=None)

    @property
    def mean_noise(self) -> float | None:
        """The mean error noise alone could make of the held-out points; None unknown."""
        noise = [e.noise for e in self.held_out]
        if not noise or None in noise:
            return None
        return sum(n for n in noise if n is not None) / len(noise)


@dataclass(frozen=True)
class BatchPeak:
    batch: int
    peak_mib: float


@dataclass(frozen=True)
class GpuMemory:
    """Peak GPU memory of one training step, estimated before the workload ran on a GPU
    (PyTorch's fake tensors under its memory tracker), at its batch and nearby ones."""

    method: str                  # how it was estimated; "" = it could not be
    batch: int                   # the workload's own batch size
    peaks: tuple[BatchPeak, ...] = ()
    seconds: float = 0.0         # what the estimate cost
    reason: str = ""             # why there is none, when there is none

    def at(self, batch: int) -> float | None:
        """The peak GPU memory (MiB) estimated at this batch size; None where not."""
        return next((p.peak_mib for p in self.peaks if p.batch == batch), None)


@dataclass(frozen=True)
class Allocation:
    cores: int
    mem_mb: int
    gpus: int
    node: str
    launcher: str                # "srun" (Slurm's cgroups) or "local" (CPU affinity only)
    job_id: str = ""
    procs: int = 1               # training processes (torchrun ranks), each with its loader


@dataclass(frozen=True)
class CommandFile:
    """A file the measured run's command named (its script, a module, a config, the
    Python files beside its script) and did not write, by content: a later run of the
    workload that finds another content there runs another workload."""

    path: str                    # absolute, as the run's folder resolved it
    sha256: str                  # of its content, hex


@dataclass(frozen=True)
class MemoryRaise:
    """A later job of the workload whose whole run peaked above the profile: the
    profile's footprint raised from `from_mb` to `to_mb` (MB, the tree's own memory)."""

    job_id: str
    from_mb: float
    to_mb: float
    at: str                      # when, ISO 8601 UTC


@dataclass(frozen=True)
class SlowRun:
    """A later job of the workload, right-sized to `cores`, whose run trained slower than
    its decision predicted by more than their noise: the workload's rates at `cores` and
    fewer are counted at `observed` / `predicted` of the profile's from then on."""

    job_id: str
    cores: int
    predicted: float             # samples/s (or steps/s) the decision predicted there
    observed: float              # the run's median rate over its spans
    spread: float                # of the run's spans (noise.spread_of)
    at: str                      # when, ISO 8601 UTC

    @property
    def factor(self) -> float:
        """What the workload's rates at `cores` and fewer are counted at (at most 1)."""
        return min(1.0, self.observed / self.predicted) if self.predicted > 0 else 1.0


@dataclass(frozen=True)
class Profile:
    fingerprint: str
    job_name: str
    command: tuple[str, ...]
    batch: int
    allocation: Allocation
    points: tuple[Point, ...]
    model: ThroughputModel
    gpu: GpuReadings
    started: str
    finished: str
    profiling_s: float
    profiler_version: str
    version: int = PROFILE_VERSION
    notes: tuple[str, ...] = field(default=())
    gpu_memory: GpuMemory | None = None
    # Later jobs' whole runs that peaked above the profile, oldest first: the footprint
    # is the last one's to_mb; the first one's from_mb is what the profile measured.
    raised: tuple[MemoryRaise, ...] = ()
    # Later right-sized jobs that trained slower than predicted, oldest first.
    slowed: tuple[SlowRun, ...] = ()
    # What the measured run read (in-run profiles): none, nothing to compare with.
    command_files: tuple[CommandFile, ...] = ()
    # Its rates count steps, not samples: the run's batches showed no size (a loop that
    # slices its data by hand, a batch of a type of its own). Ratios between core counts,
    # all a decision reads, are the same either way.
    per_step: bool = False

    @property
    def rate_unit(self) -> str:
        """What its rates count: "samples/s", or "steps/s" where the batch was not seen."""
        return "steps/s" if self.per_step else "samples/s"

    @property
    def measured_footprint_mb(self) -> float:
        """The footprint as the profile measured it, before later jobs raised it (MB)."""
        return self.raised[0].from_mb if self.raised else self.model.footprint_mb

    @property
    def raised_note(self) -> str:
        """Where the footprint came from, for `explain`, if later jobs raised it."""
        return (f"; {self.measured_footprint_mb:.0f} MB as profiled, raised by the whole run "
                "of job " + ", ".join(r.job_id for r in self.raised)) if self.raised else ""

    def slowdown(self, cores: int) -> float:
        """What the rate at `cores` is counted at, of the profile's, after the slower runs
        of right-sized jobs at `cores` or more (fewer cores are no faster): 1 where none."""
        return min((r.factor for r in self.slowed if r.cores >= cores), default=1.0)

    @property
    def program_note(self) -> str:
        """What its measured run read as its program, for `explain`, where it is known."""
        return ("; its program " + ", ".join(f"{f.path} ({f.sha256[:12]})"
                                             for f in self.command_files)
                + ": a run that reads another content there drops the decision"
                ) if self.command_files else ""

    def train_points(self) -> list[Point]:
        """The core sweep: end-to-end steps with all of the allocation's GPUs."""
        return sorted((p for p in self.points if p.measure == "train" and p.gpus is None),
                      key=lambda p: p.cores)

    def summary(self) -> str:
        """One line for a job's log: samples/s (or steps/s) by cores (± their runs'
        spread), the model's held-out error where it has one."""
        unit = " steps/s" if self.per_step else "/s"
        pts = ", ".join(f"{p.cores}c {p.samples_per_s:.1f}{unit}"
                        + (f" ±{p.spread:.1%}" if p.spread is not None else "")
                        for p in self.train_points())
        err = self.model.mean_error
        return f"{pts}; model error {err:.1%}" if err is not None else pts

    def to_json(self) -> str:
        """The profile as its file holds it."""
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"
