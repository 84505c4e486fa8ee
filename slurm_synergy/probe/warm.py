"""python -m slurm_synergy.probe.warm: a profile's probe steps, each a fork of one warm
interpreter instead of a new process.

A step's start was most of a profile's cost: a new Python imports torch (2.3-2.5 s on
the 2-core test VM) and, at its first optimizer, torch._dynamo (1.4 s more), before its
first batch. This process imports both once. Each step is a fork of it, given its cores
as a new process in an srun step of that many cores would find them (CPU affinity and
torch's thread count), its environment and its log; in it the probe supervises the
script, itself a fork that runs the script as `python SCRIPT` or `python -m MODULE`
would, as __main__.

Requests are JSON lines on stdin: {"argv": the probe's arguments, "cores": k, "cwd":
folder, "log": file, "env": variables to set, "fork": false to start the script anew
(the profile's first run, whose memory is the job's; inside this step, which holds the
profile's cores and memory, so no second srun step could start)}, or {"together": [such
requests]}: steps run at the same time, each on the first k of the cores (the one-core
pair of measure/offline/steps.py). Each is answered, once its steps have ended, by the line
{"rc": the probe's exit status, the first that is not 0} on stdout. It ends at end of
input.
Its first line on stdout says whether it is ready: {"ready": true}, or {"ready": false,
"why": ...} when forking it would not be safe, and the profile's steps then start anew.
Forking is safe while nothing has run on torch's thread pools and the CUDA driver is
not loaded (a fork cannot use a driver its parent initialised): this process only
imports, with torch's CUDA check made by NVML, and it checks that the driver stayed out.
"""

from __future__ import annotations

import atexit
import json
import os
import random
import runpy
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any

from slurm_synergy.probe import patches
from slurm_synergy.probe.supervise import FORWARDED, runs_warm


class Forked:
    """What the probe's supervisor needs of a Popen, for a script forked from here."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The fork's exit status, None while it runs."""
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the fork to end, at most `timeout` s where given (then TimeoutExpired);
        its exit status."""
        if timeout is None:
            if self.returncode is None:
                self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
            return self.returncode
        deadline = time.monotonic() + timeout
        while (rc := self.poll()) is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired([str(self.pid)], timeout)
            time.sleep(0.05)
        return rc


def start_script(command: list[str], env: dict[str, str],
                 new_session: bool) -> Forked | subprocess.Popen[bytes]:
    """The probe's way to start the script inside a warm step: a fork that runs it."""
    if not runs_warm(command):
        return subprocess.Popen(command, env=env, start_new_session=new_session)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return Forked(pid)
    code = 1
    try:
        if new_session:
            os.setsid()
        # The supervisor's signal handlers are not the script's.
        for sig in FORWARDED:
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.environ.clear()
        os.environ.update(env)
        tempfile.tempdir = None     # found again from TMPDIR: the measurement's own
        random.seed()       # seeded once at import, in this interpreter: not per step
        code = _as_main(command[1:])
    finally:
        os._exit(code)


def _as_main(args: list[str]) -> int:
    """Run `SCRIPT [args]` or `-m MODULE [args]` as __main__, with the probe's hooks; the
    exit status a new interpreter would have ended with."""
    module = args[1] if args[0] == "-m" else None
    # runpy then sets argv[0] to the file it runs, as Python does.
    sys.argv = [args[1], *args[2:]] if module else list(args)
    sys.path[0] = os.getcwd() if module else os.path.dirname(os.path.abspath(args[0]))
    patches.install()
    try:
        if module:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(args[0], run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except BaseException:   # noqa: BLE001 - as the interpreter would: report, status 1
        sys.excepthook(*sys.exc_info())
        code = 1
    # What a new interpreter does on its way out (the probe's record among them); the
    # fork then ends without unwinding into the warm interpreter's loop.
    try:
        atexit._run_exitfuncs()
    except BaseException:   # noqa: BLE001
        traceback.print_exc()
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def _step(request: dict[str, Any]) -> int:
    """One probe step, in a fork of the warm interpreter."""
    os.setsid()
    cpus = sorted(os.sched_getaffinity(0))[:int(request["cores"])]
    os.sched_setaffinity(0, cpus)
    # A new interpreter sizes torch's intra-op pool by the cores it may run on.
    import torch
    torch.set_num_threads(len(cpus))
    null = os.open(os.devnull, os.O_RDONLY)
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    for fd, target in ((0, null), (1, log), (2, log)):
        os.dup2(target, fd)
    os.close(null)
    os.close(log)
    os.chdir(request["cwd"])
    os.environ.update(request["env"])
    if request.get("gpus") is not None:     # fewer than the interpreter's: the first n
        visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(visible[:int(request["gpus"])])
    from slurm_synergy.probe.__main__ import main
    return main(request["argv"], start=start_script if request.get("fork", True) else None)


def warm_up() -> str:
    """Import what every step would import (torch, and the torch._dynamo its first
    optimizer brings in); '' when this interpreter may then be forked, else why not."""
    nvml = os.environ.get(NVML_CHECK)
    os.environ[NVML_CHECK] = "1"    # torch.cuda.is_available() without the driver
    try:
        import torch  # noqa: F401
        import torch._dynamo  # noqa: F401
    except Exception as e:  # noqa: BLE001 - the steps then start anew, and say why
        return f"torch could not be imported ({type(e).__name__}: {e})"
    finally:
        if nvml is None:
            os.environ.pop(NVML_CHECK, None)
        else:
            os.environ[NVML_CHECK] = nvml
    with open("/proc/self/maps", encoding="ascii", errors="replace") as fh:
        if any("libcuda.so" in line for line in fh):
            return "importing torch loaded the CUDA driver, which a fork could not use"
    return ""


NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"


def _reply(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def serve() -> int:
    """Warm up, say whether ready, then run each request's steps and answer with their status;
    returns 1 when not ready, 0 at end of input."""
    why = warm_up()
    _reply({"ready": not why, "why": why})
    if why:
        return 1
    while line := sys.stdin.readline():
        request = json.loads(line)
        pids = [_fork_step(part) for part in request.get("together") or [request]]
        codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
        _reply({"rc": next((c for c in codes if c), 0)})
    return 0


def _fork_step(request: dict[str, Any]) -> int:
    """One step in a fork of this interpreter; its pid."""
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = _step(request)
        except BaseException:   # noqa: BLE001 - into the step's log; the reply says it
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return pid


if __name__ == "__main__":
    sys.exit(serve())
