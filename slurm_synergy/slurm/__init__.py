"""The one way slurm-synergy talks to Slurm: its own commands, parsed.

pyslurm is bound to one Slurm major.minor, so this speaks the stable command-line
interfaces (`sbatch --parsable`, `sacct --parsable2`, `scontrol`, `sinfo`) instead.
Every call honours SLURM_CONF (see paths.slurm_conf). Every Slurm command the product runs
is in this package, and only here (tests/unit/test_architecture.py): runner.py runs one,
gateway.py says which and reads what it prints into records.py's records.
"""

from slurm_synergy.slurm.gateway import Slurm, node_shape
from slurm_synergy.slurm.records import (
    FREE_TEXT, SACCT_FIELDS, SEP, Ended, JobText, LostRun, Node, NodeUse, QueuedJob,
    TimedJob, tres, user_name)

__all__ = ["FREE_TEXT", "SACCT_FIELDS", "SEP", "Ended", "JobText", "LostRun", "Node", "NodeUse",
           "QueuedJob", "Slurm", "TimedJob", "node_shape", "tres", "user_name"]
