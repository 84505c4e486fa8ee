"""What Slurm's commands print, as records: nodes, queued and ended jobs, and the small
readers of Slurm's own text (TRES lists, memory, unset fields) that every query shares.
No command runs here (gateway.py runs them)."""

from __future__ import annotations

import functools
import os
import pwd
from dataclasses import dataclass

from slurm_synergy.model.units import mem_mb

SEP = "\x1f"
# sacct's fields that hold what users wrote (sbatch options, a script's directives).
FREE_TEXT = ("Comment", "AdminComment", "SystemComment", "JobName", "WorkDir", "SubmitLine",
             "Constraints")

# sacct fields of the jobs table; order is the column order.
SACCT_FIELDS = (
    "JobID", "JobName", "State", "ExitCode", "Elapsed", "AllocCPUS", "ReqMem",
    "AllocTRES", "Comment", "Submit", "Start", "End",
)


def user_name(uid: int | None = None) -> str:
    """The name Slurm knows `uid` (the caller) by, from the system's user database: never
    $USER or $LOGNAME, which whoever starts a process sets as they like."""
    uid = os.geteuid() if uid is None else uid
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)         # Slurm's commands take a uid where a name is asked


def tres(alloc: str, key: str) -> str:
    """One value of a TRES list as sacct writes it (cpu=2,mem=3G,gres/gpu=1): "" if absent."""
    return _tres_items(alloc).get(key, "")


@functools.lru_cache(maxsize=4096)
def _tres_items(text: str) -> dict[str, str]:
    # A report reads thousands of lines that share a few TRES lists: each is split once.
    return dict(item.split("=", 1) for item in text.split(",") if "=" in item)


@dataclass(frozen=True)
class Node:
    name: str
    state: str
    cpus: int
    mem_mb: int
    gres: str
    reason: str = ""      # why it is down or drained, as the admin or Slurm wrote it


@dataclass(frozen=True)
class NodeUse:
    """What a node has and what running jobs hold of it now."""

    name: str
    state: str
    cpus: int
    cpus_alloc: int
    mem_mb: int
    mem_alloc_mb: int
    gpus: int
    gpus_alloc: int


@dataclass(frozen=True)
class QueuedJob:
    """A job slurmctld still holds (pending or running), as squeue shows it."""

    job_id: str
    user: str
    state: str
    reason: str
    cpus_per_task: int
    tasks: int
    mem_mb: int           # per node, or per CPU: squeue does not say which
    gpus: int             # per node
    nodes: int
    partition: str        # one, or several comma-separated
    gres: str             # as asked, e.g. gres:gpu:a100:1
    features: str         # --constraint, "" if none
    array: bool           # a task (or pending tasks) of a job array
    qos: str = ""         # the QOS Slurm gave it (its own --qos, else its default)


@dataclass(frozen=True)
class TimedJob:
    """A pending or running job's time limits, as squeue shows them without any text of
    its user's: what root reads before it changes a job's limits."""

    job_id: str
    uid: int
    state: str
    limit_min: int | None     # its time limit, minutes; None where unset or unlimited
    time_min_min: int         # its --time-min, minutes (0: none)
    used_s: int
    cpus: int                 # the cores it asks for (or has), all tasks
    started: str              # when its current run started, as Slurm prints it; "" pending
    restarts: int             # times it was requeued


@dataclass(frozen=True)
class LostRun:
    """A job whose run was lost: it ran out of memory (its batch script or one of its
    steps) or failed, as sacct shows it without any text of its user's."""

    job_id: str
    uid: int
    state: str                # the job's own state (OUT_OF_MEMORY, FAILED, COMPLETED)
    elapsed_s: int            # the run it lost
    out_of_memory: bool       # it, or one of its steps, ended OUT_OF_MEMORY


@dataclass(frozen=True)
class JobText:
    """A job slurmctld holds with the texts of its user's (comment) and of its admins
    (admin comment), from squeue --json: each text inside its own string."""

    job_id: str
    uid: int
    state: str
    array: bool               # an array's task, or its pending tasks
    limit_min: int | None     # its time limit, minutes; None where unset or unlimited
    cpus: int
    comment: str
    admin_comment: str
    het: bool = False         # a heterogeneous job's component


@dataclass(frozen=True)
class Ended:
    """A job that ended, as sacct shows it."""

    job_id: int
    uid: int
    state: str                # the first word (CANCELLED by 1000 -> CANCELLED)
    elapsed_s: int
    cpus: int
    comment: str
    admin_comment: str


def mb(text: str) -> int:
    """squeue's and sinfo's memory (1000M, 2G, 0) in MB; 0 when unset."""
    return int(mem_mb(text) or 0)


def comment_text(text: str) -> str:
    """squeue writes an empty comment as (null)."""
    return "" if text == "(null)" else text


def unset(text: str) -> str:
    """squeue's fields that Slurm fills in print N/A or (null) when unset."""
    return "" if text in ("N/A", "(null)") else text
