"""Profile a training workload inside its Slurm allocation, as Synergy's optimistic profiler
does, and store the profile under the workload's fingerprint.

    python profiler/offline_profiler.py [profiler options] SCRIPT [script args]
    synergy profile [profiler options] SCRIPT [script args]          (the same)

Each measurement is an `srun` step of the current allocation, held by Slurm's cgroups to
k cores. CPU sensitivity is swept: the full allocation first, then half the cores while
throughput stays within --plateau of the best (Synergy's search). The throughput model is
fitted to an input-only and a compute-only step, so every swept point checks it. Memory
sensitivity is modelled (DS-Analyzer), from the dataset's size and the page-cache and
storage read rates measured here. GPUs are read through NVML while the widest step runs.

The script is run with --batch, --workers, --max-iterations (the profiler's values win
over the script's own) and, for the component steps, --measure loader|compute; it writes
summary.json (samples_per_s, ...) to its working folder, as profiler/train.py does.
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
import re
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
from slurm_synergy.errors import SynergyError
from slurm_synergy.gpu import Gpu, GpuError
from slurm_synergy.gpu.sampler import Sampler
from slurm_synergy.hooks.power import ceiling_mw
from slurm_synergy.jobspec import BUILTIN_SCRIPT as BUILTIN
from slurm_synergy.paths import TRAIN_SCRIPT
from slurm_synergy.plugin.policy import load_policy
from slurm_synergy.profile import (Allocation, FetchRates, GpuReadings, Point, PowerPoint,
                                   Profile, ProfileError, ProfileStore, ThroughputModel)
from slurm_synergy.slurm import Slurm
from slurm_synergy.throughput import fit_components, fit_end_to_end, workers_for

PROG = "offline_profiler"
# Options of the script the profiler sets itself; its values replace the script's.
CONTROLLED = {"--batch": ("-b",), "--workers": ("-j",), "--max-iterations": (),
              "--measure": (), "--output": (), "--warmup": ()}
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


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is below 1")
    return value


def _memory_mb(text: str) -> int:
    """Slurm's size syntax: 4096 (MB), 4096M, 16G, 1T."""
    m = re.fullmatch(r"(\d+)([MGT]?)B?", text.strip().upper())
    if not m or int(m.group(1)) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a memory size (e.g. 16G, 4096M)")
    return int(m.group(1)) * {"": 1, "M": 1, "G": 1024, "T": 1024**2}[m.group(2)]


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = _Parser(prog=prog, description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    add = p.add_argument
    add("--num-gpus", type=int, help="GPUs per step (default: all of the allocation's)")
    add("--nnodes", type=_positive_int, default=1, help="nodes (profiling uses one)")
    add("--cpu", type=_positive_int, help="most cores to sweep (default: the allocation's)")
    add("--memory", type=_memory_mb, help="memory per step, e.g. 16G (default: the "
        "allocation's)")
    add("-b", "--batch", type=_positive_int, help="batch size (wins over the script's)")
    add("--max-iterations", type=_positive_int, default=20,
        help="iterations per step (default %(default)s)")
    add("--warmup", type=int, default=3,
        help="first iterations of each step left out (built-in trainer; default %(default)s)")
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

def strip_options(argv: Sequence[str], controlled: dict[str, tuple[str, ...]]) -> list[str]:
    """The script's arguments without the options the profiler sets itself."""
    names = {n: long for long, shorts in controlled.items() for n in (long, *shorts)}
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in names:
            skip = True     # "--batch 64": the value goes too
            continue
        if arg.startswith("--") and arg.split("=", 1)[0] in names:
            continue        # "--batch=64"
        if re.fullmatch(r"-[bj]\d+", arg):
            continue        # "-b64"
        out.append(arg)
    return out


def option_value(argv: Sequence[str], *names: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg in names and i + 1 < len(argv):
            return argv[i + 1]
        for n in names:
            if arg.startswith(n + "="):
                return arg.split("=", 1)[1]
    return None


def resolve_script(script: str) -> list[str]:
    """The command that starts the script."""
    if script == BUILTIN:
        return [sys.executable, str(TRAIN_SCRIPT)]
    path = Path(script).expanduser()
    if not path.exists():
        raise UsageError(f"training script {path} does not exist")
    if path.is_dir():
        raise UsageError(f"training script {path} is a folder, not a script")
    path = path.resolve()
    if path.suffix == ".py":
        return [sys.executable, str(path)]
    if not os.access(path, os.X_OK):
        raise UsageError(f"training script {path} is not executable (chmod +x, or a .py file)")
    return [str(path)]


def default_fingerprint(script: str, args: Sequence[str], batch: int, gpus: int) -> str:
    key = {"script": script, "args": list(args), "batch": batch, "gpus": gpus}
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
    workers: int
    gpus: int | None = None     # None: all of the allocation's GPUs


@dataclass
class Runner:
    command: list[str]          # how to start the script
    script_args: list[str]      # its arguments, controlled options removed
    builtin: bool
    batch: int | None
    iterations: int
    warmup: int
    mem_mb: int
    gpus: int
    launcher: str               # srun | local
    workdir: Path
    timeout_s: float
    name: str
    slurm: Slurm
    steps_run: int = 0

    def argv(self, step: Step) -> list[str]:
        argv = [*self.command, *self.script_args,
                "--workers", str(step.workers), "--max-iterations", str(self.iterations)]
        if self.batch is not None:
            argv += ["--batch", str(self.batch)]
        if step.measure != "train":
            argv += ["--measure", step.measure]
        if self.builtin:
            argv += ["--warmup", str(self.warmup)]
        return argv

    def run(self, step: Step) -> tuple[dict[str, Any], float]:
        """Run one step; its summary and wall time. ProfilingError if it fails."""
        self.steps_run += 1
        folder = self.workdir / f"step{self.steps_run:02d}-{step.measure}-{step.cores}c"
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        argv = self.argv(step)
        gpus = 0 if step.measure == "loader" else self.gpus if step.gpus is None else step.gpus
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
        with open(log, "w") as out:
            out.write("$ " + " ".join(argv) + "\n")
            out.flush()
            proc = subprocess.Popen(argv, cwd=folder, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True, preexec_fn=preexec)
            try:
                rc = proc.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                _stop(proc)
                raise ProfilingError(
                    f"the {_describe(step)} step ran past its {self.timeout_s:.0f}s limit and "
                    f"was stopped; does the script honour --max-iterations? Log: {log}"
                ) from None
        wall = time.perf_counter() - t0
        if rc != 0:
            raise StepFailed(step, rc, log)
        summary_path = folder / "summary.json"
        try:
            summary = json.loads(summary_path.read_text())
            speed = float(summary["samples_per_s"])
        except FileNotFoundError:
            raise ProfilingError(f"the {_describe(step)} step exited 0 but wrote no "
                                 f"{summary_path.name} in its folder {folder}: the script "
                                 "must write its throughput there (see README)") from None
        except (ValueError, KeyError, TypeError) as e:
            raise ProfilingError(f"{summary_path} is not a usable summary ({e})") from None
        if not speed > 0:
            raise ProfilingError(f"the {_describe(step)} step measured no throughput "
                                 f"(samples_per_s={speed}); see {log}")
        return summary, wall


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


def to_point(step: Step, summary: dict[str, Any], wall: float, mem_mb: int) -> Point:
    def num(key: str, default: float = 0.0) -> float:
        value = summary.get(key, default)
        return float(value) if isinstance(value, (int, float)) else default
    return Point(measure=step.measure, cores=step.cores, workers=step.workers, mem_mb=mem_mb,
                 samples_per_s=num("samples_per_s"),
                 data_stall_fraction=num("data_stall_fraction"),
                 host_cpu_s_per_sample=num("host_cpu_s_per_sample"),
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
        cap_w = load_policy().power_cap_w
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
    script_args: list[str]
    builtin: bool
    limits: Limits
    launcher: str
    top: int                    # most cores swept
    mem_mb: int
    gpus: int
    batch: int | None           # the profiler's -b, which wins over the script's
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
    command = resolve_script(args.script)
    script_args = strip_options(args.script_args, CONTROLLED)
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
    script_batch = option_value(args.script_args, "--batch", "-b")
    record_batch = args.batch or (int(script_batch) if script_batch and script_batch.isdigit()
                                  else 0)
    fp = args.fingerprint or default_fingerprint(args.script, script_args, record_batch, ngpus)
    store = ProfileStore(args.store.resolve()) if args.store else ProfileStore.default()
    try:
        store.path(fp)
    except SynergyError as e:
        raise UsageError(str(e)) from None
    return Plan(fp, store, command, script_args, args.script == BUILTIN, limits, launcher,
                top, mem_mb, ngpus, args.batch, record_batch)


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
    from slurm_synergy.plugin.table import sync

    try:
        log(f"{PROG}: {sync()}")
    except SynergyError as e:
        log(f"{PROG}: decision table not updated: {e}")


def _profile(args: argparse.Namespace, plan: Plan, log: Callable[[str], None]) -> Profile:
    fp, store, limits, top, mem_mb = (plan.fingerprint, plan.store, plan.limits, plan.top,
                                      plan.mem_mb)
    builtin, launcher, ngpus = plan.builtin, plan.launcher, plan.gpus
    workdir = (args.workdir or Path.cwd() / f"synergy-profile-{fp}").resolve()
    workdir.mkdir(parents=True, exist_ok=True)

    runner = Runner(command=plan.command, script_args=plan.script_args, builtin=builtin,
                    batch=plan.batch,
                    iterations=args.max_iterations, warmup=args.warmup, mem_mb=mem_mb,
                    gpus=ngpus, launcher=launcher, workdir=workdir,
                    timeout_s=args.step_timeout, name=f"profile-{fp}", slurm=Slurm())
    started, t0 = _now(), time.perf_counter()
    where = f"job {limits.job_id}" if limits.job_id else socket.gethostname()
    log(f"{PROG}: profiling {fp} ({args.job_name or args.script}) on {where}: up to {top} "
        f"cores, {mem_mb}M, {ngpus} GPU(s), {args.max_iterations} iterations per step, "
        f"{launcher} steps; logs in {workdir}")
    gpus, gpu_reason = open_gpus() if ngpus else ([], "the job has no GPU")
    gpus = gpus[:ngpus]
    points: list[Point] = []
    summaries: dict[int, dict[str, Any]] = {}
    # The most steps the sweep can take: log2(top) + 1 training steps, two components
    # and one on a single GPU.
    bar = tqdm(total=top.bit_length() + 2 + (ngpus >= 2), desc=f"profile {fp[:8]}", unit="step",
               file=sys.stderr, disable=None)
    sampler: Sampler | None = None

    def measure(k: int) -> float:
        nonlocal sampler
        step = Step("train", k, workers_for(k))
        bar.set_postfix_str(f"{k} cores")
        if k == top and gpus:
            with Sampler(gpus) as sampler:
                summary, wall = runner.run(step)
        else:
            summary, wall = runner.run(step)
        summaries[k] = summary
        points.append(to_point(step, summary, wall, mem_mb))
        advance(f"{k} cores, {workers_for(k)} workers: {points[-1].samples_per_s:.1f} "
                f"samples/s ({wall:.0f}s)")
        return points[-1].samples_per_s

    def advance(line: str) -> None:
        bar.update(1)
        if bar.disable:         # a batch log: a line per step instead of a redrawn bar
            log(f"{PROG}: step {runner.steps_run}: {line}")

    try:
        core_sweep(top, measure, args.plateau)
        train = [p for p in points if p.measure == "train"]
        first = summaries[top]
        data = option_value(plan.script_args, "--data")
        fetch: FetchRates | None = None
        notes: list[str] = []
        if data and Path(data).exists():
            samples = int(first.get("dataset_samples") or 0)
            fetch = measure_fetch(Path(data), samples or 1)
        else:
            notes.append("no --data folder among the script's arguments: memory model off")
        components: list[Point] = []
        try:
            # Each component as the training steps run it: one loader worker with a core
            # of its own (the training process on the other), and the training process on
            # one core, as workers_for leaves it. Measured on more threads, its CPU time
            # per sample would count the threads' spinning too.
            for step in (Step("loader", 2, 1), Step("compute", 1, 0)):
                bar.set_postfix_str(f"{step.measure} only")
                summary, wall = runner.run(step)
                components.append(to_point(step, summary, wall, mem_mb))
                advance(f"{step.measure} only, {step.cores} cores: "
                        f"{components[-1].samples_per_s:.1f} samples/s ({wall:.0f}s)")
        except StepFailed as e:
            if e.rc != USAGE_EXIT or builtin:
                raise
            notes.append("the script does not take --measure loader|compute: the model is "
                         "fitted to the training steps alone")
            components = []
        if ngpus >= 2:
            # Would fewer GPUs do? The best core count again, on one GPU.
            best = max(train, key=lambda pt: pt.samples_per_s)
            step = Step("train", best.cores, best.workers, gpus=1)
            bar.set_postfix_str("1 GPU")
            summary, wall = runner.run(step)
            points.append(to_point(step, summary, wall, mem_mb))
            advance(f"{best.cores} cores on 1 of {ngpus} GPUs: "
                    f"{points[-1].samples_per_s:.1f} samples/s ({wall:.0f}s)")
        if components:
            model: ThroughputModel = fit_components(components[0], components[1], train,
                                                    on_gpu=bool(gpus), fetch=fetch)
        else:
            model = fit_end_to_end(train, fetch)
        readings = gpu_readings(sampler, gpu_reason, gpus, first)
        if gpus and args.power_sweep == "auto":
            bar.set_postfix_str("power limits")
            readings = power_sweep(runner, Step("train", top, workers_for(top)), gpus, readings)
    finally:
        bar.close()
    profile = Profile(
        fingerprint=fp, job_name=args.job_name,
        command=tuple([args.script, *plan.script_args]), batch=plan.record_batch, allocation=Allocation(top, mem_mb, ngpus, socket.gethostname(),
                                                  launcher, limits.job_id),
        points=tuple(points + components), model=model, gpu=readings, started=started,
        finished=_now(), profiling_s=round(time.perf_counter() - t0, 2),
        profiler_version=__version__, notes=tuple(notes))
    path = store.save(profile)
    log(f"{PROG}: {fp}: {summary_line(profile)}; {profile.profiling_s:.0f}s; saved {path}")
    return profile


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
