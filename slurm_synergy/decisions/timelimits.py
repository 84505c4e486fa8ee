"""Time limits backfill can use: root's time-limit timer (`synergy plugin timelimits`), a
process of its own, apart from the decision table's sync.

Slurm's backfill starts a pending job in a gap only where its limit fits the gap, and
users ask for hours to be safe. Each round, in this order:
1. **Put back** (first, needing nothing but squeue and root's own record): a running job
   whose limit Slurm lowered to the time_min this timer set, and which is still running
   `left_s` before that limit, gets its own --time back. From Slurm 23.11 a site sets
   SchedulerParameters=time_min_as_soft_limit and Slurm never lowers the limit: there is
   then nothing to put back, and a stopped timer can kill no job (docs/time-limits.md).
2. **Set**: a pending job of a keyed workload (a job list's row, a plain script the shim
   keyed) with enough completed jobs of its user's (model/runtime.py) gets `--time-min`
   set to the prediction plus its margin, only below its own --time, which stays.

Nothing a user wrote is read as structure: limits, uids and states come from squeue's
text without any text of a user's, the comments from squeue --json and sacct --json by
job id (slurm/json_output.py). What a job asked is root's own record (its file of its
own, never a comment), taken from Slurm when the time_min was set; before root changes a
job it reads that job again by id and acts only where uid, state and limit agree with
what it decided on. Each round is bounded whatever users submit: at most SET_PER_ROUND
jobs set and USERS_PER_ROUND users' histories read, HISTORY_PER_USER ended jobs of each.
Histories are per user: a user's jobs can shorten only that user's predictions.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from slurm_synergy.decisions.table import Owned
from slurm_synergy.fileio import atomic_write_text, read_untrusted
from slurm_synergy.model import comment as comment_format
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.runtime import Finished, Prediction, TimeRule, predict, time_min_minutes
from slurm_synergy.slurm import Ended, JobText, Slurm

# What the timer calls itself (/proc/PID/comm, at most 15 characters): the local cluster
# finds it by it.
TIMER_NAME = "synergy-limits"
# Root's record of the jobs it set, in a folder of root's (the local cluster passes its
# own: --state).
DEFAULT_STATE = Path("/var/lib/slurm-synergy/time-limits.json")
STATE_BYTES = 16 << 20
# Beside the decision table, written by its sync: each decision's cores and how much
# longer a run on more cores takes at that size (slowdown), which predictions scale by.
RATES_NAME = "synergy-decided-rates.json"
RATES_BYTES = 64 << 20
# A lowered limit is put back this long before it would end the job: two rounds of a
# site's cron every minute and slurmctld's 30 s between its checks of limits.
RAISE_LEFT_S = 150.0
# The history a prediction may read: a workload's jobs of the last week.
HISTORY_SINCE = "now-7days"
# Bounds of one round, whatever users submit.
SET_PER_ROUND = 50           # pending jobs given a time_min
USERS_PER_ROUND = 20         # users whose history is read (the rest wait a round)
HISTORY_PER_USER = 200       # a user's latest ended jobs a prediction may rest on
RAISES_PER_ROUND = 200       # running jobs given their --time back, nearest limit first
MAX_TRACKED = 20000          # jobs root's record follows; past it no new time_min is set
ROUND_BUDGET_S = 45.0        # past it a round sets nothing more (the put-back pass is first)


def raise_left_s(every_s: float) -> float:
    """How long before a lowered limit a timer running every `every_s` puts it back."""
    return 2 * every_s + 30 if every_s else RAISE_LEFT_S


@dataclass
class Tracked:
    """A job whose time_min this timer set: what it asked (Slurm's record of its --time
    when the time_min was set), and the run whose lowered limit it follows."""

    uid: int
    asked_min: int
    time_min: int
    started: str = ""                 # the run seen: Slurm's start time ("" not yet)
    limit_at_start: int | None = None  # the limit Slurm gave that run
    raised: bool = False              # that run's limit was put back


@dataclass
class Record:
    """Root's file: the jobs followed, and the last user a round reached (the next round
    starts after them)."""

    jobs: dict[str, Tracked] = field(default_factory=dict)
    turn: int = -1


@dataclass
class Round:
    """What one round did, for its log line."""

    set: list[str] = field(default_factory=list)
    raised: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)      # "job (why)"
    notes: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)    # what it could not look at, and why

    def line(self) -> str:
        """One line saying what was done ("" where nothing)."""
        parts = []
        if self.raised:
            parts.append(f"limit put back to --time on job(s) {', '.join(self.raised)}")
        if self.set:
            parts.append(f"time_min set on job(s) {', '.join(self.set)}")
        if self.left:
            parts.append(f"left as they are: {', '.join(self.left)}")
        return "; ".join(parts + self.notes + self.faults)


def load_record(path: Path) -> Record:
    """Root's record; empty where there is none, or it is not root's own or unreadable
    (the jobs in it then keep the limits Slurm gave them)."""
    try:
        data = json.loads(read_untrusted(path, STATE_BYTES, owner=os.geteuid()))
        return Record({str(k): Tracked(**v) for k, v in data["jobs"].items()},
                      int(data.get("turn", -1)))
    except (OSError, SynergyError, ValueError, TypeError, KeyError, AttributeError):
        return Record()


def _save(path: Path, record: Record) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"jobs": {k: asdict(v) for k, v in record.jobs.items()},
                                        "turn": record.turn}, sort_keys=True), 0o600)


# --- what sync leaves for the timer -------------------------------------------------------

def rates_path(table: Path) -> Path:
    """Where sync leaves the decisions' rates for the timer: beside the table."""
    return table.with_name(RATES_NAME)


def slowdown(owned: Owned) -> float:
    """How much longer a job that ran on more cores than decided takes at the decided
    size, at most: the best measured rate over the decided one."""
    d = owned.decision
    if d.predicted_samples_per_s <= 0:
        return float("inf")
    return max(1.0, d.best_samples_per_s / d.predicted_samples_per_s)


def write_rates(table: Path, owned: Iterable[Owned]) -> None:
    """(uid, workload) -> decided cores and slowdown, for the timer (not shared ones: a
    run on more cores bounds a job's only through its user's own decision)."""
    rows = [[o.uid, o.decision.fingerprint, o.decision.cpus, slowdown(o)]
            for o in owned if not o.shared and slowdown(o) != float("inf")]
    atomic_write_text(rates_path(table), json.dumps(rows), 0o644)


def read_rates(path: Path) -> dict[tuple[int, str], tuple[int, float]]:
    """What write_rates left, if it is root's own and reads; empty otherwise (runs on more
    cores than a job then say nothing of it)."""
    try:
        rows = json.loads(read_untrusted(path, RATES_BYTES, owner=os.geteuid()))
        return {(int(uid), str(fp)): (int(cpus), max(1.0, float(slow)))
                for uid, fp, cpus, slow in rows}
    except (OSError, SynergyError, ValueError, TypeError):
        return {}


# --- predictions ---------------------------------------------------------------------------

def key_of(comment: str, admin_comment: str) -> str | None:
    """A job's workload key: the one the shim put in its admin comment (a plain script),
    else its comment's (a job list's row)."""
    return comment_format.fingerprint(admin_comment) or comment_format.fingerprint(comment)


def history_of(ended: Sequence[Ended]) -> dict[tuple[int, str], list[Finished]]:
    """Ended jobs by (uid, workload)."""
    out: dict[tuple[int, str], list[Finished]] = {}
    for e in ended:
        fp = key_of(e.comment, e.admin_comment)
        if fp:
            out.setdefault((e.uid, fp), []).append(
                Finished(e.job_id, e.uid, fp, e.state, e.elapsed_s, e.cpus,
                         comment_format.work(e.comment)))
    return out


def predictions(jobs: Sequence[JobText], rates: Mapping[tuple[int, str], tuple[int, float]],
                history: Mapping[tuple[int, str], list[Finished]],
                rule: TimeRule) -> dict[str, Prediction]:
    """Job id -> its predicted run at the size it asks, from its user's history of its key
    and that user's decision for it (`rates`); jobs without one are left out."""
    out = {}
    for j in jobs:
        fp = key_of(j.comment, j.admin_comment)
        if not fp:
            continue
        cpus, slow = rates.get((j.uid, fp), (0, float("inf")))
        # The decision bounds a longer run on fewer cores only at its own size.
        p = predict(history.get((j.uid, fp), ()), j.cpus, slow if cpus == j.cpus
                    else float("inf"), rule, comment_format.work(j.comment))
        if p:
            out[j.job_id] = p
    return out


def explained(slurm: Slurm, owned: Owned, rule: TimeRule) -> str:
    """`plugin explain`'s line on a workload's run time and the time_min it gets."""
    if not rule.enabled:
        return "run time: not predicted (the site policy's time_min = false)"
    fp = owned.decision.fingerprint
    history = history_of(slurm.ended(HISTORY_SINCE, [owned.uid], HISTORY_PER_USER)).get(
        (owned.uid, fp), [])
    last = max(history, key=lambda f: f.job_id, default=None)
    p = predict(history, owned.decision.cpus, slowdown(owned), rule,
                last.work if last else None)
    if p is None:
        return (f"run time: not predicted: {len(history)} ended job(s) of it in the last "
                f"week; {rule.min_jobs} completed, none out of time, needed")
    like = f" of {last.work[1]} {'iterations' if last.work[0] == 'i' else 'epochs'}" \
        if last and last.work else ""
    return (f"run time{like}: {p.basis()}: --time-min {time_min_minutes(p, 1 << 30, rule)} "
            "min on its pending jobs whose --time is longer (root's time-limit timer)")


def _opted_out(comment: str) -> bool:
    return comment_format.OPT_OUT in comment or comment_format.TIME_AS_ASKED in comment


# --- one round ---------------------------------------------------------------------------

def put_back(slurm: Slurm, record: Record, left_s: float, done: Round) -> None:
    """Give a running job followed by `record` its --time back where Slurm lowered its
    limit at its start and it still runs `left_s` before that limit. A limit changed
    since that start (an admin's, or its user's own lowering) stays."""
    if not record.jobs:
        return
    running = {j.job_id: j for j in slurm.timed_jobs(states="RUNNING")}
    due = []
    for job_id, t in record.jobs.items():
        j = running.get(job_id)
        if j is None or j.uid != t.uid:
            continue
        if j.started != t.started:          # a run not seen before (or started again)
            t.started, t.limit_at_start, t.raised = j.started, j.limit_min, False
        if (t.raised or j.limit_min is None or j.limit_min != t.limit_at_start
                or not t.time_min <= j.limit_min < t.asked_min):
            continue
        left = j.limit_min * 60 - j.used_s
        if left <= left_s:
            due.append((left, job_id, j))
    due.sort()
    for _, job_id, j in due[:RAISES_PER_ROUND]:
        t = record.jobs[job_id]
        again = slurm.timed_job(job_id)
        if (again is None or again.uid != t.uid or again.state != "RUNNING"
                or again.started != t.started or again.limit_min != j.limit_min):
            done.left.append(f"{job_id} (changed since read: not put back)")
            continue
        try:
            # The comment says so (tback=), for the job's report; the limit is root's record.
            slurm.mark(job_id, comment_format.Marks({"tback": str(t.asked_min)}),
                       {"TimeLimit": str(t.asked_min)})
        except SynergyError as e:
            done.left.append(f"{job_id} (Slurm refused its --time back: "
                             f"{str(e).splitlines()[0]}; tried again next round)")
            continue
        t.raised = True
        done.raised.append(job_id)
    if len(due) > RAISES_PER_ROUND:
        done.notes.append(f"{len(due) - RAISES_PER_ROUND} job(s) to put back next round")


def _in_turns(jobs: Sequence[JobText], record: Record) -> list[JobText]:
    """`jobs` one of each user's at a time, at most USERS_PER_ROUND users: those after the
    last user the previous round reached first (by uid, round and round), so that every
    user is reached whatever others queue."""
    by_user: dict[int, list[JobText]] = {}
    for j in jobs:
        by_user.setdefault(j.uid, []).append(j)
    uids = sorted(by_user)
    if not uids:
        return []
    at = next((i for i, u in enumerate(uids) if u > record.turn), 0)
    uids = (uids[at:] + uids[:at])[:USERS_PER_ROUND]
    record.turn = uids[-1]
    out: list[JobText] = []
    while len(out) < SET_PER_ROUND and any(by_user[u] for u in uids):
        for u in uids:
            if by_user[u] and len(out) < SET_PER_ROUND:
                out.append(by_user[u].pop(0))
    return out


def set_time_mins(slurm: Slurm, record: Record, rule: TimeRule,
                  rates: Mapping[tuple[int, str], tuple[int, float]], done: Round,
                  deadline: float, clock: Callable[[], float]) -> None:
    """time_min on pending jobs of keyed workloads that have a prediction."""
    queue = slurm.queued_texts()
    held = {j.job_id for j in queue}
    for gone in [k for k in record.jobs if k not in held]:
        del record.jobs[gone]                # ended: root's record forgets it
    if not rule.enabled or len(record.jobs) >= MAX_TRACKED:
        return
    waiting = [j for j in queue if j.state == "PENDING" and not j.array and not j.het
               and j.limit_min and j.job_id not in record.jobs
               and key_of(j.comment, j.admin_comment) and not _opted_out(j.comment)]
    picked = _in_turns(waiting, record)
    if not picked:
        return
    history = history_of(slurm.ended(HISTORY_SINCE, sorted({j.uid for j in picked}),
                                     HISTORY_PER_USER))
    found = predictions(picked, rates, history, rule)
    for j in picked:
        p = found.get(j.job_id)
        minutes = time_min_minutes(p, j.limit_min or 0, rule) if p else None
        if p is None or minutes is None:
            continue
        if clock() > deadline:
            done.notes.append("the round's time ran out: the rest next round")
            return
        again = slurm.timed_job(j.job_id)
        if (again is None or again.uid != j.uid or again.state != "PENDING"
                or again.limit_min != j.limit_min):
            done.left.append(f"{j.job_id} (changed since read: not set)")
            continue
        tmin = comment_format.Marks({"tmin": comment_format.time_text(minutes, p.seconds, p.jobs)})
        try:
            slurm.mark(j.job_id, tmin, {"TimeMin": str(minutes)})
        except SynergyError as e:
            done.left.append(f"{j.job_id} (Slurm refused: {str(e).splitlines()[0]})")
            continue
        record.jobs[j.job_id] = Tracked(j.uid, again.limit_min or 0, minutes)
        done.set.append(j.job_id)


def tick(slurm: Slurm, rule: Callable[[], TimeRule], state: Path, rates_file: Path | None,
         left_s: float = RAISE_LEFT_S, clock: Callable[[], float] = time.monotonic) -> Round:
    """One round: put back what would end within `left_s` on a lowered limit (first, on
    root's record alone), then set time_min on what is pending. `rule` reads the site
    policy: a policy that cannot be read stops only the second step."""
    deadline = clock() + ROUND_BUDGET_S
    record = load_record(state)
    before = json.dumps(asdict(record), sort_keys=True)
    done = Round()
    try:
        put_back(slurm, record, left_s, done)
    except SynergyError as e:
        done.faults.append(f"running jobs not looked at: {e}")
    try:
        set_time_mins(slurm, record, rule(), read_rates(rates_file) if rates_file else {},
                      done, deadline, clock)
    except SynergyError as e:
        done.faults.append(f"pending jobs not looked at: {e}")
    if json.dumps(asdict(record), sort_keys=True) != before:   # an idle round writes nothing
        _save(state, record)
    return done

