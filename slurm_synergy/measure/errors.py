"""What stops profiling, and the exit codes the profiler and the jobs' own resubmission
(`synergy plugin resubmit`) end with: the job script (templates/sbatch.sh.j2) reads them."""

from __future__ import annotations

from slurm_synergy.model.errors import SynergyError

PROG = "offline_profiler"
USAGE_EXIT = 2          # what argparse (and the built-in trainer) exit with on bad options
BUSY_EXIT = 3           # another job holds this workload's profiling lock
MOVE_EXIT = 4           # the job's GPU would not hold the step: resubmit on another type
NOTHING_TO_GAIN_EXIT = 5    # resubmit: a new submission would get no other size


class ProfilingError(SynergyError):
    """Profiling could not finish; nothing was stored."""


class NothingToMeasure(ProfilingError):
    """The script ran without a training step the probe can see (a forward-only loop,
    training in processes it cannot follow): a run of it measures nothing again."""


class UsageError(ProfilingError):
    """The command line or the allocation cannot be profiled."""


class Busy(SynergyError):
    """Another job is profiling this workload now: this one should run as it is."""
