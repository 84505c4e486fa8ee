"""Time limits backfill can use: root's sync timer, each round after the table.

Slurm's backfill starts a pending job in a gap only where its limit fits the gap, and
users ask for hours to be safe. Each round:
- a pending job of a keyed workload (a job list's row, a plain script the shim keyed)
  with enough completed jobs (sacct's own elapsed times, scaled to its size by its
  decision where it has one: model/runtime.py) gets `--time-min` set to the prediction
  plus its margin, only below its own --time, which stays; its comment says so (tmin=);
- a running job whose limit Slurm lowered towards that time_min, and which is still
  running `raise_left_s` before that limit, gets its limit put back to its own --time: a
  wrong prediction costs the jobs behind it some wait, never the job its work.

What each job asked is kept in root's own file beside the table (STATE_NAME), never read
back from a comment: a user may write anything into theirs. A job opted out
(synergy:off, synergy:time-as-asked), an array's pending tasks and a job without a
--time of its own are left alone. Histories are per user: a user's
jobs can shorten only that user's predictions.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from slurm_synergy.decisions.table import Owned
from slurm_synergy.fileio import atomic_write_text, read_untrusted
from slurm_synergy.model import comment as comment_format
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.runtime import Finished, Prediction, TimeRule, predict, time_min_minutes
from slurm_synergy.slurm import Ended, Slurm, TimedJob

STATE_NAME = "synergy-time-limits.json"
STATE_BYTES = 16 << 20
# A lowered limit is put back this long before it would end the job: two rounds of the
# sync (a site's cron every minute) and slurmctld's 30 s between its checks of limits.
RAISE_LEFT_S = 150.0


def raise_left_s(every_s: float) -> float:
    """How long before a lowered limit a timer syncing every `every_s` puts it back."""
    return 2 * every_s + 30
# The history a prediction may read: a workload's jobs of the last week.
HISTORY_SINCE = "now-7days"


@dataclass
class Lowered:
    """A job whose time_min this timer set: what it asked, and whether it was raised."""

    uid: int
    asked_min: int
    time_min: int
    raised: bool = False


def state_path(table: Path) -> Path:
    """Root's record of the jobs it set (STATE_NAME), beside the decision table."""
    return table.with_name(STATE_NAME)


def load_state(path: Path) -> dict[str, Lowered]:
    """Root's record of the jobs it set; empty where there is none or it is unreadable
    (the jobs in it then keep the limits Slurm gave them)."""
    try:
        data = json.loads(read_untrusted(path, STATE_BYTES, owner=os.geteuid()))
        return {str(k): Lowered(**v) for k, v in data.items()}
    except (OSError, SynergyError, ValueError, TypeError):
        return {}


def _save(path: Path, state: dict[str, Lowered]) -> None:
    atomic_write_text(path, json.dumps({k: asdict(v) for k, v in state.items()},
                                       sort_keys=True), 0o600)


def history_of(ended: Sequence[Ended]) -> dict[tuple[int, str], list[Finished]]:
    """Ended jobs by (uid, workload): a plain script's key from the admin comment the
    shim wrote, else the comment's fingerprint."""
    out: dict[tuple[int, str], list[Finished]] = {}
    for e in ended:
        fp = (comment_format.fingerprint(e.admin_comment)
              or comment_format.fingerprint(e.comment))
        if fp:
            out.setdefault((e.uid, fp), []).append(
                Finished(e.job_id, e.uid, fp, e.state, e.elapsed_s, e.cpus,
                         comment_format.work(e.comment)))
    return out


def slowdown(owned: Owned) -> float:
    """How much longer a job that ran on more cores than decided takes at the decided
    size, at most: the best measured rate over the decided one."""
    d = owned.decision
    if d.predicted_samples_per_s <= 0:
        return float("inf")
    return max(1.0, d.best_samples_per_s / d.predicted_samples_per_s)


def explained(slurm: Slurm, owned: Owned, rule: TimeRule, user: str) -> str:
    """`plugin explain`'s line on a workload's run time and the time_min it gets."""
    if not rule.enabled:
        return "run time: not predicted (the site policy's time_min = false)"
    fp = owned.decision.fingerprint
    mine = history_of([e for e in slurm.ended(HISTORY_SINCE, [user]) if e.uid == owned.uid])
    history = mine.get((owned.uid, fp), [])
    last = max(history, key=lambda f: f.job_id, default=None)
    p = predict(history, owned.decision.cpus, slowdown(owned), rule,
                last.work if last else None)
    if p is None:
        return (f"run time: not predicted: {len(history)} ended job(s) of it in the last "
                f"week; {rule.min_jobs} completed, none out of time, needed")
    like = f" of {last.work[1]} {'iterations' if last.work[0] == 'i' else 'epochs'}" \
        if last and last.work else ""
    return (f"run time{like}: {p.basis()}: --time-min {time_min_minutes(p, 1 << 30, rule)} "
            "min on its pending jobs whose --time is longer (root's sync timer)")


def predictions(jobs: Sequence[TimedJob], owned: Sequence[Owned],
                history: dict[tuple[int, str], list[Finished]],
                rule: TimeRule) -> dict[TimedJob, Prediction]:
    """Each keyed job's predicted run at the size it asks, from its user's history of its
    key (history_of) and that user's decision for it; jobs without one are left out."""
    decided = {(o.uid, o.decision.fingerprint): o for o in owned if not o.shared}
    out = {}
    for j in jobs:
        fp = comment_format.fingerprint(j.comment)
        if not fp:
            continue
        o = decided.get((j.uid, fp))
        # The decision bounds a longer run on fewer cores only at its own size.
        bound = slowdown(o) if o and o.decision.cpus == j.cpus else float("inf")
        p = predict(history.get((j.uid, fp), ()), j.cpus, bound, rule,
                    comment_format.work(j.comment))
        if p:
            out[j] = p
    return out


def _opted_out(comment: str) -> bool:
    return comment_format.OPT_OUT in comment or comment_format.TIME_AS_ASKED in comment


def tick(slurm: Slurm, owned: Sequence[Owned], rule: TimeRule, table: Path,
         left_s: float = RAISE_LEFT_S) -> str:
    """One round: raise what would end within `left_s` on a lowered limit, set time_min
    on what is pending; returns a line saying what was done ("" where nothing)."""
    path = state_path(table)
    jobs = slurm.timed_jobs()
    queued = {j.job_id for j in jobs}
    loaded = load_state(path)
    state = {k: Lowered(**asdict(v)) for k, v in loaded.items() if k in queued}
    raised = [j.job_id for j in jobs if _raise(slurm, j, state.get(j.job_id), left_s)]
    set_: list[str] = []
    refused: list[str] = []
    if rule.enabled:
        waiting = [j for j in jobs if j.state == "PENDING" and j.job_id not in state
                   and j.limit_min and comment_format.fingerprint(j.comment)]
        if waiting:
            # Only the users waiting: a week of every user's jobs each round would load
            # slurmdbd in proportion to the site, not to what is pending.
            history = history_of(slurm.ended(HISTORY_SINCE,
                                             sorted({str(j.uid) for j in waiting})))
            for j, p in predictions(waiting, owned, history, rule).items():
                why = _set(slurm, j, p, rule, state)
                if why == "":
                    set_.append(j.job_id)
                elif why:
                    refused.append(f"{j.job_id} ({why})")
    if state != loaded:         # a round that changed nothing writes nothing
        _save(path, state)
    parts = []
    if set_:
        parts.append(f"time_min set on job(s) {', '.join(set_)}")
    if raised:
        parts.append(f"limit put back to --time on job(s) {', '.join(raised)}")
    if refused:
        parts.append(f"time_min not set on {', '.join(refused)}")
    return "; ".join(parts)


def _set(slurm: Slurm, job: TimedJob, p: Prediction, rule: TimeRule,
         state: dict[str, Lowered]) -> str | None:
    """time_min on one pending job: "" when set, why not when Slurm refused, None where
    nothing is to be set (opted out, or the prediction is not under its --time)."""
    minutes = time_min_minutes(p, job.limit_min or 0, rule)
    if minutes is None:
        return None
    if _opted_out(slurm.comment(job.job_id)):      # whole: the opt-out may be anywhere
        return None
    tmin = comment_format.Marks({"tmin": comment_format.time_text(minutes, p.seconds, p.jobs)})
    try:
        slurm.mark(job.job_id, tmin, {"TimeMin": str(minutes)})
    except SynergyError as e:
        return f"Slurm refused: {str(e).splitlines()[0]}"
    state[job.job_id] = Lowered(job.uid, job.limit_min or 0, minutes)
    return ""


def _raise(slurm: Slurm, job: TimedJob, lowered: Lowered | None, left_s: float) -> bool:
    """Put a running job's lowered limit back to its --time where it is still running
    `left_s` before that limit. A limit under the time_min set is its user's own
    lowering, and stays."""
    if (lowered is None or lowered.raised or job.state != "RUNNING"
            or job.limit_min is None or job.uid != lowered.uid
            or not lowered.time_min <= job.limit_min < lowered.asked_min
            or job.limit_min * 60 - job.used_s > left_s):
        return False
    try:
        # The comment says so (tback=), for the job's report; the limit is from root's
        # record alone.
        slurm.mark(job.job_id, comment_format.Marks({"tback": str(lowered.asked_min)}),
                   {"TimeLimit": str(lowered.asked_min)})
    except SynergyError:
        return False            # tried again next round, while it runs
    lowered.raised = True
    return True
