"""A profiler command line checked against its allocation: what will be profiled
(the script, its options, its fingerprint), where (srun steps or locally) and within
which limits (cores, memory, GPUs)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.jobspec import BUILTIN_SCRIPT as BUILTIN
from slurm_synergy.model.jobspec import torchrun_argv, workload_key
from slurm_synergy.model.options import (
    declared_options,
    spelling,
    spellings,
    value_of,
    without,
)
from slurm_synergy.model.throughput import workers_for
from slurm_synergy.paths import TRAIN_MODULE, TRAIN_SCRIPT
from slurm_synergy.profiles import ProfileStore
from slurm_synergy.measure.search import PLATEAU
from slurm_synergy.measure.errors import UsageError


def resolve_script(script: str, torchrun: int | None) -> list[str]:
    """The command that starts the script, as the probe takes it."""
    if script == BUILTIN:
        if torchrun:
            raise UsageError("--torchrun runs a user's Python script, not the built-in trainer")
        return [sys.executable, "-m", TRAIN_MODULE]
    path = script_path(script)
    if not path.exists():
        raise UsageError(f"training script {path} does not exist")
    if path.is_dir():
        raise UsageError(f"training script {path} is a folder, not a script")
    if path.suffix != ".py" and not os.access(path, os.X_OK):
        raise UsageError(f"training script {path} is not executable (chmod +x, or a "
                         ".py file)")
    if torchrun:
        if path.suffix != ".py":
            raise UsageError(f"--torchrun runs a Python script, not {path}")
        return torchrun_argv(sys.executable, torchrun, str(path))
    return [str(path)]


def script_path(script: str) -> Path:
    """The script's file: what declares its options and what its workload key hashes."""
    return TRAIN_SCRIPT if script == BUILTIN else Path(script).expanduser().resolve()


def default_fingerprint(script: str, args: Sequence[str], gpus: int, procs: int) -> str:
    """As `synergy submit` keys a user's script (its content and arguments, its GPUs and
    processes) for a row that names no GPU type: submit it with the same arguments and
    the job finds this profile."""
    key = workload_key(script_path(script), args, gpus, procs)
    key["gpu_type"] = ""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


# --- where we run ------------------------------------------------------------------------

@dataclass(frozen=True)
class Limits:
    cores: int
    mem_mb: int
    gpus: int
    job_id: str


def allocation_limits() -> Limits:
    """What this process may use: Slurm's allocation when inside one, else the machine's."""
    env = os.environ
    cores = len(os.sched_getaffinity(0))
    if env.get("SLURM_CPUS_ON_NODE", "").isdigit():
        cores = int(env["SLURM_CPUS_ON_NODE"])
    if env.get("SLURM_MEM_PER_NODE", "").isdigit():
        mem = int(env["SLURM_MEM_PER_NODE"])
    elif env.get("SLURM_MEM_PER_CPU", "").isdigit():
        mem = int(env["SLURM_MEM_PER_CPU"]) * cores
    else:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    visible = env.get("CUDA_VISIBLE_DEVICES", "")
    gpus = len([d for d in visible.split(",") if d.strip()]) if visible else 0
    if env.get("SLURM_GPUS_ON_NODE", "").isdigit():
        gpus = int(env["SLURM_GPUS_ON_NODE"])
    return Limits(cores, mem, gpus, env.get("SLURM_JOB_ID", ""))


@dataclass(frozen=True)
class Plan:
    """A checked command line: what will be profiled, where, within which limits."""

    fingerprint: str
    store: ProfileStore
    command: list[str]
    script_args: list[str]      # the script's own, less the options the profiler sets
    workers_option: str | None
    iterations_option: str | None
    procs: int
    limits: Limits
    launcher: str
    top: int                    # most cores swept
    mem_mb: int
    gpus: int
    record_batch: int           # the batch size the workload runs with, for the record
    workers: int | None = None  # loader workers per process in every step; None: the rule

    def workers_at(self, cores: int) -> int:
        """Loader workers per process of a step on `cores` cores: the job's own where it
        sets them, else one core per process kept for it and the rest to its loader."""
        return workers_for(cores, self.procs) if self.workers is None else self.workers


@dataclass(frozen=True)
class ProfileRequest:
    """What `synergy profile` is asked to do (profiler/offline_profiler.py parses it)."""

    script: str                         # a .py file, a program, or the built-in trainer
    script_args: tuple[str, ...] = ()   # its own arguments
    job_name: str = ""                  # recorded in the profile
    fingerprint: str | None = None      # None: hashed from the command
    store: Path | None = None           # None: SYNERGY_PROFILES or the user's default
    workdir: Path | None = None         # the steps' outputs; None: ./synergy-profile-<fp>
    num_gpus: int | None = None         # GPUs per step; None: the allocation's
    cpu: int | None = None              # most cores swept; None: the allocation's
    mem_mb: int | None = None           # memory per step; None: the allocation's
    batch: int | None = None            # wins over the script's own batch option
    workers: int | None = None          # loader workers per process; None: workers_for
    torchrun: int | None = None         # DDP ranks under torchrun; None: one process
    max_iterations: int | None = None   # measured per step; None: MOST_ITERATIONS, or 1 s
    window_s: float = 4.0               # seconds each step measures, at the first's rate
    warmup: int = 3                     # iterations left out of each step
    first_batch_timeout_s: float = 300.0
    step_timeout_s: float = 600.0
    plateau: float = PLATEAU            # Synergy's: halve while within this of the best
    repeats: int = 2                    # runs of each swept count
    max_repeats: int = 4                # where the noise rule cannot tell counts apart
    budget_s: float = 72.0              # what optional steps must end within
    launcher: str = "auto"              # srun, local, or auto (srun in an allocation)
    fresh_steps: bool = False           # every step a new process, not a warm fork
    power_sweep: bool = True            # sweep GPU power limits where the node allows
    force: bool = False                 # profile again even if a profile exists


def plan_profiling(req: ProfileRequest) -> Plan:
    """Check everything that can be checked before a step runs; UsageError otherwise."""
    if not 0 < req.plateau < 1:
        raise UsageError(f"--plateau {req.plateau} must lie between 0 and 1")
    command = resolve_script(req.script, req.torchrun)
    declared = declared_options(script_path(req.script))
    workers_opt, iterations_opt = spelling("workers", declared), spelling("iterations", declared)
    batch_opt = spelling("batch", declared)
    script_args = without(list(req.script_args),
                          spellings("workers", declared) + spellings("iterations", declared))
    if req.batch is not None:
        if batch_opt is None:
            raise UsageError(f"-b/--batch {req.batch}: {req.script} declares no batch-size "
                             "option to pass it to; give the script's own in its arguments")
        script_args = [*without(script_args, [batch_opt]), batch_opt, str(req.batch)]
    limits = allocation_limits()
    launcher = req.launcher
    if launcher == "auto":
        launcher = "srun" if limits.job_id else "local"
    if launcher == "srun" and not limits.job_id:
        raise UsageError("--launcher srun needs a Slurm allocation (run inside sbatch or "
                         "salloc), or use --launcher local")
    top = limits.cores
    if req.cpu is not None:
        if req.cpu > limits.cores:
            raise UsageError(f"--cpu {req.cpu} is more than the {limits.cores} core(s) this "
                             "allocation has")
        top = req.cpu
    mem_mb = req.mem_mb or limits.mem_mb
    if mem_mb > limits.mem_mb:
        raise UsageError(f"--memory {mem_mb}M is more than the allocation's {limits.mem_mb}M")
    ngpus = limits.gpus if req.num_gpus is None else req.num_gpus
    if not 0 <= ngpus <= limits.gpus:
        raise UsageError(f"--num-gpus {ngpus}: the allocation has {limits.gpus} GPU(s)")
    batch_text = value_of(script_args, [batch_opt]) if batch_opt else None
    record_batch = int(batch_text) if batch_text and batch_text.isdigit() else 0
    procs = req.torchrun or 1
    fp = req.fingerprint or default_fingerprint(req.script, script_args, ngpus, procs)
    store = ProfileStore.named(req.store) if req.store else ProfileStore.default()
    try:
        store.path(fp)
    except SynergyError as e:
        raise UsageError(str(e)) from None
    return Plan(fp, store, command, script_args, workers_opt, iterations_opt, procs, limits,
                launcher, top, mem_mb, ngpus, record_batch, req.workers)
