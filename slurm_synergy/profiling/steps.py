"""One measured step: the script run under the probe in an srun step of k cores (or
locally), stopped cleanly, its measurement turned into a profile point."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from slurm_synergy.model.profile import Point
from slurm_synergy.probe.records import read_result
from slurm_synergy.profiling.errors import ProfilingError
from slurm_synergy.slurm import Slurm


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
        if gpus == 0:       # srun passes the job's CUDA_VISIBLE_DEVICES on to the step
            env["CUDA_VISIBLE_DEVICES"] = ""
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
    what = {"train": "training", "loader": "input-only", "compute": "compute-only",
            "memory": "memory-tracked"}[step.measure]
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


LEAST_ITERATIONS = 5     # a window shorter than this says little about a step's rate
FIRST_ITERATIONS = 10    # the first step's, whose rate sets the window of the rest


def window_iterations(measured: dict[str, Any], window_s: float, most: int) -> int:
    """Measured iterations that fill about `window_s` seconds at the rate of a step just
    run: slow workloads get fewer (the profile's cost stays near its share of the job),
    never fewer than LEAST_ITERATIONS nor more than `most`. A count, not a deadline, so
    every rank of a DDP job stops at the same step."""
    steps, seconds = measured.get("steps"), measured.get("seconds")
    if not isinstance(steps, (int, float)) or not isinstance(seconds, (int, float)) \
            or steps <= 0 or seconds <= 0:
        return most
    return max(min(most, LEAST_ITERATIONS), min(most, round(window_s * steps / seconds)))


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
                 peak_rss_mb=num("peak_rss_mb"), step_s=wall, gpus=step.gpus,
                 anon_mb=num("peak_anon_mb") or None)
