"""Applying `synergy tune`'s changes with `scontrol update`, logged so each is reversible.

Each change is one JSON line in the tune log (what the job had, what it got, who and
when), written before the update is tried and marked with its outcome after, so a crash
between the two still leaves a record. `revert` puts a job back to what the log says it
had, while it is still pending. The job's comment gains ` tuned=cN,mN` so sacct and
`synergy report` show that the job ran tuned.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

from slurm_synergy import paths
from slurm_synergy.fileio import append_private
from slurm_synergy.model import comment as comment_format
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.hooks.context import utc_now
from slurm_synergy.slurm import Slurm
from slurm_synergy.tune.plan import Resize


def log_path() -> Path:
    """The tune log: SYNERGY_TUNE_LOG, else tune.jsonl in the user's synergy home."""
    return Path(os.environ.get("SYNERGY_TUNE_LOG", paths.home_dir() / "tune.jsonl"))


def _append(log: Path, record: dict) -> None:
    append_private(log, json.dumps(record, sort_keys=True) + "\n")


def _settings(cpus: int, mem_mb: int) -> dict[str, str]:
    # CPUsPerTask is what a one-task job's cores hang on; NumCPUs and MinCPUsNode follow.
    return {"CPUsPerTask": str(cpus), "NumCPUs": str(cpus), "MinCPUsNode": str(cpus),
            "MinMemoryNode": str(mem_mb)}


def apply(slurm: Slurm, change: Resize, log: Path) -> str | None:
    """Apply one change; returns the error, or None. Slurm refuses a job that has started
    meanwhile, so a running job is never resized."""
    try:
        comment = slurm.comment(change.job_id)
    except SynergyError as e:
        return str(e)
    if "tuned" in comment_format.marks(comment):
        return "its comment says it was tuned before; --revert it first"
    record = {"at": utc_now(), "action": "tune", **asdict(change)}
    _append(log, {**record, "outcome": "trying"})
    tuned = comment_format.Marks({"tuned": f"c{change.cpus_after},m{change.mem_after_mb}"})
    try:
        slurm.mark(change.job_id, tuned, _settings(change.cpus_after, change.mem_after_mb))
    except SynergyError as e:
        _append(log, {**record, "outcome": "failed", "error": str(e)})
        return str(e)
    _append(log, {**record, "outcome": "applied"})
    return None


def in_force(log: Path) -> dict[str, dict]:
    """Per job, the tune the log says was applied and not yet put back."""
    try:
        lines = log.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise SynergyError(f"tune log {log} cannot be read: {e}") from None
    found: dict[str, dict] = {}
    for n, line in enumerate(lines, start=1):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            raise SynergyError(f"tune log {log}, line {n}: not JSON") from None
        if rec.get("outcome") != "applied":
            continue
        if rec.get("action") == "tune":
            found[rec["job_id"]] = rec
        else:                        # a revert undoes it
            found.pop(rec.get("job_id"), None)
    return found


def last_applied(log: Path, job_id: str) -> dict:
    """The job's tune the log says is in force; SynergyError where there is none."""
    if not log.exists():
        raise SynergyError(f"no tune log at {log} (SYNERGY_TUNE_LOG names another)")
    found = in_force(log).get(job_id)
    if found is None:
        raise SynergyError(f"tune log {log} has no change to put back for job {job_id}")
    return found


def revert(slurm: Slurm, job_id: str, log: Path) -> dict:
    """Put a pending job back to the size it had before it was tuned."""
    rec = last_applied(log, job_id)
    state = next((j for j in slurm.queue() if j.job_id == job_id), None)
    if state is None or state.state != "PENDING":
        raise SynergyError(f"job {job_id} is {state.state.lower() if state else 'gone'}; "
                           "only a pending job can be put back")
    comment = slurm.comment(job_id)
    if "tuned" not in comment_format.marks(comment):
        # Sized again since (a dropped decision undone, pending.undo_pending): the log's
        # "before" is no longer what it asked.
        raise SynergyError(f"job {job_id}'s comment no longer says it is tuned; its size "
                           "was set again since, and is left as it is")
    slurm.mark(job_id, comment_format.Marks(drop=("tuned",)),
               _settings(rec["cpus_before"], rec["mem_before_mb"]))
    _append(log, {"at": utc_now(), "action": "revert", "job_id": job_id,
                  "cpus_after": rec["cpus_before"], "mem_after_mb": rec["mem_before_mb"],
                  "outcome": "applied"})
    return rec
