"""Finished and running jobs, read back from sacct: waiting for them and a plain table."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable, Sequence

from tqdm import tqdm

from slurm_synergy.columns import aligned
from slurm_synergy.model.errors import SlurmError, SlurmUnreachable, SynergyError
from slurm_synergy.model import comment as comment_format
from slurm_synergy.model.comment import marks as comment_marks
from slurm_synergy.slurm import FREE_TEXT, SACCT_FIELDS, Slurm, tres

FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL",
                "PREEMPTED", "BOOT_FAIL", "DEADLINE")


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    name: str
    state: str
    exit_code: str
    elapsed: str
    cpus: int
    mem: str
    gpus: int
    comment: str

    @property
    def final(self) -> bool:
        """Whether the job has ended, in any way (FINAL_STATES)."""
        return self.state.startswith(FINAL_STATES)


def records(slurm: Slurm, job_ids: Sequence[str], texts: bool = True) -> list[JobRecord]:
    """The jobs as sacct has them now (one per row it returns; none for a job not yet in it);
    without their names and comments where not `texts` (users' words take sacct a second
    query: slurm/accounting.py)."""
    fields = SACCT_FIELDS if texts else tuple(f for f in SACCT_FIELDS if f not in FREE_TEXT)
    out = []
    for row in slurm.sacct(job_ids, fields):
        out.append(JobRecord(
            job_id=row["JobID"], name=row.get("JobName", ""), state=row["State"],
            exit_code=row["ExitCode"], elapsed=row["Elapsed"],
            cpus=int(row["AllocCPUS"] or 0),
            mem=tres(row["AllocTRES"], "mem") or row["ReqMem"],
            gpus=int(tres(row["AllocTRES"], "gres/gpu") or 0),
            comment=row.get("Comment", "")))
    return out


def wait(slurm: Slurm, job_ids: Sequence[str], timeout_s: float = 1800,
         poll_s: float = 2.0) -> list[JobRecord]:
    """Block until accounting has every job in a final state; a progress bar meanwhile.
    Polled without the jobs' names and comments, which are read once at the end."""
    deadline = time.monotonic() + timeout_s
    wanted = len(job_ids)
    with tqdm(total=wanted, desc="jobs finished", unit="job", disable=None) as bar:
        recs = records(slurm, job_ids, texts=False)
        _known(slurm, job_ids, recs)
        while True:
            done = sum(r.final for r in recs)
            bar.update(done - bar.n)
            if len(recs) >= wanted and done == len(recs):
                return records(slurm, job_ids)
            if time.monotonic() > deadline:
                pending = ", ".join(f"{r.job_id}={r.state}" for r in recs if not r.final)
                raise SynergyError(f"jobs still not finished after {timeout_s:.0f}s: "
                                   f"{pending or 'not yet in accounting'}")
            time.sleep(poll_s)
            recs = records(slurm, job_ids, texts=False)


def unmatched(job_ids: Sequence[str], found: Iterable[str]) -> list[str]:
    """The ids of `job_ids` that none of `found` is: an array's id stands for its tasks
    (12 for 12_0, 12_1, ...), a heterogeneous job's for its components (12+0, 12+1)."""
    found = list(found)
    return [j for j in job_ids
            if not any(f == j or f.startswith((f"{j}_", f"{j}+")) for f in found)]


def unseen(slurm: Slurm, job_ids: Sequence[str],
           recs: Sequence[JobRecord]) -> tuple[list[str], list[str]]:
    """The ids of `job_ids` accounting has no record of, split in two: those slurmctld
    holds (a job just submitted or ended reaches slurmdbd a moment later) and those
    neither has. Raises SlurmUnreachable where slurmctld does not answer."""
    missing = unmatched(job_ids, (r.job_id for r in recs))
    if not missing:
        return [], []
    try:
        queued = slurm.active_states(missing)
    except SlurmUnreachable:
        raise
    except SlurmError:               # squeue refuses a list that holds no known job
        queued = {}
    unknown = unmatched(missing, queued)
    return [j for j in missing if j not in unknown], unknown


def _known(slurm: Slurm, job_ids: Sequence[str], recs: Sequence[JobRecord]) -> None:
    """Waiting on a job neither accounting nor slurmctld knows would last the whole
    timeout: it is named at once."""
    unknown = unseen(slurm, job_ids, recs)[1]
    if unknown:
        raise SynergyError(f"unknown job(s) {', '.join(unknown)}: neither slurmctld nor "
                           "accounting has them")


def plugin_note(comment: str, state: str = "") -> str:
    """What the plugin did to a job, from the marks in its comment (and its state)."""
    words = comment_marks(comment)
    notes = []
    rescued = comment_format.rescued(comment)
    if rescued is not None:
        notes.append(f"out of {rescued.ran_out_of} at the decided size after "
                     f"{rescued.lost_s} s, put back with what it asked")
    elif state.startswith("OUT_OF_MEMORY") and "decision" in words:
        notes.append("out of memory at the decided size: put back by root's timer within "
                     "a round, unless submitted with --no-requeue (then resubmit it)")
    pace = comment_format.pace(comment)
    if pace is not None:
        notes.append(f"trained at {pace}% of the rate its decision predicted: its workload's "
                     "later jobs are decided more cores")
    if words.get("measured") == "run":
        notes.append("measured while it trained")
    elif "profile" in words:
        notes.append("profiling run")
    if "decision" in words:
        notes.append(f"decision {words['decision']}")
    if "from" in words:
        notes.append(f"resubmitted by {words['from']}")
    if "by" in words:
        notes.append(f"right-sized in place by {words['by']}")
    return ", ".join(notes) or "-"


def job_table(recs: Sequence[JobRecord]) -> str:
    """The jobs as an aligned table, with what the plugin did to each."""
    head = ("JobID", "Name", "State", "Elapsed", "CPUs", "Memory", "GPUs", "Plugin")
    rows = [(r.job_id, r.name, r.state, r.elapsed, str(r.cpus), r.mem, str(r.gpus),
             plugin_note(r.comment, r.state)) for r in recs]
    return aligned(head, rows, rule=True)
