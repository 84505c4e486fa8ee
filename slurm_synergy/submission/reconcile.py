"""The submission ledger set against what Slurm really holds.

After a controller crash the ledger and Slurm can disagree both ways: a job Slurm
answered for may be gone (slurmctld had not saved it), and a job whose sbatch failed
may exist (it was saved, the answer was lost). Jobs are found by the tag their
sbatch call put in the comment (`sub=<tag>`), so an id Slurm reused for somebody
else's job is never taken for ours. Nothing here submits: rows Slurm does not have
are dropped from the ledger, and `synergy submit` sends them again, once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from slurm_synergy.model.comment import tag as comment_tag
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.jobs import FINAL_STATES
from slurm_synergy.submission.ledger import LedgerEntry, Ledger
from slurm_synergy.slurm import Slurm, user_name

_ACCT_FIELDS = ("JobID", "JobName", "State", "Comment")


@dataclass(frozen=True)
class Seen:
    """A row's job as Slurm shows it."""

    job_id: str       # the row's own id (array tasks as 12_3)
    state: str

    @property
    def over(self) -> bool:
        """Holds nothing any more: cancelling it again is not needed."""
        return self.state.startswith(FINAL_STATES)


@dataclass
class Reconciled:
    present: dict[str, Seen] = field(default_factory=dict)   # row key -> its job in Slurm
    lost: list[str] = field(default_factory=list)            # not in Slurm: dropped
    cancelled: list[str] = field(default_factory=list)       # of a failed submission: over now
    unreached: dict[str, str] = field(default_factory=dict)  # still to cancel -> job id

    def summary(self) -> str:
        """One line counting the rows in Slurm, lost, cancelled and still to cancel."""
        parts = [f"{len(self.present)} in Slurm"]
        if self.lost:
            parts.append(f"{len(self.lost)} not in Slurm")
        if self.cancelled:
            parts.append(f"{len(self.cancelled)} cancelled")
        if self.unreached:
            parts.append(f"{len(self.unreached)} still to cancel")
        return ", ".join(parts)


def _base(job_id: str) -> str:
    return job_id.split("_", 1)[0].split("+", 1)[0]


def find(entries: Mapping[str, LedgerEntry], queue: Sequence[Mapping[str, str]],
         acct: Sequence[Mapping[str, str]]) -> dict[str, Seen]:
    """The entries Slurm has. `queue`: squeue rows (JobID, ArrayJobID, State, JobName,
    Comment); `acct`: sacct rows (JobID, JobName, State, Comment).

    By tag first. A site that does not store comments in accounting shows finished jobs
    with none: such a job counts as the row's when its id and name are the row's. Rows
    from before tags are matched the same way.
    """
    by_tag: dict[str, list[tuple[str, str, str]]] = {}   # tag -> (base id, job id, state)
    by_id: dict[str, tuple[str, str, str]] = {}          # job id -> (name, state, comment)
    for row in queue:
        base = row["ArrayJobID"] or _base(row["JobID"])
        _index(row, base, by_tag, by_id)
    for row in acct:
        _index(row, _base(row["JobID"]), by_tag, by_id)
    found: dict[str, Seen] = {}
    for key, entry in entries.items():
        hits = by_tag.get(entry.tag, []) if entry.tag else []
        if hits:
            # A profiled job resubmits itself under the same tag: the first is the row's.
            base = min(hits, key=lambda h: int(h[0]) if h[0].isdigit() else 0)[0]
            job_id = base if entry.task < 0 else f"{base}_{entry.task}"
            state = next((s for _, j, s in hits if j == job_id),
                         next(s for b, _, s in hits if b == base))
            found[key] = Seen(job_id, state)
            continue
        known = by_id.get(entry.job_id) if entry.job_id else None
        if known and known[0] == entry.name and (not entry.tag or known[2] == ""):
            found[key] = Seen(entry.job_id, known[1])
    return found


def _index(row: Mapping[str, str], base: str, by_tag: dict, by_id: dict) -> None:
    comment = row["Comment"]
    tag = comment_tag(comment)
    if tag:
        by_tag.setdefault(tag, []).append((base, row["JobID"], row["State"]))
    by_id.setdefault(row["JobID"], (row["JobName"], row["State"], comment))


def reconcile(ledger: Ledger, keys: Iterable[str], slurm: Slurm) -> Reconciled:
    """Set the ledger's `keys` right against Slurm; the caller saves the ledger.

    Raises SlurmUnreachable (nothing changed) when slurmctld or slurmdbd does not answer:
    without both, a missing job cannot be told from a finished one.
    """
    entries = {k: ledger.entries[k] for k in keys if k in ledger.entries}
    result = Reconciled()
    if not entries:
        return result
    queue = slurm.own_jobs()
    since = time.strftime("%Y-%m-%dT%H:%M:%S",
                          time.localtime(min(e.submitted_at for e in entries.values()) - 60))
    acct = slurm.sacct([], _ACCT_FIELDS, since=since, users=[user_name()])
    found = find(entries, queue, acct)
    to_cancel = {k: found[k].job_id for k, e in entries.items()
                 if e.state == "cancelling" and k in found and not found[k].over}
    if to_cancel:
        try:
            slurm.cancel(sorted(set(to_cancel.values())))
        except SynergyError:
            result.unreached = to_cancel
    for key, entry in entries.items():
        if key in result.unreached:
            continue
        if entry.state == "cancelling":
            ledger.forget(key)
            (result.cancelled if key in found else result.lost).append(key)
        elif key in found:
            ledger.mark(key, "queued", found[key].job_id)
            result.present[key] = found[key]
        else:
            ledger.forget(key)
            result.lost.append(key)
    return result
