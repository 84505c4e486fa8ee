"""The one function that applies a decision to a job's request.

Whoever applies a decision calls `rightsize`: `synergy submit` in user mode before sbatch,
a resubmission after profiling, and a profiled run updating its workload's pending jobs
in place (`scontrol update`). etc/job_submit.lua mirrors it inside slurmctld;
tests/contract_cases.toml holds the cases both must agree on (test_contract_cases.py).

The rules: a job of several tasks or nodes is left as asked (a decision is per task on
one node); resources the job pinned itself stay as asked where the site lets the user's
request win; loader workers follow the cores the job ends up with, one core per training
process kept for the trainer; the GPU type is the decision's where it names one, else
the one the job asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_synergy.model.comment import asked_text, decision_text
from slurm_synergy.model.engine import Decision
from slurm_synergy.model.throughput import workers_for
from slurm_synergy.model.units import gres_text


@dataclass(frozen=True)
class Asked:
    """What a job asks Slurm for, as submitted."""

    cpus: int | None                # per task; None where the job left it to Slurm
    mem_mb: int | None              # per node; None where unset
    gpus: int                       # per node
    gpu_type: str = ""              # "" = any type
    tasks: int = 1
    nodes: int = 1
    pinned: tuple[str, ...] = ()    # what the user set on purpose: cpus, mem, gpus


@dataclass(frozen=True)
class Rightsized:
    """The request Slurm gets, and the comment's asked= and decision= for it."""

    cpus: int
    mem_mb: int
    gpus: int
    gpu_type: str
    workers: int
    power_limit_w: int
    asked: str                      # asked= of the comment
    decided: str                    # decision= of the comment

    @property
    def gres(self) -> str:
        """--gres's value ("" for a job without GPUs)."""
        return gres_text(self.gpus, self.gpu_type)


class LeftAsAsked(ValueError):
    """The decision does not apply to this job's shape; the message says why."""


def rightsize(asked: Asked, decision: Decision, user_request_wins: bool,
              grow_only: bool = False) -> Rightsized:
    """`asked` with `decision` applied; LeftAsAsked where it must run as asked. A
    `grow_only` decision (another member's profile, shared by the site's share_group)
    only raises cores or memory the job asked less of: it keeps the job's GPUs and power
    limit, and a job it would not grow is left as asked (its own run is measured)."""
    if asked.tasks > 1 or asked.nodes > 1:
        raise LeftAsAsked("more than one task or node: left as asked")
    pinned = set(asked.pinned) if user_request_wins else set()
    power_limit_w = decision.power_limit_w
    if grow_only:
        pinned.add("gpus")
        if asked.cpus and asked.cpus >= decision.cpus:
            pinned.add("cpus")
        if asked.mem_mb and asked.mem_mb >= decision.mem_mb:
            pinned.add("mem")
        if {"cpus", "mem"} <= pinned:
            raise LeftAsAsked("a shared decision would grow nothing: left as asked")
        power_limit_w = 0
    cpus = asked.cpus if "cpus" in pinned and asked.cpus else decision.cpus
    mem_mb = asked.mem_mb if "mem" in pinned and asked.mem_mb else decision.mem_mb
    if "gpus" in pinned or not decision.gpus or not asked.gpus:
        gpus, gpu_type = asked.gpus, asked.gpu_type
    else:
        gpus, gpu_type = decision.gpus, decision.gpu_type or asked.gpu_type
    workers = workers_for(cpus, decision.procs) if "cpus" in pinned else decision.workers
    return Rightsized(
        cpus=cpus, mem_mb=mem_mb, gpus=gpus, gpu_type=gpu_type if gpus else "",
        workers=workers, power_limit_w=power_limit_w,
        asked=asked_text(asked.cpus, asked.mem_mb, asked.gpus,
                         asked.gpu_type if asked.gpus else ""),
        decided=decision_text(cpus, mem_mb, gpus, workers, power_limit_w,
                              gpu_type if gpus else ""))
