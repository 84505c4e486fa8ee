"""One measured step: the script run under the probe in an srun step of k cores (or
locally), stopped cleanly, its measurement turned into a profile point."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Sequence

import psutil

from slurm_synergy.model.profile import Point
from slurm_synergy.probe.records import read_result
from slurm_synergy.probe.supervise import command_for, runs_warm
from slurm_synergy.measure.errors import NothingToMeasure, ProfilingError
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
    workdir: Path               # the steps' probe outputs and logs ($SYNERGY_OUTPUT)
    cwd: Path                   # where the script runs: the job's own folder, as in the job
    timeout_s: float
    name: str
    slurm: Slurm
    # Cores of the warm interpreter the steps fork from (probe/warm.py), the most any
    # step asks for; 0: every step a new process, as a job starts its script.
    warm_cores: int = 0
    steps_run: int = 0
    note: str = ""              # why the steps started anew, if a warm start was refused
    _warm: _Warm | None = field(default=None, repr=False)

    def argv(self, step: Step, out: Path, peak_s: float = 0.0) -> list[str]:
        """The probe, then the script with the step's values for the options it declares
        (the probe sets the workers and ends the run whatever the script does); `peak_s`
        seconds of training on after the measured steps, its memory watched."""
        script = [*self.command, *self.script_args]
        if self.workers_option:
            script += [self.workers_option, str(step.workers)]
        if self.iterations_option and not peak_s:   # a backstop only: the probe ends it
            script += [self.iterations_option, str(self.warmup + self.iterations + 1)]
        return [sys.executable, "-m", PROBE, "--mode", step.measure,
                "--workers", str(step.workers), "--warmup", str(self.warmup),
                "--iterations", str(self.iterations), "--time-limit",
                f"{self.first_batch_s:g}", *(["--peak", f"{peak_s:g}"] if peak_s else []),
                "--out", str(out), "--", *script]

    def run(self, step: Step, fresh: bool = False, peak_s: float = 0.0
            ) -> tuple[dict[str, Any], float]:
        """Run one step: its script a fork of the warm interpreter, unless `fresh` or
        none can start, training on `peak_s` seconds past its measurement for its memory;
        the probe's measurement, with "forked" set where the script was one, and the wall
        time. ProfilingError if the step fails or measures nothing."""
        measured, wall = self.run_together((step,), fresh, peak_s)
        return measured[0], wall

    def can_pair(self) -> bool:
        """Whether two steps can share cores: forks of the warm interpreter, or local
        processes (an srun step of its own would get cores of its own)."""
        return self._warm_ready() or self.launcher == "local"

    def run_together(self, steps: Sequence[Step], fresh: bool = False, peak_s: float = 0.0
                     ) -> tuple[list[dict[str, Any]], float]:
        """Run steps at the same time, each on the first of the cores it asks for (so
        two one-core steps share one core); their measurements and the wall time."""
        self.steps_run += 1
        what = steps[0].measure if len(steps) == 1 else "shared"
        folder = self.workdir / f"step{self.steps_run:02d}-{what}-{steps[0].cores}c"
        if folder.exists():
            shutil.rmtree(folder)
        parts = [folder] if len(steps) == 1 else [folder / s.measure for s in steps]
        for part in parts:
            part.mkdir(parents=True)
        argvs = [self.argv(s, part / "probe.json", peak_s) for s, part in zip(steps, parts)]
        logs = [part / "step.log" for part in parts]
        t0 = time.perf_counter()
        # While the warm interpreter runs, it holds the profile's cores and memory (an
        # srun step), so a fresh step starts its script anew from inside it too.
        warm = self._warm_ready()
        rc = self._run_warm(steps, argvs, parts, logs, fork=not fresh) if warm else \
            self._run_new(steps, argvs, parts, logs)
        forked = warm and not fresh
        wall = time.perf_counter() - t0
        return [dict(_result(s, part / "probe.json", rc, log), forked=forked)
                for s, part, log in zip(steps, parts, logs)], wall

    def start(self) -> None:
        """Start the warm interpreter where the steps can fork from it: its imports then
        overlap what the profile does before its first step."""
        if self._warm is None and self.warm_cores and self.procs == 1 and \
                runs_warm(command_for([*self.command, *self.script_args])):
            self._warm = _Warm(self, self.workdir / "warm.log")

    def close(self) -> None:
        """End the warm interpreter, if one was started."""
        if self._warm is not None:
            self._warm.close()
            self._warm = None

    def _warm_ready(self) -> bool:
        """Whether the warm interpreter is up (started now if it was not): where it
        cannot start, every step from then on is a new process, and the note says why."""
        self.start()
        if self._warm is None:
            return False
        try:
            self._warm.wait_ready()
        except NotWarm as e:
            self._warm, self.warm_cores = None, 0
            self.note = f"every step started anew: {e}"
            return False
        return True

    def _run_warm(self, steps: Sequence[Step], argvs: list[list[str]], folders: list[Path],
                  logs: list[Path], fork: bool) -> int:
        assert self._warm is not None
        requests = []
        for step, argv, folder, log in zip(steps, argvs, folders, logs):
            with open(log, "w") as output:
                how = "a fork of" if fork else "started anew from"
                output.write(f"$ (the script {how} the warm interpreter) {' '.join(argv)}\n")
            requests.append({"argv": argv[argv.index(PROBE) + 1:], "cores": step.cores,
                             "fork": fork, "cwd": str(self.cwd), "log": str(log),
                             "gpus": step.gpus,
                             "env": {"SYNERGY_OUTPUT": str(folder),
                                     "SLURM_CPUS_PER_TASK": str(step.cores)}})
        rc = self._warm.step(requests[0] if len(requests) == 1 else {"together": requests},
                             self.timeout_s)
        if rc is None:
            self._warm.kill()
            self._warm = None
            raise self._timed_out(steps[0], logs[0])
        return rc

    def _run_new(self, steps: Sequence[Step], argvs: list[list[str]], folders: list[Path],
                 logs: list[Path]) -> int:
        if len(steps) > 1 and self.launcher == "srun":
            raise ProfilingError("steps that share cores need the warm interpreter or "
                                 "local steps")
        procs = [self._start_new(*args) for args in zip(steps, argvs, folders, logs)]
        deadline = time.monotonic() + self.timeout_s
        codes = []
        for proc, step, log in zip(procs, steps, logs):
            try:
                codes.append(proc.wait(timeout=max(0.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                for other in procs:
                    _stop(other)
                raise self._timed_out(step, log) from None
        return next((c for c in codes if c), 0)

    def _start_new(self, step: Step, argv: list[str], folder: Path,
                   log: Path) -> subprocess.Popen[bytes]:
        # Every step keeps the job's GPUs, the input-only one too: a script that moves its
        # model to CUDA before its loop would fail without one.
        gpus = self.gpus if step.gpus is None else step.gpus
        preexec: Callable[[], None] | None = None
        if self.launcher == "srun":
            argv = self.slurm.step_argv(argv, step.cores, self.mem_mb, gpus, self.name)
        else:
            allowed = sorted(os.sched_getaffinity(0))[:step.cores]
            preexec = lambda: os.sched_setaffinity(0, allowed)  # noqa: E731
        env = dict(self.slurm.env(), SYNERGY_OUTPUT=str(folder))
        if self.launcher != "srun" and gpus != self.gpus:
            # srun gives a step its GPUs; locally, hide the others from the script.
            visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
            env["CUDA_VISIBLE_DEVICES"] = ",".join(visible[:gpus])
        if gpus == 0:       # srun passes the job's CUDA_VISIBLE_DEVICES on to the step
            env["CUDA_VISIBLE_DEVICES"] = ""
        with open(log, "w") as output:
            output.write("$ " + " ".join(argv) + "\n")
            output.flush()
            return subprocess.Popen(argv, cwd=self.cwd, stdout=output, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True, preexec_fn=preexec)

    def _timed_out(self, step: Step, log: Path) -> ProfilingError:
        return ProfilingError(
            f"the {_describe(step)} step ran past its {self.timeout_s:.0f}s limit and was "
            f"stopped: {self.warmup + self.iterations} iterations took longer than that "
            f"(--step-timeout, --max-iterations). Log: {log}")


PROBE = "slurm_synergy.probe"
WARM = "slurm_synergy.probe.warm"
WARM_START_S = 300.0    # to import torch, on a node busy enough to be slow at it


class NotWarm(Exception):
    """The warm interpreter could not start, or should not be forked."""


class _Warm:
    """The warm interpreter a profile's steps fork from: started at its first step, as
    one srun step holding the most cores any step asks for (each step then runs on the
    first k of them), or as one local process pinned to them."""

    def __init__(self, runner: Runner, log: Path) -> None:
        self.log = log
        argv = [sys.executable, "-m", WARM]
        preexec: Callable[[], None] | None = None
        if runner.launcher == "srun":
            argv = runner.slurm.step_argv(argv, runner.warm_cores, runner.mem_mb,
                                          runner.gpus, runner.name)
        else:
            allowed = sorted(os.sched_getaffinity(0))[:runner.warm_cores]
            preexec = lambda: os.sched_setaffinity(0, allowed)  # noqa: E731
        with open(log, "a") as errors:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=errors, env=runner.slurm.env(), text=True,
                                         start_new_session=True, preexec_fn=preexec,
                                         cwd=runner.workdir)
        self.ready = False

    def wait_ready(self) -> None:
        """Until it has imported what the steps need; NotWarm if it will not serve."""
        if self.ready:
            return
        hello = self._line(WARM_START_S)
        if hello is None or not hello.get("ready"):
            self.kill()
            raise NotWarm(hello["why"] if hello and hello.get("why") else
                          f"the warm interpreter did not start (see {self.log})")
        self.ready = True

    def step(self, request: dict[str, Any], timeout_s: float) -> int | None:
        """Run one step; the probe's exit status, or None if it ran past `timeout_s`."""
        stdin, _ = self._pipes()
        try:
            stdin.write(json.dumps(request) + "\n")
            stdin.flush()
        except BrokenPipeError:
            raise self._ended() from None
        reply = self._line(timeout_s)
        if reply is None:
            return None
        if "rc" not in reply:
            raise self._ended()
        return int(reply["rc"])

    def _line(self, timeout_s: float) -> dict[str, Any] | None:
        """The interpreter's next message; None if none came in `timeout_s`, {} if it
        ended or wrote something else."""
        _, stdout = self._pipes()
        ready, _, _ = select.select([stdout], [], [], timeout_s)
        if not ready:
            return None
        try:
            message = json.loads(stdout.readline() or "{}")
        except ValueError:
            return {}
        return message if isinstance(message, dict) else {}

    def close(self) -> None:
        """End the warm interpreter: end of input, then up to 10 s for it to exit, else killed."""
        stdin, _ = self._pipes()
        try:
            stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()

    def kill(self) -> None:
        """The interpreter and every step beneath it (each in a session of its own)."""
        try:
            procs = [psutil.Process(self.proc.pid)]
            procs += procs[0].children(recursive=True)
        except psutil.Error:
            procs = []
        for p in procs:
            try:
                p.kill()
            except psutil.Error:
                pass
        _stop(self.proc)

    def _pipes(self) -> tuple[IO[str], IO[str]]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        return self.proc.stdin, self.proc.stdout

    def _ended(self) -> ProfilingError:
        self.kill()
        return ProfilingError(f"the warm interpreter the steps fork from ended "
                              f"unexpectedly; see {self.log} (--fresh-steps starts every "
                              "step anew)")


def _result(step: Step, out: Path, rc: int, log: Path) -> dict[str, Any]:
    """The probe's measurement of a step; ProfilingError if it failed or measured
    nothing."""
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
        error = NothingToMeasure if result.get("no_step") is True else ProfilingError
        raise error(f"the {_describe(step)} step measured nothing: {result['reason']}{tail}")
    return dict(result["measurement"])


class StepFailed(ProfilingError):
    def __init__(self, step: Step, rc: int, log: Path) -> None:
        self.step, self.rc, self.log = step, rc, log
        tail = _tail(log)
        super().__init__(f"the {_describe(step)} step failed with exit status {rc}; "
                         f"last lines of {log}:\n{tail}")


def _describe(step: Step) -> str:
    what = {"train": "training", "loader": "input-only", "compute": "compute-only",
            "memory": "memory-tracked",
            "shared": "compute-only beside input-only"}[step.measure]
    return f"{what} {step.cores}-core"


def _tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "  (no log)"
    return "\n".join("  " + line for line in text[-lines:])


def _stop(proc: subprocess.Popen[Any]) -> None:
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
        """The measurement's `key` as a number; 0 where it is missing or not one."""
        value = measured.get(key)
        return float(value) if isinstance(value, (int, float)) else 0.0
    return Point(measure=step.measure, cores=step.cores, workers=step.workers * procs,
                 mem_mb=mem_mb, samples_per_s=num("samples_per_s"),
                 data_stall_fraction=num("data_wait_share"),
                 host_cpu_s_per_sample=num("cpu_s_per_sample"),
                 peak_rss_mb=num("peak_rss_mb"), step_s=wall, gpus=step.gpus,
                 peak_pss_mb=num("peak_pss_mb") or None, peak_own_mb=num("peak_own_mb") or None,
                 anon_mb=num("peak_anon_mb") or None,
                 forked=measured.get("forked") is True)
