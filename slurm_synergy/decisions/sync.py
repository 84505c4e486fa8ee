"""The decision table compiled from what users wrote: every user's profiles in a site's
shared store (or the caller's own), through the decision service, into table.py's format.

Compiling reads files any user may have written, as root, for every user; so nothing a
user writes can stop it, slow it past its bounds or crowd anyone else out:
- every folder and file name, every byte and value is checked on its own, and whatever
  cannot be used is left out with one line naming it (control characters escaped);
  nothing a user wrote makes sync raise;
- users are read in turns (round-robin: everyone's first profile, then everyone's
  second, ...), each within caps of their own: MAX_PER_USER profiles, USER_BYTES read
  and USER_BUDGET_S of deciding, so one user's flood or heavy profiles delay no one
  else's beyond a turn;
- the whole sync stops at SYNC_BUDGET_S, naming what it did not reach; the table is then
  cut to the shim's limits, the users with the most entries first (table.fit).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from slurm_synergy.decisions.limits import Cap
from slurm_synergy.decisions.rescue import ledger_path, rescued_workloads
from slurm_synergy.decisions.service import DecisionRequest, DecisionService, Refusal
from slurm_synergy.decisions.rounds import keep_running, last_round_path
from slurm_synergy.decisions.timelimits import write_rates
from slurm_synergy.decisions.table import (MAX_PER_USER, Held, Owned, fit, owned_by_other,
                                           render, table_path, uids_of, write)
from slurm_synergy.fileio import locked, shown
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.profiles import (MAX_NAMES_LISTED, MAX_PROFILE_BYTES, ProfileStore,
                                    site_store_root, stores_to_compile)
from slurm_synergy.slurm import Slurm, user_name
from slurm_synergy.site import Site

SYNC_BUDGET_S = 120.0
# What a timer's sync calls itself (/proc/PID/comm, at most 15 characters): the local
# cluster finds its timer by it.
TIMER_NAME = "synergy-sync"
# How often the local cluster's timer syncs: a measured workload's next submission is
# right-sized within this long of its measuring job's end (a site's cron: a minute).
TIMER_EVERY_S = 15.0
USER_BUDGET_S = 15.0         # one user's share of deciding, whatever their profiles weigh
USER_BYTES = 64 << 20        # one user's profiles read in one sync (a profile is a few kB)
SHOWN_SKIPPED = 20           # a flood of bad files is counted, not listed


@dataclass
class _Turns:
    """One user's profiles still to read, and what they have cost so far."""

    store: ProfileStore
    fps: list[str]
    at: int = 0
    bytes_read: int = 0
    spent_s: float = 0.0
    done: bool = False


@dataclass
class Compiled:
    owned: list[Owned] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    # Workloads whose marked run measured nothing (profiles.py's holds), where no
    # decision of that user's is in `owned`.
    held: list[Held] = field(default_factory=list)


def _held(store: ProfileStore, skipped: list[str]) -> list[Held]:
    """A user's holds, from their names and times alone, up to MAX_PER_USER."""
    try:
        fps = store.held(MAX_NAMES_LISTED)
    except OSError as e:
        skipped.append(f"{shown(store.root)}: holds not read: {e.strerror}")
        return []
    return [Held(store.owner, fp) for fp in fps[:MAX_PER_USER]]


def _listed(store: ProfileStore, skipped: list[str]) -> list[str]:
    try:
        fps, more = store.listed(MAX_NAMES_LISTED)
    except OSError as e:
        skipped.append(f"{shown(store.root)}: not read: {e.strerror}")
        return []
    if more:
        skipped.append(f"{shown(store.root)}: more than {MAX_NAMES_LISTED} names; the rest "
                       "not looked at")
    if len(fps) > MAX_PER_USER:
        skipped.append(f"{shown(store.root)}: {len(fps) - MAX_PER_USER} profile(s) past the "
                       f"cap ({MAX_PER_USER} a user) left out")
        fps = fps[:MAX_PER_USER]
    return fps


def compile_decisions(stores: Sequence[ProfileStore], service: DecisionService,
                      partition: str = "", budget_s: float = SYNC_BUDGET_S,
                      user_budget_s: float = USER_BUDGET_S, user_bytes: int = USER_BYTES,
                      clock: Callable[[], float] = time.monotonic) -> Compiled:
    """A decision per usable profile, for the uid whose store holds it, users taken in
    turns; whatever is left out is named in `skipped`. Never raises on what users wrote."""
    out = Compiled()
    deadline = clock() + budget_s
    turns = [_Turns(s, _listed(s, out.skipped)) for s in stores]
    waiting = [t for t in turns if t.fps]
    while waiting and clock() <= deadline:
        for t in waiting:       # one turn each: a profile of every user who has one left
            if clock() > deadline:
                break
            _one(t, service, partition, user_budget_s, user_bytes, clock, out)
        waiting = [t for t in turns if not t.done and t.at < len(t.fps)]
    for t in turns:
        left = len(t.fps) - t.at
        if left and not t.done:
            out.skipped.append(f"{shown(t.store.root)}: {left} profile(s) not reached within "
                               f"the sync's {budget_s:.0f} s")
    out.owned = service.share(out.owned, out.skipped)
    decided = {(o.uid, o.fingerprint) for o in out.owned}
    out.held = [h for s in stores for h in _held(s, out.skipped)
                if (h.uid, h.fingerprint) not in decided]
    return out


def _one(t: _Turns, service: DecisionService, partition: str, user_budget_s: float,
         user_bytes: int, clock: Callable[[], float], out: Compiled) -> None:
    """The next profile of one user's turns, decided or named."""
    fp = t.fps[t.at]
    t.at += 1
    started = clock()
    try:
        # What reading it takes: a file past the cap is refused by its size, unread.
        size = t.store.path(fp).lstat().st_size
        t.bytes_read += size if size <= MAX_PROFILE_BYTES else 0
        if t.bytes_read > user_bytes:
            t.done = True
            out.skipped.append(f"{shown(t.store.root)}: {len(t.fps) - t.at + 1} profile(s) "
                               f"past the {user_bytes >> 20} MiB a user's profiles may take "
                               "in one sync left out")
            return
        answer = service.judge(DecisionRequest(t.store.owner, fp, partition),
                               t.store.load(fp))
    except Exception as e:      # noqa: BLE001 - what one user wrote is that profile's fault
        kind = "" if isinstance(e, SynergyError) else f"{type(e).__name__}: "
        out.skipped.append(f"{fp} (uid {t.store.owner}): {kind}{e}")
        answer = None
    finally:
        t.spent_s += clock() - started
    if isinstance(answer, Refusal):
        out.skipped.append(f"{fp} (uid {t.store.owner}): {answer.why}")
    elif answer is not None:
        out.owned.append(Owned(t.store.owner, answer))
    if t.spent_s > user_budget_s and t.at < len(t.fps):
        t.done = True
        out.skipped.append(f"{shown(t.store.root)}: {len(t.fps) - t.at} profile(s) past the "
                           f"{user_budget_s:.0f} s a user's profiles may take in one sync "
                           "left out")


def _unmeasured_since_rescue(owned: list[Owned], stores: Sequence[ProfileStore],
                             table: Path) -> tuple[list[Owned], list[str]]:
    """`owned` less the decisions of workloads a job of which ran out of memory or GPU
    memory at the decided size and was put back (decisions/rescue.py), where no profile was
    written since: their jobs ask as they did and the next is measured. And a line for each."""
    rescued = rescued_workloads(ledger_path(table))
    if not rescued:
        return owned, []
    by_owner = {s.owner: s for s in stores}
    kept, notes = [], []
    for o in owned:
        at, job, ran_out_of = rescued.get((o.uid, o.fingerprint), (0.0, "", ""))
        store = by_owner.get(o.uid)
        try:
            # ctime: a time nobody sets back (a profile touched into the future is not newer).
            newer = store is not None and store.path(o.fingerprint).lstat().st_ctime > at
        except OSError:
            newer = False
        if at and not newer:
            notes.append(f"{o.fingerprint} (uid {o.uid}): as asked until a run measures it "
                         f"again: its job {job} ran out of {ran_out_of} at the decided size")
        else:
            kept.append(o)
    return kept, notes


def sync(stores: Sequence[ProfileStore] | None = None, slurm: Slurm | None = None,
         path: Path | None = None, partition: str | None = None,
         service: DecisionService | None = None, site: Site | None = None) -> str:
    """Compile the table from the profile stores (every user's folder of the site's store,
    else the caller's own); returns a line saying what was written and what was left
    out. SynergyError only for what is the site's (its policy, Slurm, the table's file).
    Beside the table, the decisions' rates for the time-limit timer
    (decisions/timelimits.py, a process of its own). `site`: the caller's, read once where
    it started (else read here)."""
    skipped: list[str] = []
    if stores is None:
        stores, skipped = stores_to_compile()
    service = service or DecisionService.for_site(site or Site.load(slurm))
    path = path or table_path()
    owned_by_other(path)
    partition = partition or service.slurm.default_partition()
    shape = service.shape(partition)
    qos: dict[str, Cap] | None
    try:
        limits = service.limits()
        qos = limits.qos_caps() if limits.enforced else None
    except SynergyError as e:
        # Every decision is refused for it too (DecisionService.beyond_limits).
        skipped.append(str(e))
        qos = {}
    # One sync at a time: two profiles finishing together must not let the older
    # store's table land last.
    with locked(path.with_name(f".{path.name}.lock")):
        done = compile_decisions(stores, service, partition)
        done.owned, unmeasured = _unmeasured_since_rescue(done.owned, stores, path)
        kept, cut = fit([*done.owned, *done.held])
        write(path, render(kept, service.policy, shape, partition, qos))
        decisions = [o for o in kept if isinstance(o, Owned)]
        write_rates(path, decisions)
    skipped += done.skipped
    skipped += [f"uid {uid} ({user_name(uid)}): {n} entr{'y' if n == 1 else 'ies'} cut: the "
                "table was past the shim's limits, and this user had the most"
                for uid, n in sorted(cut.items())]
    skipped += [f"skip_users {name!r}: no such user on this host, so no job is skipped for "
                "that name" for name in service.policy.skip_users if not uids_of([name])]
    shared = site_store_root()
    if shared is not None and all(s.root.parent == shared for s in stores):
        where = f"{len(stores)} user folder(s) of the shared store {shared}"
    else:
        where = str(stores[0].root) if len(stores) == 1 else f"{len(stores)} stores"
    line = f"decision table {path}: {len(decisions)} decision(s) from {where}"
    if len(kept) > len(decisions):
        line += (f", {len(kept) - len(decisions)} workload(s) held: their marked run "
                 "measured nothing")
    if unmeasured:
        line += (f"; {len(unmeasured)} workload(s) as asked until measured again:\n  "
                 + "\n  ".join(shown(u, 400) for u in unmeasured[:SHOWN_SKIPPED]))
    if skipped:
        shown_lines = [shown(s, 400) for s in skipped[:SHOWN_SKIPPED]]
        if len(skipped) > SHOWN_SKIPPED:
            shown_lines.append(f"... and {len(skipped) - SHOWN_SKIPPED} more")
        line += f"; {len(skipped)} left out:\n  " + "\n  ".join(shown_lines)
    return line


def keep_syncing(every_s: float, path: Path | None = None, partition: str | None = None,
                 log: Callable[[str], None] = print) -> None:
    """sync every `every_s` seconds, for ever (a site's cron as one process: the local
    cluster's sync timer)."""
    keep_running(lambda: (sync(path=path, partition=partition), True), every_s, log,
                 last_round_path(path or table_path(), TIMER_NAME))
