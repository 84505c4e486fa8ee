"""What `squeue --json` and `sacct --json` print, read into records: the one form in which
a user's text (a comment, a job name, a path) stays inside its own string whatever bytes
it holds, so it can never pass for another job's fields. No command runs here
(gateway.py runs them).

The three releases print two shapes, read alike here:
- 22.05 (openapi/v0.0.38): numbers are plain (`"time_limit": 20`, null where unset), a
  job's state a string; squeue ignores its filters and lists every job slurmctld holds,
  and sacct ignores --user: callers filter what they asked for again;
- 24.11 and 26.05 (data_parser/v0.0.42, v0.0.45): a number is
  `{"set": true, "infinite": false, "number": 20}`, a state a list of flags.
A document that is not of either shape is refused whole (SlurmError), never half read.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

from slurm_synergy.model.errors import SlurmError
from slurm_synergy.slurm.records import FREE_TEXT, JobText

# Where sacct --json keeps each of sacct's free-text fields (records.FREE_TEXT), per job
# ("comment" holds three).
_ACCOUNTED = {"Comment": ("comment", "job"), "AdminComment": ("comment", "administrator"),
              "SystemComment": ("comment", "system"), "JobName": ("name",),
              "WorkDir": ("working_directory",), "Constraints": ("constraints",),
              "SubmitLine": ("submit_line",)}


def document(text: str, command: str) -> list[Mapping[str, Any]]:
    """The "jobs" of one --json answer; SlurmError where it is not one, or Slurm said
    there were errors."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise SlurmError(f"{command} --json printed what is not JSON ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise SlurmError(f"{command} --json printed no list of jobs")
    errors = doc.get("errors") or []
    if errors:
        first = errors[0]
        what = first.get("error") or first.get("description") if isinstance(first, dict) \
            else first
        raise SlurmError(f"{command} --json reported an error: {what}")
    if not all(isinstance(j, dict) for j in doc["jobs"]):
        raise SlurmError(f"{command} --json printed a job that is not an object")
    return doc["jobs"]


def number(value: Any) -> int | None:
    """A number as either shape prints it; None where unset or infinite."""
    if isinstance(value, dict):
        if not value.get("set") or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _int(job: Mapping[str, Any], key: str) -> int:
    found = number(job.get(key))
    if found is None:
        raise SlurmError(f"--json job without {key}: {str(job.get('job_id'))[:20]!r}")
    return found


def state(value: Any) -> str:
    """A job's state: its base state, the first flag where the release prints a list."""
    if isinstance(value, list):
        value = value[0] if value else ""
    if not isinstance(value, str):
        raise SlurmError(f"--json job state is not text: {str(value)[:40]!r}")
    return value


def text(value: Any) -> str:
    """A user's text as it is; "" where unset."""
    return value if isinstance(value, str) else ""


def queued(jobs: Iterable[Mapping[str, Any]]) -> list[JobText]:
    """squeue --json's jobs with their users' texts. An array's pending tasks (one record
    until they start) and its started tasks are marked `array`, a heterogeneous job's
    components `het`."""
    out = []
    for j in jobs:
        array_job = number(j.get("array_job_id")) or 0
        task = number(j.get("array_task_id"))
        array = bool(array_job) or task is not None or bool(text(j.get("array_task_string")))
        out.append(JobText(str(_int(j, "job_id")), _int(j, "user_id"), state(j.get("job_state")),
                           array, number(j.get("time_limit")), number(j.get("cpus")) or 0,
                           text(j.get("comment")), text(j.get("admin_comment")),
                           bool(number(j.get("het_job_id")))))
    return out


def _step_ids(job: Mapping[str, Any], job_id: str) -> Iterable[tuple[str, Mapping[str, Any]]]:
    """Each step's JobIDRaw as sacct's text prints it (7.batch) and its record: 22.05
    names a step `batch` (its job apart), 24.11 and later `7.batch`."""
    for s in job.get("steps") or ():
        step = s.get("step") if isinstance(s, dict) else None
        if not isinstance(step, dict):
            continue
        sid = step.get("id")
        if isinstance(sid, str) and sid:
            yield (sid if sid.startswith(f"{job_id}.") else f"{job_id}.{sid}"), step


def accounted(jobs: Iterable[Mapping[str, Any]], fields: Iterable[str]
              ) -> dict[str, dict[str, str]]:
    """sacct --json's jobs: per JobIDRaw (and per step, 7.batch, whose JobName is the step's
    name and whose other texts are its job's), the free-text `fields` asked for."""
    fields = [f for f in fields if f in FREE_TEXT]
    out: dict[str, dict[str, str]] = {}
    for j in jobs:
        job_id = str(_int(j, "job_id"))
        row = {}
        for f in fields:
            value: Any = j
            for key in _ACCOUNTED[f]:
                value = value.get(key) if isinstance(value, dict) else None
            row[f] = text(value)
        out[job_id] = row
        for sid, step in _step_ids(j, job_id):
            out[sid] = {**row, **({"JobName": text(step.get("name"))} if "JobName" in row
                                  else {})}
    return out


def user_of(jobs: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """JobIDRaw -> the name of the user sacct --json says it ran as."""
    return {str(_int(j, "job_id")): text(j.get("user")) for j in jobs}

