"""Task mode: the probe in the Python processes of a task that the node's TaskProlog
reached (etc/task_prolog.sh.j2), where nothing of ours started them: a plain batch
script's `python train.py`, `srun python`, `torchrun`, `python -m package`.

The first such process of a process tree (the anchor: the script, or torchrun) gives its
tree a records folder and the probe's configuration in the environment, which every
process it starts inherits, so that all of them record their steps as they do under the
supervisor (probe/supervise.py). The first of them to take a batch starts the supervisor
beside the tree (measure/inrun/attach.py, with the installation's interpreter), which does
what the in-run wrapper does beside a command it starts: measures the job if the plugin
marked it, follows its memory otherwise, and writes its result for the reports. A marked
tree that never takes a step says so at its exit, where it ran long enough to be held
(measure/inrun/no_step.py).

Runs in the user's interpreter, before their script: standard library only, and nothing
here may fail or change the user's process. A fault leaves it unprobed, with one line on
its standard error.
"""

from __future__ import annotations

import atexit
import os
import re
import sys
import time

from slurm_synergy.model.comment import FINGERPRINT
from slurm_synergy.probe.records import (BOOT, ENV_CONFIG, ENV_DIR, RECORD_S, WATCH_RECORD_S,
                                         ProbeConfig)

# What the job's environment says (the plugin wrote it at submission).
ENV_FINGERPRINT = "SYNERGY_FINGERPRINT"     # its workload key
ENV_PROFILE = "SYNERGY_PROFILE"             # "1": no decision yet, measure it in the run
ENV_WORKERS = "SYNERGY_WORKERS"             # the decision's data-loader workers
ENV_PLAIN = "SYNERGY_PLAIN"                 # a plain script's key again: task mode is for it
# What the TaskProlog adds: the installation's interpreter, which runs the supervisor.
ENV_PYTHON = "SYNERGY_TASK_PYTHON"
# What the anchor adds for its tree: its pid, which the supervisor follows.
ENV_ANCHOR = "SYNERGY_TASK_ANCHOR"
# In the records folder: created once, by the process that starts the supervisor; the
# supervisor's pid, once it runs; the anchor's last moments (see _end).
SUPERVISOR_MARK = "supervisor"
SUPERVISING = "supervising"
ENDING = "ending"
# The longest the anchor waits at its exit for its supervisor to write the run's result:
# when the batch script ends, Slurm ends every process left in the job, the supervisor's
# too, so it must finish while the anchor is still there.
END_WAIT_S = 10.0
ATTACH_MODULE = "slurm_synergy.measure.inrun.attach"
NO_STEP_MODULE = "slurm_synergy.measure.inrun.no_step"
# A marked tree that ended sooner without a step starts nothing at its exit: no policy
# waits less for a first step (model/policy.py's least first_batch_timeout_s), and a
# helper (`python -c ...`, in a loop of a batch script) is not worth an interpreter.
NO_STEP_FLOOR_S = 5.0
_FINGERPRINT = re.compile(FINGERPRINT)


def anchor() -> bool:
    """Make this process the anchor of a probed tree, where the TaskProlog reached it and
    no supervisor or anchor above it probes it already. False where not."""
    env = os.environ
    key = env.get(ENV_FINGERPRINT, "")
    if env.get(ENV_DIR) or not env.get(ENV_PYTHON) or not _FINGERPRINT.fullmatch(key) \
            or env.get(ENV_PLAIN) != key:
        return False
    marked = env.get(ENV_PROFILE) == "1"
    workers = env.get(ENV_WORKERS, "")
    # Controlled: the supervisor may sweep its cores, or only slow its records down.
    config = ProbeConfig(mode="watch", workers=int(workers) if workers.isdigit() else None,
                         interval_s=RECORD_S if marked else WATCH_RECORD_S, controlled=True)
    # A fresh folder of its own, as mkdtemp makes one (mkdir fails on a name someone
    # planted); without the imports mkdtemp costs every Python process of the task.
    folder = os.path.join(env.get("TMPDIR") or "/tmp", f"synergy-{env.get('SLURM_JOB_ID', '')}-"
                          f"{os.getpid()}-{os.urandom(6).hex()}")
    try:
        os.mkdir(folder, 0o700)
    except OSError as e:
        print(f"slurm-synergy probe: not watching this process: {e}", file=sys.stderr)
        return False
    env[ENV_DIR], env[ENV_CONFIG], env[ENV_ANCHOR] = folder, config.to_env(), str(os.getpid())
    atexit.register(_end, folder, os.getpid(), marked, time.monotonic())
    return True


def _end(folder: str, anchor_pid: int, marked: bool, started: float) -> None:
    """At the anchor's exit: where its supervisor runs, tell it the run is ending and give
    it up to END_WAIT_S to finish (it removes the folder); else remove the folder. A
    marked tree that started no supervisor (took no step) may be held (_no_step)."""
    if os.getpid() != anchor_pid:
        return          # a child forked from the anchor, exiting: not the run's end
    # A folder gone before its time (the supervisor's, after a TERM) counts as stepped.
    stepped = os.path.exists(os.path.join(folder, SUPERVISOR_MARK)) or not os.path.isdir(folder)
    try:
        with open(os.path.join(folder, SUPERVISING)) as f:
            pid = int(f.read().strip() or 0)
        open(os.path.join(folder, ENDING), "w").close()
    except (OSError, ValueError):
        pid = 0
    deadline = time.monotonic() + END_WAIT_S
    while pid and os.path.isdir(folder) and time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    if os.path.isdir(folder) and not (pid and _alive(pid)):
        import shutil
        shutil.rmtree(folder, ignore_errors=True)
    ran_s = time.monotonic() - started
    if marked and not stepped and ran_s >= NO_STEP_FLOOR_S:
        _no_step(anchor_pid, ran_s)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True         # someone else's: alive, not ours to signal
    return True


def start_supervisor() -> None:
    """Start the supervisor beside this tree, unless a process of it has (the first to
    take a batch does). Outside the tree: a shell puts it in the background and ends, so
    that the supervisor is no descendant of the processes it holds to fewer cores or
    whose memory it reads. Never raises."""
    env = os.environ
    pid, folder, python = env.get(ENV_ANCHOR), env.get(ENV_DIR), env.get(ENV_PYTHON)
    if not (pid and folder and python):
        return
    try:
        os.close(os.open(os.path.join(folder, SUPERVISOR_MARK),
                         os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except OSError:
        return          # another process of the tree started it
    import subprocess
    # Its log lines go where the script's do (the job's log, or srun's pipe to it); it
    # lets go of a pipe once the tree has ended (measure/inrun/attach.py).
    try:
        subprocess.run(["/bin/sh", "-c", 'exec "$@" </dev/null >/dev/null &', "sh", python,
                        "-I", "-m", ATTACH_MODULE, "--anchor", pid, "--folder", folder],
                       env=_installation_env(), cwd="/", timeout=10, check=True,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=_err(),
                       start_new_session=True)
    except (OSError, subprocess.SubprocessError) as e:
        print(f"slurm-synergy probe: its supervisor did not start ({e}); this run is not "
              "measured", file=sys.stderr)


def _no_step(anchor_pid: int, ran_s: float) -> None:
    """Start the installation's interpreter to hold the workload of this marked tree,
    which ran `ran_s` seconds without a step, and wait for it (up to END_WAIT_S): its
    one line goes to the job's log. Never raises, never waits longer: one stuck on a
    stalled file system is killed and left (a wait for it could outlast the kill)."""
    python = os.environ.get(ENV_PYTHON)
    if not python:
        return
    import subprocess
    try:
        child = subprocess.Popen([python, "-I", "-m", NO_STEP_MODULE, "--anchor",
                                  str(anchor_pid), "--ran", f"{ran_s:.1f}"],
                                 env=_installation_env(), cwd="/", stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=_err())
    except OSError:
        return          # not held: its next job is marked again, nothing worse
    try:
        child.wait(timeout=END_WAIT_S)
    except subprocess.TimeoutExpired:
        child.kill()


def _installation_env() -> dict[str, str]:
    """The task's environment for the installation's interpreter: without the tree's
    records and the probe's boot folder, so that nothing of it is probed."""
    child = {k: v for k, v in os.environ.items() if k not in (ENV_DIR, ENV_CONFIG, ENV_ANCHOR)}
    path = [p for p in child.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(BOOT)]
    child["PYTHONPATH"] = os.pathsep.join(path)
    return child


def _err() -> int | None:
    """Where the interpreter's lines go: the task's standard error, /dev/null without one."""
    import subprocess
    try:
        os.fstat(2)
    except OSError:
        return subprocess.DEVNULL
    return None
