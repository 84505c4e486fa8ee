"""A marked job's Python that ended without a training step, where nothing of ours
started it (a plain batch script's `python infer.py`, `srun python`, `torchrun`).

    python -I -m slurm_synergy.measure.inrun.no_step --anchor PID --ran SECONDS

In task mode (probe/task.py) a tree's supervisor starts at its first batch, so a tree
that never steps (a forward-only loop, an evaluation by hand, a loop the probe cannot
see) starts none, and until it has run as long as the in-run supervisor waits for a
first step (the policy's first_batch_timeout_s) it is no different from a helper
(`python -c "import torch"`). At the normal exit of a marked tree that started no
supervisor, its anchor starts this, with the installation's interpreter, as the job's
user: where the tree ran that long, no tree of the job took a step (a supervisor started
in it: attach.STEPPED), and its workload is neither measured, held, nor being measured
now, it says why in one line of the job's log and files the workload's hold
(profiles.py), as the in-run supervisor does for the same loop. A tree killed by a
signal (the job's end, its time limit, unless it catches the signal and exits) runs no
exit code and is not held. Always exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from pathlib import Path
from typing import Callable, Sequence

from slurm_synergy import paths
from slurm_synergy.model.comment import FINGERPRINT_RE
from slurm_synergy.probe.task import ENV_FINGERPRINT
from slurm_synergy.profiles import ProfileStore
from slurm_synergy.measure.inrun.attach import STEPPED
from slurm_synergy.measure.inrun.follow import PROG
from slurm_synergy.measure.inrun.supervisor import file_hold, no_step_why
from slurm_synergy.measure.lock import profiling_lock
from slurm_synergy.site import Site

SHOWN_CHARS = 120       # of the tree's command line, in the job's log


def command_of(pid: int) -> str:
    """Process `pid`'s command line, shell-quoted and cut to SHOWN_CHARS; '' where gone."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return ""
    shown = shlex.join(w.decode(errors="replace") for w in words if w)
    return shown if len(shown) <= SHOWN_CHARS else shown[:SHOWN_CHARS - 3] + "..."


def tell(anchor: int, ran_s: float, site: Site, log: Callable[[str], None]) -> bool:
    """File the hold of this job's workload where the tree of `anchor` ran `ran_s`
    seconds, as long as the in-run supervisor waits for a step, without one; whether it
    was filed."""
    fp, job_id = os.environ.get(ENV_FINGERPRINT, ""), os.environ.get("SLURM_JOB_ID", "")
    wait_s = site.policy.first_batch_timeout_s
    if ran_s < wait_s or not FINGERPRINT_RE.fullmatch(fp):
        return False
    if job_id and (paths.runs_dir(paths.job_cluster(), job_id) / STEPPED).exists():
        return False        # the job trains: a tree of it took a step
    store = ProfileStore.default()
    with contextlib.ExitStack() as held:
        # Another tree or job measures the workload now: its profile will say. Measured
        # or held looked at under the lock: another task of the step ending beside this
        # one holds it first, and this one then says nothing.
        if not held.enter_context(profiling_lock(store, fp)) or store.has(fp) or \
                store.is_held(fp):
            return False
        file_hold(store, fp, job_id, no_step_why(ran_s, command_of(anchor)), log)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """Hold the workload of the tree of --anchor where `tell` says so; returns 0."""
    p = argparse.ArgumentParser(prog="python -m slurm_synergy.measure.inrun.no_step",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--anchor", type=int, required=True, help="the tree's first process")
    p.add_argument("--ran", type=float, required=True, help="how long it ran, in seconds")
    args = p.parse_args(argv)

    def log(line: str) -> None:
        """One line to the job's log (this process's standard error: the anchor's)."""
        print(line, file=sys.stderr, flush=True)
    try:
        tell(args.anchor, args.ran, Site.load(on_bad_policy=lambda e: None), log)
    except Exception as e:      # noqa: BLE001 - never the job's fault
        log(f"{PROG}: a run without a training step is not held: {type(e).__name__}: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
