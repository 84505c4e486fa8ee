"""Profile a training workload inside its Slurm allocation, as Synergy's optimistic profiler
does, and store the profile under the workload's fingerprint.

    python profiler/offline_profiler.py [profiler options] SCRIPT [script args]
    synergy profile [profiler options] SCRIPT [script args]          (the same)

Each measurement is an `srun` step of the current allocation, held by Slurm's cgroups to
k cores, that runs the script under the script probe (slurm_synergy.probe): the script
is not changed and need declare nothing. The probe sets the loader's workers for the
step, counts the batches its loaders yield, times the wait on them, and ends the script
after a warm-up and --max-iterations measured steps. CPU sensitivity is swept: the full
allocation first, then half the cores while throughput stays within --plateau of the
best (Synergy's search). The throughput model is fitted to an input-only step (the
script's own loader drained alone) and a compute-only step (its first batch replayed),
so every swept point checks it. Memory sensitivity is modelled (DS-Analyzer), from the
dataset's size and the page-cache and storage read rates measured here. GPUs are read
through NVML while the widest step runs.

Options a script declares are used (its workers and iteration-limit options get the
step's values; Synergy's and torchloader's spellings are known); none is invented.
Nothing reaches the profile store unless every step succeeded.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:
    # Run as a file: put the repository root first, as profiler/train.py explains.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, NoReturn, Sequence

from tqdm import tqdm

from profiler.fetch import measure_fetch
from profiler.gpu import open_gpus, power_limits_to_try
from slurm_synergy import __version__
from slurm_synergy.argtypes import int_at_least
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.gpu import Gpu, GpuError
from slurm_synergy.gpu.sampler import Sampler
from slurm_synergy.hooks.power import ceiling_mw
from slurm_synergy.model.jobspec import BUILTIN_SCRIPT as BUILTIN, torchrun_argv, workload_key
from slurm_synergy.paths import TRAIN_SCRIPT
from slurm_synergy.model.policy import load_policy
from slurm_synergy.model.units import mem_mb
from slurm_synergy.paths import policy_path
from slurm_synergy.model.options import (declared_options, spelling, spellings, value_of,
                                         without)
from slurm_synergy.probe.records import read_result
from slurm_synergy.model.profile import Allocation, FetchRates, GpuReadings, Point, PowerPoint, Profile, ProfileError
from slurm_synergy.profiles import ProfileStore
from slurm_synergy.slurm import Slurm
from slurm_synergy.model.throughput import fit_components, workers_for

PROG = "offline_profiler"
USAGE_EXIT = 2          # what argparse (and profiler/train.py) exit with on bad options
BUSY_EXIT = 3           # another job holds this workload's profiling lock


class ProfilingError(SynergyError):
    """Profiling could not finish; nothing was stored."""


class UsageError(ProfilingError):
    """The command line or the allocation cannot be profiled."""


class Busy(SynergyError):
    """Another job is profiling this workload now: this one should run as it is."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_EXIT, f"{PROG}: error: {message} (see --help)\n")


def _memory_mb(text: str) -> int:
    """Slurm's size syntax: 4096 (MB), 4096M, 16G, 1T."""
    size = mem_mb(text)
    if size is None or size < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a memory size (e.g. 16G, 4096M)")
    return int(size)


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = _Parser(prog=prog, description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    add = p.add_argument
    add("--num-gpus", type=int, help="GPUs per step (default: all of the allocation's)")
    add("--nnodes", type=int_at_least(1), default=1, help="nodes (profiling uses one)")
    add("--cpu", type=int_at_least(1), help="most cores to sweep (default: the allocation's)")
    add("--memory", type=_memory_mb, help="memory per step, e.g. 16G (default: the "
        "allocation's)")
    add("-b", "--batch", type=int_at_least(1), help="batch size (wins over the script's; "
        "the script must declare a batch-size option)")
    add("--max-iterations", type=int_at_least(1), default=20,
        help="measured iterations per step (default %(default)s)")
    add("--warmup", type=int, default=3,
        help="first iterations of each step left out (default %(default)s)")
    add("--torchrun", type=int_at_least(1), metavar="N",
        help="run the script under torchrun with N processes (its DDP ranks)")
    add("--first-batch-timeout", type=float, default=300.0,
        help="seconds a step's script may take to its first batch (default %(default)s; "
        "jobs get the site policy's first_batch_timeout_s)")
    add("--job-name", default="", help="name recorded in the profile")
    add("--fingerprint", help="the workload's fingerprint (default: hashed from the command)")
    add("--store", type=Path, help="profile store (default: SYNERGY_PROFILES or "
        "~/.slurm-synergy/profiles)")
    add("--workdir", type=Path, help="folder for the steps' outputs and logs "
        "(default: ./synergy-profile-FINGERPRINT)")
    add("--plateau", type=float, default=0.10,
        help="halve the cores while throughput stays within this fraction of the best "
        "(default %(default)s, Synergy's)")
    add("--step-timeout", type=float, default=600.0,
        help="seconds a step may run before it is stopped (default %(default)s)")
    add("--launcher", choices=("auto", "srun", "local"), default="auto",
        help="srun steps (inside an allocation; auto picks it there) or local processes "
        "pinned to k cores (a workstation; not enforced by Slurm)")
    add("--power-sweep", choices=("auto", "off"), default="auto",
        help="sweep GPU power limits where the node allows setting them")
    add("--force", action="store_true", help="profile again even if a profile exists")
    add("--docker-img", help=argparse.SUPPRESS)
    add("--container-mnt", help=argparse.SUPPRESS)
    add("script", help=f"the training script (a .py file, a program, or {BUILTIN})")
    add("script_args", nargs=argparse.REMAINDER, help="the script's own arguments")
    return p


# --- the command -------------------------------------------------------------------------

def resolve_script(script: str, torchrun: int | None) -> list[str]:
    """The command that starts the script, as the probe takes it."""
    if script == BUILTIN:
        path = TRAIN_SCRIPT
    else:
        path = Path(script).expanduser()
        if not path.exists():
            raise UsageError(f"training script {path} does not exist")
        if path.is_dir():
            raise UsageError(f"training script {path} is a folder, not a script")
        path = path.resolve()
        if path.suffix != ".py" and not os.access(path, os.X_OK):
            raise UsageError(f"training script {path} is not executable (chmod +x, or a "
                             ".py file)")
    if torchrun:
        if path.suffix != ".py":
            raise UsageError(f"--torchrun runs a Python script, not {path}")
        return torchrun_argv(sys.executable, torchrun, str(path))
    return [str(path)]


def script_path(script: str) -> Path:
    return TRAIN_SCRIPT if script == BUILTIN else Path(script).expanduser().resolve()


def default_fingerprint(script: str, args: Sequence[str], gpus: int, procs: int) -> str:
    """As `synergy submit` keys a user's script (its content and arguments, its GPUs and
    processes) for a row that names no GPU type: submit it with the same arguments and
    the job finds this profile."""
    key = workload_key(TRAIN_SCRIPT if script == BUILTIN else script, args, gpus, procs)
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


# --- one step ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    measure: str
    cores: int
    workers: int                # loader workers of each of the script's processes
    gpus: int | None = None     # None: all of the allocation's GPUs


@dataclass
class Runner:
    command: list[str]          # how to start the script: the probe runs it
    script_args: list[str]      # its arguments, less the options the profiler sets
    workers_option: str | None  # the script's own spelling of its worker count, if any
    iterations_option: str | None   # ... and of its iteration limit
    procs: int                  # processes of the script (torchrun ranks)
    iterations: int
    warmup: int
    first_batch_s: float
    mem_mb: int
    gpus: int
    launcher: str               # srun | local
    workdir: Path
    timeout_s: float
    name: str
    slurm: Slurm
    steps_run: int = 0

    def argv(self, step: Step, out: Path) -> list[str]:
        """The probe, then the script with the step's values for the options it declares
        (the probe sets the workers and ends the run whatever the script does)."""
        script = [*self.command, *self.script_args]
        if self.workers_option:
            script += [self.workers_option, str(step.workers)]
        if self.iterations_option:      # a backstop only: the probe ends the run first
            script += [self.iterations_option, str(self.warmup + self.iterations + 1)]
        return [sys.executable, "-m", "slurm_synergy.probe", "--mode", step.measure,
                "--workers", str(step.workers), "--warmup", str(self.warmup),
                "--iterations", str(self.iterations), "--time-limit",
                f"{self.first_batch_s:g}", "--out", str(out), "--", *script]

    def run(self, step: Step) -> tuple[dict[str, Any], float]:
        """Run one step; the probe's measurement and the wall time. ProfilingError if the
        step fails or measures nothing."""
        self.steps_run += 1
        folder = self.workdir / f"step{self.steps_run:02d}-{step.measure}-{step.cores}c"
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        out = folder / "probe.json"
        argv = self.argv(step, out)
        # Every step keeps the job's GPUs, the input-only one too: a script that moves its
        # model to CUDA before its loop would fail without one.
        gpus = self.gpus if step.gpus is None else step.gpus
        preexec: Callable[[], None] | None = None
        if self.launcher == "srun":
            argv = self.slurm.step_argv(argv, step.cores, self.mem_mb, gpus, self.name)
        else:
            allowed = sorted(os.sched_getaffinity(0))[:step.cores]
            preexec = lambda: os.sched_setaffinity(0, allowed)  # noqa: E731
        log = folder / "step.log"
        env = dict(self.slurm.env(), SYNERGY_OUTPUT=str(folder))
        if self.launcher != "srun" and gpus != self.gpus:
            # srun gives a step its GPUs; locally, hide the others from the script.
            visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
            env["CUDA_VISIBLE_DEVICES"] = ",".join(visible[:gpus])
        t0 = time.perf_counter()
        with open(log, "w") as output:
            output.write("$ " + " ".join(argv) + "\n")
            output.flush()
            proc = subprocess.Popen(argv, cwd=folder, stdout=output, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True, preexec_fn=preexec)
            try:
                rc = proc.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                _stop(proc)
                raise ProfilingError(
                    f"the {_describe(step)} step ran past its {self.timeout_s:.0f}s limit and "
                    f"was stopped: {self.warmup + self.iterations} iterations took longer "
                    f"than that (--step-timeout, --max-iterations). Log: {log}") from None
        wall = time.perf_counter() - t0
        try:
            result = read_result(out)
        except ValueError:
            if rc != 0:
                raise StepFailed(step, rc, log) from None
            raise ProfilingError(f"the {_describe(step)} step wrote no probe result; see "
                                 f"{log}") from None
        if not result["ok"]:
            tail = f"; last lines of {log}:\n{_tail(log)}" if result["exit_status"] else \
                f" (log: {log})"
            raise ProfilingError(f"the {_describe(step)} step measured nothing: "
                                 f"{result['reason']}{tail}")
        return result["measurement"], wall


class StepFailed(ProfilingError):
    def __init__(self, step: Step, rc: int, log: Path) -> None:
        self.step, self.rc, self.log = step, rc, log
        tail = _tail(log)
        super().__init__(f"the {_describe(step)} step failed with exit status {rc}; "
                         f"last lines of {log}:\n{tail}")


def _describe(step: Step) -> str:
    what = {"train": "training", "loader": "input-only", "compute": "compute-only"}[step.measure]
    return f"{what} {step.cores}-core"


def _tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "  (no log)"
    return "\n".join("  " + line for line in text[-lines:])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the step's process group (srun passes it on to the step), then SIGKILL."""
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def to_point(step: Step, measured: dict[str, Any], wall: float, mem_mb: int,
             procs: int = 1) -> Point:
    """A profile point from the probe's measurement; workers counted over all ranks."""
    def num(key: str) -> float:
        value = measured.get(key)
        return float(value) if isinstance(value, (int, float)) else 0.0
    return Point(measure=step.measure, cores=step.cores, workers=step.workers * procs,
                 mem_mb=mem_mb, samples_per_s=num("samples_per_s"),
                 data_stall_fraction=num("data_wait_share"),
                 host_cpu_s_per_sample=num("cpu_s_per_sample"),
                 peak_rss_mb=num("peak_rss_mb"), step_s=wall, gpus=step.gpus)


# --- the sweep ---------------------------------------------------------------------------

def core_sweep(top: int, measure: Callable[[int], float], plateau: float) -> list[int]:
    """Synergy's search: all cores, then halve while within `plateau` of the best.

    Stops at the first count that falls below, or at one core. Returns the counts tried.
    """
    tried = [top]
    best = measure(top)
    k = top // 2
    while k >= 1:
        tried.append(k)
        speed = measure(k)
        best = max(best, speed)
        if speed < (1.0 - plateau) * best:
            break
        k //= 2
    return tried


def gpu_readings(sampler: Sampler | None, reason: str, gpus: list[Gpu],
                 summary: dict[str, Any]) -> GpuReadings:
    if not gpus:
        return GpuReadings(available=False, reason=reason)
    try:
        rng, limit = gpus[0].power_range(), gpus[0].power_limit_mw()
    except GpuError as e:     # readings go on; only the power fields stay empty
        rng, limit, reason = None, None, str(e)
    peak = summary.get("peak_gpu_mem_mb")
    utils = [t.util_mean for t in sampler.totals if t.util_mean is not None] if sampler else []
    powers = [t.power_mean_w for t in sampler.totals
              if t.power_mean_w is not None] if sampler else []
    return GpuReadings(
        available=True, name=gpus[0].info.name, count=len(gpus),
        util_pct=sum(utils) / len(utils) if utils else None,
        mem_used_mb=max(t.mem_peak_mb for t in sampler.totals) if utils and sampler else None,
        peak_torch_mem_mb=float(peak) if isinstance(peak, (int, float)) else None,
        avg_power_w=sum(powers) if powers else None,
        energy_j=sampler.energy_j() if sampler else None, reason=reason,
        power_limit_w=limit / 1000 if limit is not None else None,
        min_limit_w=rng.min_mw / 1000 if rng else None,
        max_limit_w=rng.max_mw / 1000 if rng else None)


def power_sweep(runner: Runner, step: Step, gpus: list[Gpu],
                readings: GpuReadings) -> GpuReadings:
    """Zeus's sweep: each limit from the top down, the step's warm-up left out of the
    throughput (the trainer does that), the limit put back afterwards whatever happens.
    The top is the GPU's ceiling (site cap, else default limit), which no job exceeds."""
    try:
        cap_w = load_policy(policy_path()).power_cap_w
    except SynergyError as e:
        return replace(readings, power_sweep_note=f"no power sweep: {e}")
    try:
        top = ceiling_mw(gpus[0].power_range(), cap_w) / 1000
        before = [g.power_limit_mw() for g in gpus]
    except GpuError as e:
        return replace(readings, power_sweep_note=f"no power sweep: {e}")
    points: list[PowerPoint] = []
    try:
        for limit in power_limits_to_try(readings.min_limit_w or top, top):
            try:
                for g in gpus:
                    g.set_power_limit_mw(int(limit * 1000))
            except GpuError as e:   # no permission for a normal user
                return replace(readings, power_sweep_note=f"power limits cannot be set by this "
                               f"job ({e}); the node prolog applies them as root")
            with Sampler(gpus) as sampler:
                summary, _ = runner.run(step)
            powers = [t.power_mean_w for t in sampler.totals if t.power_mean_w is not None]
            points.append(PowerPoint(limit, float(summary["samples_per_s"]), sum(powers)))
    finally:
        for g, mw in zip(gpus, before):
            try:
                g.set_power_limit_mw(mw)
            except GpuError:
                pass
    return replace(readings, power_sweep=tuple(points))


@contextlib.contextmanager
def profiling_lock(store: ProfileStore, fp: str) -> Iterator[bool]:
    """True when this process holds the right to profile `fp`: the tasks of an array, or
    two jobs of one workload, would otherwise all profile it at the same time."""
    store.root.mkdir(parents=True, exist_ok=True)
    with open(store.root / f".{fp}.lock", "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


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


def plan(args: argparse.Namespace) -> Plan:
    """Check everything that can be checked before a step runs; UsageError otherwise."""
    if args.docker_img or args.container_mnt:
        raise UsageError("--docker-img and --container-mnt are Synergy's container options; "
                         "here each profiling step is an srun step in the job's own Slurm "
                         "allocation, with the job's environment, so leave them out")
    if args.nnodes != 1:
        raise UsageError(f"--nnodes {args.nnodes}: profiling runs on one node of the "
                         "allocation; multi-node jobs are profiled per node (use --nnodes 1)")
    if not 0 < args.plateau < 1:
        raise UsageError(f"--plateau {args.plateau} must lie between 0 and 1")
    command = resolve_script(args.script, args.torchrun)
    declared = declared_options(script_path(args.script))
    workers_opt, iterations_opt = spelling("workers", declared), spelling("iterations", declared)
    batch_opt = spelling("batch", declared)
    script_args = without(args.script_args,
                          spellings("workers", declared) + spellings("iterations", declared))
    if args.batch is not None:
        if batch_opt is None:
            raise UsageError(f"-b/--batch {args.batch}: {args.script} declares no batch-size "
                             "option to pass it to; give the script's own in its arguments")
        script_args = [*without(script_args, [batch_opt]), batch_opt, str(args.batch)]
    limits = allocation_limits()
    launcher = args.launcher
    if launcher == "auto":
        launcher = "srun" if limits.job_id else "local"
    if launcher == "srun" and not limits.job_id:
        raise UsageError("--launcher srun needs a Slurm allocation (run inside sbatch or "
                         "salloc), or use --launcher local")
    top = limits.cores
    if args.cpu is not None:
        if args.cpu > limits.cores:
            raise UsageError(f"--cpu {args.cpu} is more than the {limits.cores} core(s) this "
                             "allocation has")
        top = args.cpu
    mem_mb = args.memory or limits.mem_mb
    if mem_mb > limits.mem_mb:
        raise UsageError(f"--memory {mem_mb}M is more than the allocation's {limits.mem_mb}M")
    ngpus = limits.gpus if args.num_gpus is None else args.num_gpus
    if not 0 <= ngpus <= limits.gpus:
        raise UsageError(f"--num-gpus {ngpus}: the allocation has {limits.gpus} GPU(s)")
    batch_text = value_of(script_args, [batch_opt]) if batch_opt else None
    record_batch = int(batch_text) if batch_text and batch_text.isdigit() else 0
    procs = args.torchrun or 1
    fp = args.fingerprint or default_fingerprint(args.script, script_args, ngpus, procs)
    store = ProfileStore(args.store.resolve()) if args.store else ProfileStore.default()
    try:
        store.path(fp)
    except SynergyError as e:
        raise UsageError(str(e)) from None
    return Plan(fp, store, command, script_args, workers_opt, iterations_opt, procs, limits,
                launcher, top, mem_mb, ngpus, record_batch)


def profile_workload(args: argparse.Namespace, log: Callable[[str], None]) -> Profile | None:
    """Profile and store; None when it was profiled already; Busy when another job is
    profiling it now."""
    p = plan(args)
    with profiling_lock(p.store, p.fingerprint) as mine:
        if not mine:
            raise Busy(f"{p.fingerprint} is being profiled by another job now; not again")
        if p.store.has(p.fingerprint) and not args.force:
            try:
                p.store.load(p.fingerprint)
                log(f"{PROG}: {p.fingerprint} is already profiled "
                    f"({p.store.path(p.fingerprint)}); --force measures again")
                return None
            except ProfileError as e:
                log(f"{PROG}: {e}; measuring again")
        # Checked after the store: a right-sized job on one core may still ask, and is
        # told it is profiled already.
        if p.top < 2:
            raise UsageError(f"the allocation has {p.top} core(s); a CPU sweep needs at "
                             "least 2 (submit the profiling job with --cpus-per-task=2 or "
                             "more)")
        profile = _profile(args, p, log)
        if p.limits.job_id:
            _sync_decisions(log)
        return profile


def _sync_decisions(log: Callable[[str], None]) -> None:
    """Recompile the decision table (measured in a Slurm job: that cluster's), so the
    plugin rewrites the resubmission; best effort: where this user may not write the
    table, the site's own sync picks the profile up."""
    from slurm_synergy.shim.table import sync

    try:
        log(f"{PROG}: {sync()}")
    except SynergyError as e:
        log(f"{PROG}: decision table not updated: {e}")


def _profile(args: argparse.Namespace, plan: Plan, log: Callable[[str], None]) -> Profile:
    fp, store, limits, top, mem_mb = (plan.fingerprint, plan.store, plan.limits, plan.top,
                                      plan.mem_mb)
    launcher, ngpus, procs = plan.launcher, plan.gpus, plan.procs
    workdir = (args.workdir or Path.cwd() / f"synergy-profile-{fp}").resolve()
    workdir.mkdir(parents=True, exist_ok=True)

    runner = Runner(command=plan.command, script_args=plan.script_args,
                    workers_option=plan.workers_option,
                    iterations_option=plan.iterations_option, procs=procs,
                    iterations=args.max_iterations, warmup=args.warmup,
                    first_batch_s=args.first_batch_timeout, mem_mb=mem_mb,
                    gpus=ngpus, launcher=launcher, workdir=workdir,
                    timeout_s=args.step_timeout, name=f"profile-{fp}", slurm=Slurm())
    started, t0 = _now(), time.perf_counter()
    where = f"job {limits.job_id}" if limits.job_id else socket.gethostname()
    log(f"{PROG}: profiling {fp} ({args.job_name or args.script}) on {where}: up to {top} "
        f"cores, {mem_mb}M, {ngpus} GPU(s), {procs} process(es), {args.max_iterations} "
        f"iterations per step, {launcher} steps; logs in {workdir}")
    gpus, gpu_reason = open_gpus() if ngpus else ([], "the job has no GPU")
    gpus = gpus[:ngpus]
    points: list[Point] = []
    measured: dict[int, dict[str, Any]] = {}
    # The most steps the sweep can take: log2(top) + 1 training steps, two components
    # and one on a single GPU.
    bar = tqdm(total=top.bit_length() + 2 + (ngpus >= 2), desc=f"profile {fp[:8]}", unit="step",
               file=sys.stderr, disable=None)
    sampler: Sampler | None = None

    def point(step: Step) -> Point:
        m, wall = runner.run(step)
        points.append(to_point(step, m, wall, mem_mb, procs))
        return points[-1]

    def measure(k: int) -> float:
        nonlocal sampler
        step = Step("train", k, workers_for(k, procs))
        bar.set_postfix_str(f"{k} cores")
        if k == top and gpus:
            with Sampler(gpus) as sampler:
                m, wall = runner.run(step)
        else:
            m, wall = runner.run(step)
        measured[k] = m
        points.append(to_point(step, m, wall, mem_mb, procs))
        advance(f"{k} cores, {step.workers} worker(s) per process: "
                f"{points[-1].samples_per_s:.1f} samples/s, "
                f"{points[-1].data_stall_fraction:.0%} waiting on data ({wall:.0f}s)")
        return points[-1].samples_per_s

    def advance(line: str) -> None:
        bar.update(1)
        if bar.disable:         # a batch log: a line per step instead of a redrawn bar
            log(f"{PROG}: step {runner.steps_run}: {line}")

    try:
        core_sweep(top, measure, args.plateau)
        train = [p for p in points if p.measure == "train"]
        first = measured[top]
        fetch, notes = _fetch_rates(first, plan.script_args)
        # Each component as the training steps run it: one loader worker with a core of
        # its own (the training process on the other), and the training process on one
        # core, as workers_for leaves it. Measured on more threads, its CPU time per
        # sample would count the threads' spinning too.
        components: list[Point] = []
        # One loader worker in the compute-only step too: it takes the first batch, which
        # is then replayed; none would break a script's worker_init_fn or a DataLoader
        # given a multiprocessing_context, which need workers.
        for step in (Step("loader", min(top, 2 * procs), 1), Step("compute", procs, 1)):
            bar.set_postfix_str(f"{step.measure} only")
            pt = point(step)
            components.append(points.pop())
            advance(f"{step.measure} only, {step.cores} cores: {pt.samples_per_s:.1f} "
                    f"samples/s ({pt.step_s:.0f}s)")
        if ngpus >= 2:
            # Would fewer GPUs do? The best core count again, on one GPU.
            best = max(train, key=lambda pt: pt.samples_per_s)
            bar.set_postfix_str("1 GPU")
            pt = point(Step("train", best.cores, best.workers // procs, gpus=1))
            advance(f"{best.cores} cores on 1 of {ngpus} GPUs: {pt.samples_per_s:.1f} "
                    f"samples/s ({pt.step_s:.0f}s)")
        model = fit_components(components[0], components[1], train, on_gpu=bool(gpus),
                               fetch=fetch)
        readings = gpu_readings(sampler, gpu_reason, gpus, first)
        if gpus and args.power_sweep == "auto":
            bar.set_postfix_str("power limits")
            readings = power_sweep(runner, Step("train", top, workers_for(top, procs)), gpus,
                                   readings)
    finally:
        bar.close()
    profile = Profile(
        fingerprint=fp, job_name=args.job_name,
        command=tuple([args.script, *plan.script_args]), batch=plan.record_batch,
        allocation=Allocation(top, mem_mb, ngpus, socket.gethostname(), launcher,
                              limits.job_id, procs),
        points=tuple(points + components), model=model, gpu=readings, started=started,
        finished=_now(), profiling_s=round(time.perf_counter() - t0, 2),
        profiler_version=__version__, notes=tuple(notes))
    path = store.save(profile)
    log(f"{PROG}: {fp}: {summary_line(profile)}; {profile.profiling_s:.0f}s; saved {path}")
    return profile


def _fetch_rates(measured: dict[str, Any],
                 script_args: Sequence[str]) -> tuple[FetchRates | None, list[str]]:
    """The memory model's read rates, from the folder the script's dataset reads: the one
    it names itself (ImageFolder's root and the like), else --data, else the first of its
    arguments that is a folder."""
    candidates = [measured.get("data_root") or "", value_of(script_args, ["--data"]) or "",
                  *(a for a in script_args if not a.startswith("-"))]
    folder = next((Path(c) for c in candidates if c and Path(c).is_dir()), None)
    if folder is None:
        return None, ["no data folder found (the dataset names none, no --data, no folder "
                      "among the arguments): memory model off"]
    try:
        return measure_fetch(folder, int(measured.get("dataset_len") or 0) or 1), []
    except (ValueError, OSError) as e:
        return None, [f"data folder {folder}: {e}: memory model off"]


def summary_line(profile: Profile) -> str:
    pts = ", ".join(f"{p.cores}c {p.samples_per_s:.1f}/s" for p in profile.train_points())
    err = profile.model.mean_error
    return f"{pts}; model error {err:.1%}" if err is not None else pts


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    args = build_parser(prog).parse_args(argv)
    try:
        profile_workload(args, log=lambda line: print(line, file=sys.stderr, flush=True))
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return USAGE_EXIT
    except Busy as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return BUSY_EXIT
    except (SynergyError, ValueError, OSError) as e:
        print(f"{prog}: error: {e}; nothing was stored", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
