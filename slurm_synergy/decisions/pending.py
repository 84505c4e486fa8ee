"""A workload's queued jobs right-sized in place, as soon as its decision exists.

Slurm cannot shrink a running job, but the owner of a pending job may change its cores,
memory and GPUs (`scontrol update`): the job keeps its id, its priority age and its
dependencies, so nobody waits in the queue twice. Only jobs marked for measuring
(profile=1: submitted before the workload had a decision) are updated, and again those
the same run updated before when its profile changes (a later memory peak); their
comments then carry asked= and decision= as the shim writes them, and by=<job>, the job
whose run decided them. A job that started meanwhile, or that Slurm refuses to change,
is left as it is, with one log line. Where a later run drops the decision (its program
changed), the jobs it right-sized ask again for what they were submitted with
(undo_pending).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Iterator

from slurm_synergy.model import comment as comment_format
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.rightsize import Asked, LeftAsAsked, Rightsized, rightsize
from slurm_synergy.model.units import gpu_types, gres_text
from slurm_synergy.model.profile import Profile
from slurm_synergy.decisions.service import DecisionRequest, DecisionService, Refusal
from slurm_synergy.slurm import QueuedJob, Slurm, user_name


@dataclass
class InPlace:
    """What one pass over the queue did."""

    updated: list[tuple[str, Rightsized]] = field(default_factory=list)
    left: list[tuple[str, str]] = field(default_factory=list)      # job, why


def _size_settings(cpus: int | None, mem_mb: int | None, gres: str | None) -> dict[str, str]:
    """`scontrol update` fields for a size: cores (CPUsPerTask, with the totals Slurm does
    not derive again), memory per node (MB), GPUs (--gres's value); None leaves one as
    it is."""
    out: dict[str, str] = {}
    if cpus is not None:
        out.update(CPUsPerTask=str(cpus), NumCPUs=str(cpus), MinCPUsNode=str(cpus))
    if mem_mb is not None:
        out["MinMemoryNode"] = str(mem_mb)
    if gres is not None:
        out["TresPerNode"] = f"gres:{gres}"
    return out


def settings_for(r: Rightsized, asked_gpus: int) -> dict[str, str]:
    """The fields of a decision applied: its GPUs only where it changed them."""
    changed = r.gpus and (r.gpus != asked_gpus or r.gpu_type)
    return _size_settings(r.cpus, r.mem_mb, r.gres if changed else None)


def _asked(job: QueuedJob, comment: str, by_job: str, slurm: Slurm) -> Asked:
    pinned = comment_format.pinned(comment)
    before = comment_format.asked(comment)
    if before is not None and comment_format.marks(comment).get("by") == by_job:
        # Updated by this run already: the queue shows its earlier decision, the
        # comment what the job asked for.
        return Asked(cpus=before.cpus, mem_mb=before.mem_mb, gpus=before.gpus,
                     gpu_type=before.gpu_type, tasks=job.tasks, nodes=job.nodes,
                     pinned=pinned)
    mem = job.mem_mb or None
    if mem and slurm.memory_per_cpu(job.job_id):
        mem *= max(1, job.cpus_per_task)
    types = sorted(gpu_types(job.gres))
    return Asked(cpus=job.cpus_per_task or None, mem_mb=mem, gpus=job.gpus,
                 gpu_type=types[0] if len(types) == 1 else "", tasks=job.tasks,
                 nodes=job.nodes, pinned=pinned)


@dataclass
class Undone:
    """What undoing a dropped decision did."""

    asked: list[tuple[str, str]] = field(default_factory=list)     # job, asked= again
    left: list[tuple[str, str]] = field(default_factory=list)      # job, why


def _ours_pending(fingerprint: str, by_job: str, slurm: Slurm,
                  left: list[tuple[str, str]]) -> Iterator[tuple[QueuedJob, str]]:
    """This user's pending jobs of `fingerprint` but `by_job`'s own, with their comments."""
    for job in slurm.queue(users=[user_name()]):
        if job.state != "PENDING" or job.job_id.split("_")[0] == by_job.split("_")[0]:
            continue
        try:
            comment = slurm.comment(job.job_id)
        except SynergyError as e:
            left.append((job.job_id, str(e)))
            continue
        if comment_format.fingerprint(comment) == fingerprint:
            yield job, comment


def rightsize_pending(fingerprint: str, by_job: str, service: DecisionService,
                      log: Callable[[str], None], profile: Profile | None = None) -> InPlace:
    """Right-size this user's pending jobs of `fingerprint` in place: those marked for
    measuring, and those `by_job` right-sized before (its profile changed since), each
    as the decision service decides for its partition and QOS, from `profile` where the
    caller holds it (the run that just measured it), else from the user's store."""
    done = InPlace()
    for job, comment in _ours_pending(fingerprint, by_job, service.slurm, done.left):
        marks = comment_format.marks(comment)
        if marks.get("profile") != "1" and marks.get("by") != by_job:
            continue
        why = _update(job, comment, by_job, service, done, profile)
        if why:
            done.left.append((job.job_id, why))
            log(f"slurm-synergy: job {job.job_id} left as asked: {why}")
    return done


def undo_pending(fingerprint: str, by_job: str, slurm: Slurm,
                 log: Callable[[str], None]) -> Undone:
    """Once `fingerprint`'s decision is dropped (`by_job` ran another program under the
    key): this user's pending jobs of it that a decision right-sized (at submission, or in
    place) go back to what they asked. A plain batch script's is marked profile=1 too: its
    run is measured (the task prolog's supervisor reads the comment). A job list's script
    decides at its start from the environment it was submitted with, which Slurm does not
    update, so it runs as asked, unmeasured; the workload's next submission is marked. A
    resource the job left to Slurm (asked= says -) keeps the decision's value: Slurm's
    default cannot be asked for again. Its loader workers are its own again (the node
    prolog hands a job's tasks the decision its comment holds when it starts:
    hooks/taskenv.py, save a user-mode script's own copy of it); a `synergy tune` change is
    not given back (its tuned= mark is dropped, so that tune --revert does not bring the
    dropped decision back)."""
    done = Undone()
    for job, comment in _ours_pending(fingerprint, by_job, slurm, done.left):
        before, after = comment_format.asked(comment), comment_format.decision(comment)
        if before is None or after is None:
            continue
        changed = before.gpus and (before.gpus, before.gpu_type) != (after.gpus, after.gpu_type)
        settings = _size_settings(before.cpus, before.mem_mb,
                                 gres_text(before.gpus, before.gpu_type) if changed else None)
        plain = comment_format.marks(comment).get("plain") == "1"
        dropped = ("asked", "decision", "by", "tuned")
        marks = (comment_format.Marks({"profile": "1"}, dropped) if plain else
                 comment_format.Marks(drop=(*dropped, "profile")))
        target = job.job_id.split("_")[0] if job.array else job.job_id
        try:
            slurm.mark(target, marks, settings, read_from=job.job_id)
        except SynergyError as e:
            why = f"Slurm refused the update ({str(e).splitlines()[0]})"
            done.left.append((job.job_id, why))
            log(f"slurm-synergy: job {job.job_id} keeps the dropped decision: {why}")
            continue
        asked = comment_format.asked_text(before.cpus, before.mem_mb, before.gpus,
                                          before.gpu_type)
        unset = [name for name, v in (("cores", before.cpus), ("memory", before.mem_mb))
                 if v is None]
        log(f"slurm-synergy: job {job.job_id} asks again for what it was submitted with "
            f"({asked})" + (f"; its {' and '.join(unset)}, left to Slurm at submission, "
                            "keep the dropped decision's" if unset else "")
            + ("; its run is measured" if plain else "; it runs as asked, unmeasured"))
        done.asked.append((job.job_id, asked))
    return done


def _update(job: QueuedJob, comment: str, by_job: str, service: DecisionService,
            done: InPlace, profile: Profile | None) -> str:
    """Update one job; returns why not ("" when updated)."""
    if "," in job.partition:
        return f"several partitions ({job.partition})"
    slurm = service.slurm
    req = DecisionRequest(os.geteuid(), comment_format.fingerprint(comment) or "",
                          job.partition, job.qos)
    decision = (service.judge(req, profile) if profile is not None
                and profile.fingerprint == req.fingerprint else service.decide(req))
    if isinstance(decision, Refusal):
        return decision.why
    try:
        asked = _asked(job, comment, by_job, slurm)
        r = rightsize(asked, decision, service.policy.user_request_wins)
    except (LeftAsAsked, SynergyError) as e:
        return str(e)
    marks = comment_format.Marks({"asked": r.asked, "decision": r.decided, "by": by_job},
                                 drop=("profile",))
    # An array's pending tasks are one record until they start: updated as a whole.
    target = job.job_id.split("_")[0] if job.array else job.job_id
    try:
        slurm.mark(target, marks, settings_for(r, asked.gpus), read_from=job.job_id)
    except SynergyError as e:
        return f"Slurm refused the update ({str(e).splitlines()[0]})"
    done.updated.append((job.job_id, r))
    return ""
