"""The decision a job starts with, handed from the node prolog to its tasks.

Slurm fixes a job's environment at submission, and a decision can come later: a job
right-sized in place while it waited (decisions/pending.py) has it only in its comment.
The prolog is the first of ours to run where the job runs that is told the comment
(SLURM_JOB_COMMENT), so it writes the decision's loader workers to a file of the job's
own, and the TaskProlog (etc/task_prolog.sh.j2), which runs as the job's user before
each task, exports them: SYNERGY_WORKERS reaches the batch script, its `srun` tasks and
task mode's probe (probe/task.py) by this one route, whenever the decision was made. A
job whose comment holds no decision has no SYNERGY_WORKERS.

The comment is the user's to write too, so these values only ever size that user's own
job. The folder is root's, which users may enter but not list, and the file is the
job's user's alone (0400): no user reads another's decision or plants a file for them.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from slurm_synergy.fileio import atomic_write_text
from slurm_synergy.hooks.context import HookContext
from slurm_synergy.model import comment as comment_format

FOLDER = "tasks"              # under the hooks' run folder
# The names the file may set, each to a whole number (the TaskProlog exports no other).
WORKERS = "SYNERGY_WORKERS"
NAMES = (WORKERS,)
ENTER_ONLY = 0o711            # users may reach a file by its name, never list the folder


def folder(run_dir: Path) -> Path:
    """Where the prolog leaves each job's file (the TaskProlog is rendered with it)."""
    return run_dir / FOLDER


def path(run_dir: Path, job_id: str) -> Path:
    """The file of job `job_id`: its id alone, which is what the TaskProlog is told."""
    return folder(run_dir) / job_id


def lines(comment: str) -> str:
    """The file's text for a job with `comment`: NAME=value lines; '' where it holds no
    decision."""
    decided = comment_format.decision(comment)
    return "" if decided is None or decided.workers is None else f"{WORKERS}={decided.workers}\n"


def hand_over(ctx: HookContext) -> None:
    """Leave the job's decision where its tasks' TaskProlog reads it; remove a stale one
    (a requeued job's comment may no longer hold one). Never raises: a job whose file
    cannot be written runs with what it was submitted with."""
    target = path(ctx.run_dir, ctx.job_id)
    text = lines(ctx.comment)
    try:
        if not text or not ctx.uid:
            target.unlink(missing_ok=True)
            return
        _enterable(ctx.run_dir)
        _enterable(folder(ctx.run_dir))
        atomic_write_text(target, text, 0o400, durable=False, owner=int(ctx.uid))
        ctx.log(f"tasks get {', '.join(text.split())}")
    except OSError as e:
        ctx.log(f"the decision is not handed to the tasks ({e}); they run with what the "
                "job was submitted with")


def take_back(ctx: HookContext) -> None:
    """Remove the job's file at its end."""
    with contextlib.suppress(OSError):
        path(ctx.run_dir, ctx.job_id).unlink(missing_ok=True)


def _enterable(folder: Path) -> None:
    """`folder` made by root if missing, and opened to users to enter: a run folder made
    0700 (by an older version, or the policy's site-cap note) would hide the files."""
    folder.mkdir(mode=ENTER_ONLY, parents=True, exist_ok=True)
    st = folder.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise OSError(f"{folder} is not a folder of this account's alone")
    if st.st_mode & 0o011 != 0o011:
        os.chmod(folder, stat.S_IMODE(st.st_mode) | 0o011)
