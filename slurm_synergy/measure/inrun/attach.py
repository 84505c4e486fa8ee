"""The supervisor beside a task's Python training that nothing of ours started.

    python -I -m slurm_synergy.measure.inrun.attach --anchor PID --folder DIR

probe/task.py starts it, with the installation's interpreter, when the first process of
a tree the node's TaskProlog reached takes a batch (a plain batch script's `python
train.py`, `srun python`, `torchrun`). It does beside that tree what the in-run wrapper
(measure/inrun/supervisor.py) does beside the command it starts: measures the job while it trains
if the plugin marked it and no other job measures its workload, follows its memory to
its end otherwise, and once the tree has ended writes the run's probe result where the
reports find it (`synergy report`: samples/s and the wait on data). It never touches the
job's result or exit status; on any fault it gives every core back and says so in one
line of the job's log.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import psutil

from slurm_synergy import paths
from slurm_synergy.fileio import PRIVATE, atomic_write_text, private_folder
from slurm_synergy.probe.affinity import confined_line
from slurm_synergy.probe.records import RECORD_S, WATCH_RECORD_S, ProbeConfig, read_records
from slurm_synergy.probe.supervise import judge
from slurm_synergy.probe.task import ENDING, ENV_FINGERPRINT, ENV_PROFILE, SUPERVISING
from slurm_synergy.probe.tree import ProcessTree
from slurm_synergy.measure.inrun.follow import PROG
from slurm_synergy.measure.inrun.supervisor import InRunRequest, choose
from slurm_synergy.measure.inrun.windows import write_order
from slurm_synergy.site import Site

WAIT_LOOK_S = 1.0       # how often the end of a tree nothing beside it watches is looked for
# In the job's runs folder, once a supervisor starts there: a tree of the job took a step,
# so the job trains, and a later tree without one holds nothing (measure/inrun/no_step.py).
STEPPED = "stepped"


class Attached:
    """A running process this one did not start, as the supervisor sees a child
    (supervise.Started): ended when it has, or when it says it is ending (task.ENDING in
    its records folder: it waits for us then). Its exit status is not ours to know."""

    def __init__(self, pid: int, folder: Path) -> None:
        self.pid = pid
        self._proc = psutil.Process(pid)
        self._ending = folder / ENDING

    def poll(self) -> int | None:
        """0 once the process has ended or says it is ending, None while it runs."""
        with contextlib.suppress(psutil.Error):
            if self._proc.is_running() and self._proc.status() != psutil.STATUS_ZOMBIE \
                    and not self._ending.exists():
                return None
        return 0

    def wait(self, timeout: float | None = None) -> int:
        """Wait until `poll` says it has ended (at most `timeout` s, where given); returns 0."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            time.sleep(WAIT_LOOK_S if deadline is None else
                       max(0.0, min(WAIT_LOOK_S, deadline - time.monotonic())))
        return 0


def let_go_of_the_log(pid: int) -> None:
    """Where this process's standard error is a pipe (srun carrying a task's output to the
    job's log, a `| tee`), point it at /dev/null once process `pid` has ended: the
    reader waits for every writer to let go, and the supervisor may still be writing the
    run's result. A file or a terminal is kept."""
    try:
        mode = os.fstat(2).st_mode
    except OSError:
        return
    if not stat.S_ISFIFO(mode) and not stat.S_ISSOCK(mode):
        return
    with contextlib.suppress(psutil.Error):
        psutil.Process(pid).wait()
    sys.stderr.flush()
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    os.close(null)


def result_path(job_id: str, cluster: str) -> Path:
    """Where a run's probe result goes for the reports: the job's folder of this user's
    records (named in the outputs pointers, as a CSV job's output folder is), probe.json
    for its first run, probe-<n>.json for a later one of the same job."""
    folder = private_folder(paths.runs_dir(cluster, job_id))
    pointer = paths.outputs_dir(cluster) / job_id
    if job_id and not pointer.exists():
        private_folder(pointer.parent)
        atomic_write_text(pointer, f"{folder}\n", PRIVATE)
    for n in range(1, 1000):        # taken whole, so two runs of one job never share one
        path = folder / ("probe.json" if n == 1 else f"probe-{n}.json")
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE))
            return path
    raise OSError(f"{folder}: no free name for a run's result")


def supervise(pid: int, folder: Path, site: Site) -> int:
    """Beside the tree of `pid` until it ends; the result written for the reports."""
    def log(line: str) -> None:
        """One line to the job's log (this process's standard error)."""
        print(line, file=sys.stderr, flush=True)
    try:
        proc = Attached(pid, folder)
        command = tuple(psutil.Process(pid).cmdline())
        (folder / SUPERVISING).write_text(f"{os.getpid()}\n")
    except (psutil.Error, OSError):
        return 0            # ended before its supervisor started
    threading.Thread(target=let_go_of_the_log, args=(pid,), daemon=True).start()
    job_id = os.environ.get("SLURM_JOB_ID", "")
    with contextlib.suppress(OSError):
        (private_folder(paths.runs_dir(paths.job_cluster(), job_id)) / STEPPED).touch()
    req = InRunRequest(os.environ.get(ENV_FINGERPRINT, ""), os.environ.get(
        "SLURM_JOB_NAME", ""), command, Path("probe.json"))
    tree = ProcessTree(pid)
    with contextlib.ExitStack() as held:
        marked = os.environ.get(ENV_PROFILE) == "1"
        tasks = os.environ.get("SLURM_STEP_NUM_TASKS", "1")
        # Each task's tree has a supervisor of its own: one sweeping its task alone would
        # measure a rank beside others at full speed. Followed, not swept.
        alone = not (tasks.isdigit() and int(tasks) > 1)
        if marked and not alone:
            log(f"{PROG}: job {job_id}'s step runs {tasks} tasks: watched, not swept")
        # A task of several has its share of the job's cores: only one alone is told.
        confined = alone and confined_line(os.environ, len(os.sched_getaffinity(0)))
        if confined:
            log(f"{PROG}: job {job_id}: {confined}")
        beside = choose(req, site, marked, held, log, may_sweep=alone)
        if marked != beside.swept:
            # The records at the windows' pace (a job marked since its submission: the
            # anchor set the watch's) or back at the watch's.
            with contextlib.suppress(OSError):
                write_order(folder, 0, None, len(os.sched_getaffinity(0)),
                            RECORD_S if beside.swept else WATCH_RECORD_S)
        if beside.during is not None:
            try:
                beside.during(proc, folder)
            except Exception as e:      # noqa: BLE001 - never the run's fault
                log(f"{PROG}: measuring the run stopped: {type(e).__name__}: {e}")
        proc.wait()
    records = read_records(folder)
    result = replace(judge(ProbeConfig(mode="watch"), list(command), 0, records, tree, None),
                     exit_status=None)
    with contextlib.suppress(OSError):
        result.write(result_path(job_id, paths.job_cluster()))
    return 0


def _stop(sig: int, frame: object) -> None:
    raise SystemExit(128 + sig)     # windows close on the way out: every core given back


def main(argv: Sequence[str] | None = None) -> int:
    """Supervise the tree of --anchor until it ends (the job's signals ignored; TERM ends
    this); returns 0, its records folder removed."""
    # The job's signals reach every process of its step: the ones a script takes for its
    # own (--signal=USR1@90 to checkpoint) are not ours; a TERM ends the measurement with
    # the job's cores given back.
    for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _stop)
    # The job's cores, not those of the process that started it (a rank a launcher bound
    # to some): the kernel narrows the set to the job's cpuset.
    with contextlib.suppress(OSError):
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
    p = argparse.ArgumentParser(prog="python -m slurm_synergy.measure.inrun.attach",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--anchor", type=int, required=True, help="the tree's first process")
    p.add_argument("--folder", type=Path, required=True, help="its processes' records")
    args = p.parse_args(argv)
    try:
        site = Site.load(on_bad_policy=lambda e: print(
            f"{PROG}: the default policy measures this run: {e}", file=sys.stderr))
        return supervise(args.anchor, args.folder, site)
    finally:
        shutil.rmtree(args.folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
