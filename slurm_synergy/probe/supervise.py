"""The probe's parent process: start the command with the hooks, bound it, judge it.

It never imports torch. While a measurement runs it wakes twice a second to read the
processes' records and the process tree's memory (ten times a second once measured, for
the seconds the config's peak_s gives the script to train on); in watch mode it only
waits for the script to end, so a real run pays nothing for it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Protocol

import psutil

from slurm_synergy.probe.records import (BOOT, ENV_CONFIG, ENV_DIR, LEAST_STEPS, ProbeConfig,
                                         ProbeResult, ProcessRecord, measure,
                                         probe_dir_of, read_records)
from slurm_synergy.probe.task import ENV_ANCHOR, ENV_PYTHON
from slurm_synergy.probe.tree import ProcessTree

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
WATCH_FORWARDED = (signal.SIGUSR1, signal.SIGUSR2)
MEASURED_GRACE_S = 5.0      # after every process measured, before ending the script
# A peak is a maximum over time, and a fast script's loader worker lives half a second
# an epoch: looks seconds apart miss it (a Synergy-style job read twice a second came to
# 334-365 MB, its whole runs peak at 388-400). Both profiles read the job's memory ten
# times a second for PEAK_S at its full size: the offline profile's first run trains on
# that long past its measurement, the run's sweep ends with it (docs/profiling.md).
PEAK_S = 3.0
PEAK_LOOK_S = 0.1


def command_for(argv: list[str]) -> list[str]:
    """A Python script runs with this interpreter; anything else (torchrun, srun, a
    program) as given: the hooks reach every Python process it starts."""
    if argv[0].endswith(".py"):
        return [sys.executable, *argv]
    return list(argv)


def runs_warm(command: list[str]) -> bool:
    """Whether the script `command` starts can run as a fork of a warm interpreter
    (probe/warm.py): this Python on a .py file or a module, with no flags of its own."""
    return len(command) >= 2 and command[0] == sys.executable and (
        command[1].endswith(".py") or (command[1] == "-m" and len(command) >= 3))


def script_name(argv: list[str]) -> str:
    """What the messages call the script: the first .py of the command, else the module
    of `python -m MODULE`, else the command."""
    script = next((a for a in argv if a.endswith(".py")), None)
    if script is None and "-m" in argv[1:-1]:
        script = argv[argv.index("-m") + 1]
    return script or argv[0]


def _kill(proc: Started, grace: float = 5.0) -> None:
    """End the command and everything beneath it. By the tree, not the process group:
    torchrun puts each rank in a session of its own."""
    try:
        procs = [psutil.Process(proc.pid)]
        procs += procs[0].children(recursive=True)
    except psutil.Error:
        procs = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)


class Started(Protocol):
    """The script's process as the supervisor sees it (a Popen, or a warm fork)."""

    pid: int

    def poll(self) -> int | None:
        """The exit status, None while it runs."""

    def wait(self, timeout: float | None = None) -> int:
        """Wait for it to end (at most `timeout` s, where given); its exit status."""


Start = Callable[[list[str], dict[str, str], bool], Started]
# Watch mode: what the supervisor does while the real run trains (measure/inrun/supervisor.py
# measures it), given the run's process and its records' folder; it returns by the time
# the run ends. Whatever it raises is logged and costs the run nothing.
During = Callable[[Started, Path], None]


def _popen(command: list[str], env: dict[str, str], new_session: bool) -> Started:
    return subprocess.Popen(command, env=env, start_new_session=new_session)


def _all_measured(records: list[ProcessRecord]) -> bool:
    iterating = [r for r in records if r.batches]
    return bool(iterating) and all(r.state == "measured" for r in iterating)


def run(config: ProbeConfig, argv: list[str], out: Path, time_limit_s: float,
        start: Start | None = None, during: During | None = None) -> ProbeResult:
    """Run `argv` probed; write the result to `out` and return it. `start` starts the
    script (a new process; a profile's warm steps fork it instead, probe/warm.py);
    `during` runs beside a watched run."""
    folder = probe_dir_of(out)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BOOT), env.get("PYTHONPATH")) if p)
    env[ENV_DIR], env[ENV_CONFIG] = str(folder), config.to_env()
    # This supervisor is the command's: nothing beneath it starts one of its own, even
    # where the node's TaskProlog made this process a task-mode anchor (probe/task.py).
    for name in (ENV_ANCHOR, ENV_PYTHON):
        env.pop(name, None)
    watch = config.mode == "watch"
    scratch = None if watch else _scratch()
    if scratch is not None:
        env["TMPDIR"] = scratch
    # A measurement runs in a session of its own, so that it can be ended whole. The
    # user's real run stays in the job's process group: Slurm's SIGTERM (cancel, time
    # limit) reaches every process of the step already, so only the signals Slurm sends
    # the batch shell alone (--signal=B:USR1@T) are passed on; passing SIGTERM on too
    # would make a script's handler (a checkpoint) run twice.
    proc = (start or _popen)(command_for(argv), env, not watch)
    forwarded = WATCH_FORWARDED if watch else FORWARDED
    forward = {sig: signal.signal(sig, lambda s, _f: _signal(proc, s, watch))
               for sig in forwarded}
    if watch:
        ignored = {sig: signal.signal(sig, signal.SIG_IGN) for sig in FORWARDED
                   if sig not in forwarded}
        forward.update(ignored)
    tree = ProcessTree(proc.pid)
    started, timed_out, measured_at = time.monotonic(), False, None
    try:
        # Watch mode is the user's real run: block until it ends, no wake-ups at all.
        # A measurement is bounded and needs the tree's memory: look twice a second.
        while not watch and proc.poll() is None:
            # Measured and trained on for peak_s, the script is ending: processes being
            # torn down can read hundreds of MB more than they hold (docs/profiling.md,
            # memory over a whole run). Those looks are not taken.
            now = time.monotonic()
            if measured_at is None or now - measured_at <= config.peak_s:
                tree.look()
            records = read_records(folder)
            if now - started > time_limit_s and not any(r.batches for r in records):
                timed_out = True
                _kill(proc)
                break
            # Measured, but the script goes on (its loader was read by another thread,
            # or a thread keeps it alive): it has had its chance to end itself.
            if measured_at is None and _all_measured(records):
                measured_at = now
            elif measured_at is not None and \
                    now - measured_at > config.peak_s + MEASURED_GRACE_S:
                _kill(proc)
                break
            time.sleep(PEAK_LOOK_S if measured_at is not None and config.peak_s else 0.5)
        if watch and during is not None:
            try:
                during(proc, folder)
            except Exception as e:      # noqa: BLE001 - never the run's fault
                print(f"probe: measuring the run stopped: {type(e).__name__}: {e}",
                      file=sys.stderr)
        rc = proc.wait()
        if not watch:
            _kill(proc, grace=2.0)      # workers or children the script left running
    finally:
        for sig, handler in forward.items():
            signal.signal(sig, handler)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    try:
        records = read_records(folder)
        shutil.rmtree(folder, ignore_errors=True)
        result = judge(config, argv, rc, records, tree, time_limit_s if timed_out else None)
        result.write(out)
    except Exception as e:      # noqa: BLE001 - the run's verdict must not cost a job its
        if not watch:           # own exit status
            raise
        print(f"probe: the run was not recorded: {e}", file=sys.stderr)
        result = ProbeResult(False, f"not recorded: {e}", script_name(argv), config.mode, rc,
                             None, [], [])
    return result


def _scratch() -> str | None:
    """A temporary folder of the measurement's own, for the script's TMPDIR. A script the
    probe ends mid-epoch has its loader workers terminated by multiprocessing at exit,
    and each leaves its socket folder behind (/tmp/pymp-*): one a step, a thousand a day
    of profiling. None where the folder's path would be too long for those sockets' own
    (AF_UNIX paths end at 107 bytes; multiprocessing adds about 32)."""
    path = tempfile.mkdtemp(prefix="synergy-probe-")
    if len(path) > 64:
        os.rmdir(path)
        return None
    return path


def watch_exit(result: ProbeResult) -> int:
    """The exit status of a watched run: the user's job's own, whatever the probe saw; a
    script ended by a signal ends the probe by the same signal, so that Slurm records
    the job as such."""
    rc = result.exit_status or 0
    if rc < 0:
        signal.signal(-rc, signal.SIG_DFL)
        os.kill(os.getpid(), -rc)
        return 128 - rc
    return rc


def _signal(proc: Started, sig: int, watch: bool) -> None:
    with contextlib.suppress(ProcessLookupError):
        if watch:
            os.kill(proc.pid, sig)
        else:
            os.killpg(proc.pid, sig)


def judge(config: ProbeConfig, argv: list[str], rc: int, records: list[ProcessRecord],
          tree: ProcessTree, timed_out_after: float | None) -> ProbeResult:
    """The run's result from its exit status and records: ok, or the one-line reason nothing
    was measured."""
    script = script_name(argv)
    no_step = False         # it ran without a step the probe sees: a rerun measures none
    measurement = measure(records, tree.memory())
    unprobed = tree.unprobed({r.pid for r in records})
    took = max((r.batches for r in records), default=0)
    errors = [r.error for r in records if r.error]
    reason = ""
    # A script that hands its training to processes the hooks never reached: said so
    # whether they ended in time or were still starting when the step was stopped (on a
    # busy node a child's imports alone can outlast the step).
    spawned = (f"{script} took no batch in its own processes; it started processes the "
               f"probe cannot follow ({'; '.join(unprobed)}): launch the ranks with torchrun "
               "or srun, or keep the training loop in the script")
    if config.mode == "watch":
        if measurement is None:
            reason = f"{script}: no measured step (it took {took} batch(es))"
    elif timed_out_after is not None:
        no_step = True
        reason = (f"{spawned} (stopped after {timed_out_after:.0f}s)" if unprobed else
                  f"{script} took no batch from a PyTorch DataLoader or a DALI iterator, "
                  f"stepped no optimizer and ran no backward pass in {timed_out_after:.0f}s "
                  "and was stopped; "
                  "the probe measures training loops")
    elif all(r.state != "measured" for r in records):
        if took and errors:
            reason = f"{script} failed after {took} batch(es): {errors[0]}"
        elif (config.mode == "train" and rc == 0 and measurement is not None
              and measurement.steps >= LEAST_STEPS):
            pass    # a script shorter than the plan, ended on its own: measured on its steps
        elif took:
            reason = (f"{script} ended after {took} batch(es), before the probe's "
                      f"{config.warmup} warm-up and {config.iterations} measured ones: give "
                      "it more data or epochs, or measure fewer iterations")
        elif errors:
            reason = f"{script} failed before its first batch: {errors[0]}"
        elif rc != 0:
            reason = f"{script} exited with status {rc} before its first batch (see its output)"
        elif unprobed:
            no_step, reason = True, spawned
        else:
            no_step = True
            reason = (f"{script} ended without taking a batch from a PyTorch DataLoader or a "
                      "DALI iterator, stepping an optimizer or running a backward pass: "
                      "nothing to measure (a forward-only loop has no training step)")
    return ProbeResult(ok=not reason, reason=reason, script=script, mode=config.mode,
                       exit_status=rc, measurement=measurement, processes=records,
                       started_processes=unprobed, no_step=no_step)
