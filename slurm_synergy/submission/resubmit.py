"""After its profiling run, a job submits itself again, right-sized, and ends.

A requeue would keep the job's old request (job_submit does not see requeues), so the
profiled job runs a fresh sbatch of its own script: the shim rewrites that submission
from the new decision, or, in user mode, this module applies the decision itself. The
new job carries SYNERGY_PROFILE=0, so it is never profiled again, and `from=<job>` in
its comment. The chain (row -> profiling job -> resubmitted job) is kept in
chains.jsonl in the user's synergy home, per cluster (paths.cluster_dir).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from slurm_synergy.chains import ChainLink, record
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model import comment as comment_format
from slurm_synergy.profiles import ProfileStore
from slurm_synergy.measure.offline.gpuroom import GpuMove, read_move
from slurm_synergy.slurm import Slurm
from slurm_synergy.decisions.decider import resolve_mode
from slurm_synergy.decisions.service import (DecisionRequest, DecisionService, Refusal,
                                              own_store)
from slurm_synergy.model.rightsize import Asked, Rightsized, rightsize
from slurm_synergy.decisions.table import read as read_table
from slurm_synergy.decisions.table import entries_of, table_path
from slurm_synergy.site import Site

def resubmit(job_id: str, script: Path, comment: str, job_name: str,
             array_task: str = "", mode: str = "auto", slurm: Slurm | None = None,
             log: Callable[[str], None] = print, gpu_move: Path | None = None) -> str:
    """Submit `script` again after profiling job `job_id`; returns the new job id. With
    `gpu_move` (the profiler's record that the job's GPU would not hold the step), on the
    type it names, to be profiled there."""
    slurm = slurm or Slurm()
    fp = comment_format.fingerprint(comment)
    if fp is None:
        raise SynergyError(f"comment {comment!r} carries no workload fingerprint")
    if not script.is_file():
        raise SynergyError(f"the job's script {script} is gone; cannot resubmit")
    base = comment_format.without(comment, *comment_format.PROFILING_MARKS)
    mode = resolve_mode(mode, slurm)
    how = _moved(read_move(gpu_move), base) if gpu_move is not None else \
        _decided(fp, base, script, mode, slurm, _live_comment(slurm, job_id))
    options = [*how.options, f"--export=ALL,{','.join(how.exports)}",
               f"--comment={how.comment} from={job_id}"]
    if array_task:
        options.append(f"--array={array_task}")
    new_id = slurm.sbatch(script, options)
    # Submitted: from here on nothing may fail the job, or it would also train in place.
    try:
        record(ChainLink(fp, job_name, job_id, new_id, mode, how.summary, time.time()))
    except (OSError, SynergyError) as e:
        log(f"slurm-synergy: could not record the chain {job_id} -> {new_id}: {e}")
    log(how.said(job_id, new_id))
    return new_id


@dataclass(frozen=True)
class _Again:
    """What a resubmission changes: sbatch options, exports, its comment, and the chain's
    summary of why."""

    options: list[str]
    exports: list[str]
    comment: str
    summary: str
    moved: bool = False

    def said(self, job_id: str, new_id: str) -> str:
        """The line the job's log gets about its resubmission as `new_id`."""
        if self.moved:
            return (f"slurm-synergy: job {job_id}'s step would not fit its GPU; resubmitted "
                    f"as job {new_id} ({self.summary}), to be profiled there")
        how = f"decision {self.summary}" if self.summary else \
            "the cluster's shim applies the decision"
        return f"slurm-synergy: profiled in job {job_id}; resubmitted as job {new_id} ({how})"


def _moved(move: GpuMove, comment: str) -> _Again:
    """Nothing was measured: the new job is profiled, on GPUs that hold its step."""
    gpus = os.environ.get("SLURM_GPUS_ON_NODE", "")
    if not gpus.isdigit():
        raise SynergyError("SLURM_GPUS_ON_NODE does not say how many GPUs the job has")
    return _Again([f"--gres=gpu:{move.gpu_type}:{gpus}"], ["SYNERGY_PROFILE=1"],
                  comment_format.with_marks(comment, profile="1"),
                  f"moved from {move.from_type} to {move.gpu_type}", moved=True)


def _live_comment(slurm: Slurm, job_id: str) -> str:
    """The job's comment as slurmctld holds it now (the shim's or an in-place update's
    decision= included); "" where it cannot be read."""
    try:
        return slurm.comment(job_id)
    except SynergyError:
        return ""


def _decided(fp: str, comment: str, script: Path, mode: str, slurm: Slurm,
             live: str) -> _Again:
    """Profiled: the new job runs as decided, never profiled again. In user mode the
    decision is applied here; under the shim, slurmctld applies it from its table.
    NothingToGain where the job (its `live` comment) runs as decided already: sized by a
    decision at submission or in place (a job submitted with --profile for a workload
    that had one), a resubmission would only wait in the queue again."""
    now_text = comment_format.marks(live).get("decision", "")
    if mode == "user":
        options, exports, sized = _user_mode(fp, comment, script, slurm)
        if now_text == sized.decided:
            raise NothingToGain(f"the job runs as decided already ({now_text})")
        return _Again(options, ["SYNERGY_PROFILE=0", *exports],
                      comment_format.with_marks(comment, asked=sized.asked,
                                                decision=sized.decided), sized.decided)
    try:
        # The shim sizes the resubmission by this user's own entry.
        entry = entries_of(read_table(table_path())[1]).get(fp)
    except SynergyError:
        entry = None
    if entry is None:
        raise NothingToGain(f"the decision table {table_path()} has no decision for "
                            f"{fp} yet (its owner's next `synergy plugin sync` adds it)")
    now = comment_format.decision(live)
    if now is not None and (now.cpus, now.mem_mb, now.gpus, now.workers) == (
            entry.cpus, entry.mem_mb, entry.gpus, entry.workers):
        raise NothingToGain(f"the job runs as decided already ({now_text})")
    return _Again([], ["SYNERGY_PROFILE=0"], comment, "")


class NothingToGain(SynergyError):
    """A resubmission would run as this job did: the job trains in place instead."""


_GRES_LINE = re.compile(r"^#SBATCH --gres=gpu:(?:(" + comment_format.GRES_TYPE + r"):)?\d+$",
                        re.MULTILINE)


def _user_mode(fp: str, comment: str, script: Path,
               slurm: Slurm) -> tuple[list[str], list[str], Rightsized]:
    """sbatch options, exports and the request as decided, as `synergy submit` applies a
    decision in user mode (model/rightsize.py, the one applier)."""
    # Run inside the profiled job: Slurm names its partition and allocation in the
    # environment, which is what the job asked for.
    env = os.environ
    job_id = env.get("SLURM_JOB_ID", "")
    service = DecisionService.for_site(Site.load(slurm), own_store(ProfileStore.default()))
    policy = service.policy
    # The new job asks what this one did: its partition, and the QOS Slurm gave it (in a
    # batch job of Slurm 22.05, SLURM_JOB_QOS holds the QOS's description, not its name).
    decision = service.decide(DecisionRequest(
        os.geteuid(), fp, env.get("SLURM_JOB_PARTITION", ""),
        slurm.qos_of(job_id) if job_id else ""))
    if isinstance(decision, Refusal):
        raise NothingToGain(decision.why)
    gres = _GRES_LINE.search(script.read_text())
    asked = Asked(cpus=int(env.get("SLURM_CPUS_PER_TASK", "0")) or None,
                  mem_mb=int(env.get("SLURM_MEM_PER_NODE", "0")) or None,
                  gpus=int(env.get("SLURM_GPUS_ON_NODE", "0") or 0),
                  gpu_type=(gres.group(1) or "") if gres else "",
                  pinned=comment_format.pinned(comment))
    sized = rightsize(asked, decision, policy.user_request_wins)
    options = [f"--cpus-per-task={sized.cpus}", f"--mem={sized.mem_mb}M"]
    if sized.gpus:
        options.append(f"--gres={sized.gres}")
    exports = [f"SYNERGY_WORKERS={sized.workers}"]
    if sized.power_limit_w:
        exports.append(f"SYNERGY_POWER_LIMIT_W={sized.power_limit_w}")
    return options, exports, sized
