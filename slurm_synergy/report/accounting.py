"""One sacct call for a period or a list of jobs, turned into one row per job.

Memory lives only on steps (the batch script, srun steps, the extern step), so the query
keeps the steps and folds them into their job, per node, as Slurm charges it (memory.py);
the job line's TotalCPU already sums its steps.
"""

from __future__ import annotations

import functools
import re
from datetime import datetime
from typing import Any, Iterable, Iterator, Sequence

import pandas as pd

from slurm_synergy.model import comment as comment_format
from slurm_synergy.model.units import duration_s, mem_mb
from slurm_synergy.report.memory import JobMemory, StepMemory, expand_nodes, job_memory
from slurm_synergy.slurm import Slurm, tres

FIELDS = ("JobIDRaw", "JobID", "JobName", "User", "Partition", "State", "ExitCode",
          "Submit", "Start", "End", "ElapsedRaw", "AllocCPUS", "ReqCPUS", "ReqMem",
          "AllocTRES", "ReqTRES", "TotalCPU", "MaxRSS", "NodeList", "NNodes", "NTasks", "Comment",
          "TRESUsageInTot", "TRESUsageInMax", "TRESUsageInMaxNode", "ConsumedEnergyRaw",
          "TimelimitRaw")


def query(slurm: Slurm, job_ids: Sequence[str] = (), since: str | None = None,
          until: str | None = None, users: Sequence[str] = ()) -> Iterator[dict[str, str]]:
    """The report's one sacct call: its job and step lines, as sacct prints them."""
    return slurm.sacct_rows(job_ids, FIELDS, allocations_only=False, since=since,
                            until=until, users=users)


def when(text: str) -> datetime | None:
    """sacct's time as a datetime; None for Unknown or None (not started, not ended)."""
    try:
        return datetime.fromisoformat(text)
    except ValueError:           # Unknown, None: not started or not ended
        return None


def gpu_type(alloc: str) -> str:
    """The GPU type in a TRES list (gres/gpu:TYPE=N); "" where it names none."""
    m = re.search(r"(?:^|,)gres/gpu:([^=,]+)=", alloc)
    return m.group(1) if m else ""


@functools.lru_cache(maxsize=4096)     # an array's tasks, a workload's jobs share one comment
def _marks(comment: str) -> dict[str, Any]:
    marks = comment_format.marks(comment)
    out: dict[str, Any] = {"fingerprint": comment_format.fingerprint(comment) or "",
                           "from_job": marks.get("from", ""),
                           "sized_by": marks.get("by", ""),
                           "measured": marks.get("measured") == "run",
                           # Marked, and not a job that trains anyway: one measured
                           # while it trained, or a plain script's (never profiled apart).
                           "profiling": marks.get("profile") == "1"
                           and marks.get("measured") != "run" and marks.get("plain") != "1"}
    rescued = comment_format.rescued(comment)
    if rescued is not None:
        out.update(rescued_lost_s=float(rescued.lost_s), rescued_of=rescued.ran_out_of)
    pace = comment_format.pace(comment)
    if pace is not None:
        out["pace_pct"] = float(pace)
    timed = comment_format.time_min(comment)
    if timed:
        out.update(time_min_s=60.0 * timed[0], predicted_s=float(timed[1]),
                   time_back_s=60.0 * (comment_format.time_back(comment) or 0))
    d = comment_format.decision(comment)
    if d:
        out.update(decided_cpus=d.cpus, decided_mem_mb=d.mem_mb, decided_gpus=d.gpus,
                   decided_gpu_type=d.gpu_type, decided_workers=d.workers,
                   decided_power_w=d.power_w)
    a = comment_format.asked(comment)
    if a:
        out.update(asked_cpus=a.cpus, asked_mem_mb=a.mem_mb, asked_gpus=a.gpus,
                   asked_gpu_type=a.gpu_type)
    return out


COLUMNS = ("job_id", "raw_id", "array_id", "name", "user", "partition", "state", "exit_code", "submit",
           "start", "end", "wait_s", "elapsed_s", "alloc_cpus", "alloc_mem_mb", "gpus",
           "gpu_type", "total_cpu_s", "max_rss_mb", "node_mem_mb", "peak_node", "mem_estimated",
           "mem_note", "cpu_eff", "mem_eff", "slurm_energy_j", "asked_cpus",
           "asked_mem_mb", "asked_gpus", "asked_gpu_type", "decided_cpus", "decided_mem_mb",
           "decided_gpus", "decided_gpu_type", "decided_workers", "decided_power_w",
           "fingerprint", "from_job", "sized_by", "measured", "profiling", "limit_s",
           "time_min_s", "predicted_s", "time_back_s", "rescued_lost_s", "rescued_of", "pace_pct",
           "nodes",
           "one_node", "one_task", "narrow_step",
           "comment")


WORKED_CPU_S = 0.1
# A job's one-task srun step on fewer cores than the job holds, that ran this long and
# for half the job's time at least, is where its work was (`narrow_step`).
NARROW_STEP_S = 10.0


def _joules(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value > 0 else None


def _array_of(job_id: str) -> str:
    """The array an array task belongs to (`4470_3`, `4470_[4-9]` pending): "" for others."""
    m = re.match(r"^(\d+)_(?:\d+|\[.*\])$", job_id)
    return m.group(1) if m else ""


def step_memory(r: dict[str, str]) -> StepMemory:
    """A step line's memory readings."""
    total = mem_mb(tres(r.get("TRESUsageInTot", ""), "mem"))
    if total is None and (r.get("NTasks") or "1") == "1":
        total = mem_mb(r["MaxRSS"])         # one task: its peak is the step's
    largest = mem_mb(tres(r.get("TRESUsageInMax", ""), "mem"))
    return StepMemory(
        step=r["JobIDRaw"].split(".", 1)[1], nodes=expand_nodes(r["NodeList"]),
        start=when(r["Start"]), end=when(r["End"]), total_mb=total,
        largest_mb=largest if largest is not None else mem_mb(r["MaxRSS"]),
        largest_node=tres(r.get("TRESUsageInMaxNode", ""), "mem"),
        # A step that did work used memory too: a 0 is a reading that did not happen (a
        # step of seconds, ended before its first sample), and taken as a peak it would
        # advise a --mem the job cannot run in. A step of a few ms of CPU (the extern
        # step's sleeper) may well read 0, and holds next to nothing.
        unread=total == 0 and (duration_s(r["TotalCPU"]) or 0) >= WORKED_CPU_S)


def fold_sacct(slurm: Slurm, job_ids: Sequence[str] = (), since: str | None = None,
               until: str | None = None, users: Sequence[str] = ()) -> Fold:
    """The one sacct call, folded line by line while sacct is still printing."""
    return Fold(query(slurm, job_ids, since, until, users))


def jobs_frame(rows: Sequence[dict[str, str]]) -> pd.DataFrame:
    """One row per job from sacct's job and step lines."""
    return Fold(rows).frame()


class Fold:
    """sacct's job and step lines folded into one row per job, each line parsed as it
    comes. sacct prints a job's steps after it, so a job's memory is folded once the next
    job's line comes; a step that comes later anyway has its job folded again."""

    def __init__(self, rows: Iterable[dict[str, str]]) -> None:
        self._steps: dict[str, list[StepMemory]] = {}
        self._spread: set[str] = set()    # jobs with a step of several tasks or nodes
        # job -> "step:cores" of its longest one-task srun step on fewer cores than it holds
        self._narrow: dict[str, tuple[float, str]] = {}
        self._jobs: dict[str, dict[str, Any]] = {}
        self._open: set[str] = set()      # jobs whose memory is not folded yet
        for row in rows:
            self._add(row)

    @property
    def job_ids(self) -> set[str]:
        """The raw ids of the jobs among the lines (not their steps)."""
        return set(self._jobs)

    def _add(self, r: dict[str, str]) -> None:
        raw = r["JobIDRaw"]
        if "." in raw:
            job = raw.split(".", 1)[0]
            self._steps.setdefault(job, []).append(step_memory(r))
            if (r.get("NTasks") or "1") != "1" or (r.get("NNodes") or "1") != "1":
                self._spread.add(job)
            elif job in self._jobs:
                self._narrower(self._jobs[job], r)
            if job in self._jobs:
                self._open.add(job)
            return
        for job in self._open:
            self._fold_memory(self._jobs[job])
        self._jobs[raw] = _job_record(r)
        self._open = {raw}

    def _narrower(self, rec: dict[str, Any], r: dict[str, str]) -> None:
        """Note a one-task srun step (not the batch script's) that held fewer cores than
        its job and did its work: srun without -c (or SRUN_CPUS_PER_TASK) in a job of
        several cores a task runs there on fewer of them."""
        step = r["JobIDRaw"].split(".", 1)[1]
        cpus, ran = r["AllocCPUS"], float(r["ElapsedRaw"] or 0)
        if not (step.isdigit() and cpus.isdigit() and 0 < int(cpus) < (rec["alloc_cpus"] or 0)
                and ran >= max(NARROW_STEP_S, 0.5 * rec["elapsed_s"])):
            return
        if ran > self._narrow.get(rec["raw_id"], (0.0, ""))[0]:
            self._narrow[rec["raw_id"]] = (ran, f"{step}:{cpus}")

    def _fold_memory(self, rec: dict[str, Any]) -> None:
        raw = rec["raw_id"]
        memory = job_memory(self._steps.get(raw, []), rec["node_mem_mb"]) \
            if rec["start"] else JobMemory(None, "never ran")
        worst = memory.worst
        rec.update(max_rss_mb=worst.peak_mb if worst else None,
                   peak_node=worst.node if worst else "",
                   mem_estimated=bool(worst and worst.estimated),
                   mem_note=memory.why_unknown,
                   # the worst node's peak over what the job may hold there
                   mem_eff=worst.efficiency if worst else None,
                   one_task=raw not in self._spread and rec["one_node"],
                   narrow_step=self._narrow.get(raw, (0.0, ""))[1])

    def frame(self) -> pd.DataFrame:
        """One row per job, the last job's steps folded in first (columns COLUMNS)."""
        for job in self._open:
            self._fold_memory(self._jobs[job])
        self._open = set()
        # object columns: integers stay integers and a missing value stays None, not NaN.
        return pd.DataFrame(list(self._jobs.values()), columns=list(COLUMNS), dtype=object)


def _job_record(r: dict[str, str]) -> dict[str, Any]:
    """A job line's columns, all but those of its memory (Fold._fold_memory's, from its
    steps)."""
    raw = r["JobIDRaw"]
    submit, start, end = when(r["Submit"]), when(r["Start"]), when(r["End"])
    elapsed = float(r["ElapsedRaw"] or 0)
    cpus = int(r["AllocCPUS"] or 0)
    if not r["AllocTRES"]:
        # Never allocated (cancelled while pending): sacct still gives it a Start (the
        # moment it ended) and AllocCPUS, but it held nothing.
        start, cpus = None, 0
    mem = mem_mb(tres(r["AllocTRES"], "mem"))
    total_cpu = duration_s(r["TotalCPU"])
    nnodes = int(r["NNodes"]) if (r.get("NNodes") or "").isdigit() else 1
    rec: dict[str, Any] = {
        **_BLANK,
        "job_id": r["JobID"], "raw_id": raw, "array_id": _array_of(r["JobID"]),
        "name": r["JobName"], "user": r["User"],
        "partition": r["Partition"], "state": r["State"].split()[0] if r["State"] else "",
        "exit_code": r["ExitCode"], "submit": submit, "start": start, "end": end,
        "wait_s": (start - submit).total_seconds() if start and submit else None,
        "elapsed_s": elapsed, "alloc_cpus": cpus, "alloc_mem_mb": mem,
        "gpus": int(tres(r["AllocTRES"], "gres/gpu") or 0),
        "gpu_type": gpu_type(r["AllocTRES"]), "total_cpu_s": total_cpu,
        # AllocTRES's mem is the job's whole; --mem is per node, --mem-per-cpu per core:
        # an even share of the whole is each node's (exact for --mem).
        "node_mem_mb": mem / max(nnodes, 1) if mem else None,
        # CPU time over cores x wall time (reportseff's)
        "cpu_eff": total_cpu / (cpus * elapsed) if total_cpu is not None and cpus
        and elapsed > 0 else None,
        # Slurm's own energy plugin (acct_gather_energy), where a site has one: 0 and
        # empty both mean no reading.
        "slurm_energy_j": _joules(r.get("ConsumedEnergyRaw", "")),
        "one_node": nnodes == 1,
        "asked_cpus": int(r["ReqCPUS"]) if r["ReqCPUS"].isdigit() else None,
        "asked_mem_mb": mem_mb(r["ReqMem"]) if r["ReqMem"] else None,
        "asked_gpus": int(tres(r.get("ReqTRES", ""), "gres/gpu") or 0),
        "asked_gpu_type": gpu_type(r.get("ReqTRES", "")),
        "nodes": r["NodeList"], "comment": r["Comment"],
        # --time as the job ended with it (a limit the timer put back is the asked one)
        "limit_s": 60.0 * int(r["TimelimitRaw"]) if r.get("TimelimitRaw", "").isdigit()
        else None,
    }
    rec.update(_marks(r["Comment"]))
    return rec


_BLANK: dict[str, Any] = dict.fromkeys(COLUMNS)


def row_dicts(jobs: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows as plain dicts, for code that reads a job at a time (pandas' own to_dict
    boxes every value, ten times slower on a report's thousands of rows)."""
    columns = [str(c) for c in jobs.columns]
    return [dict(zip(columns, values)) for values in zip(*(jobs[c].tolist() for c in columns))]
