"""Entry points for slurm.conf's Prolog= and Epilog= (through the wrappers that
`synergy hooks install` writes) and for the sampler the prolog starts. The prolog hands
the job's decision to its tasks first (hooks/taskenv.py), the epilog takes it back.

    python -m slurm_synergy.hooks prolog|epilog
    python -m slurm_synergy.hooks sample --job ID --gpus [UUID[,UUID...]] [--uid UID]

Each hook runs in a worker thread under a deadline (hook_timeout_s in the site policy):
NVML can hang on a failing GPU, and slurmd would otherwise wait until its own
PrologEpilogTimeout and then drain the node with no word of why.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import traceback

from slurm_synergy.model.errors import SynergyError
from slurm_synergy.gpu import open_backend
from slurm_synergy.hooks import epilog, jobcgroup, prolog, sampling, taskenv
from slurm_synergy.hooks.context import HookLog, context, log_path

# Exit status when a hook fails in a way it did not foresee, or runs out of time: the
# prolog never drains a node; the epilog does, since it could not confirm the cap.
ON_FAILURE = {"prolog": 0, "epilog": 1}


def run_hook(hook: str) -> int:
    """Run the prolog or epilog under hook_timeout_s; returns the exit status for slurmd
    (ON_FAILURE's where it fails or runs out of time, unless the GPUs were dealt with)."""
    try:
        ctx = context(hook)
    except SynergyError as e:
        HookLog(log_path(dict(os.environ)), hook, "?")(f"refused: {e}")
        return ON_FAILURE[hook]
    result: list[int] = []
    settled: list[int] = []       # the epilog's status once the GPUs are dealt with

    def work() -> None:
        """Hand the job's decision to its tasks (prolog) or take it back (epilog), and run
        the hook on this node's GPUs; a failure is logged, leaving `result` empty."""
        try:
            if hook == "prolog":
                taskenv.hand_over(ctx)     # before NVML, which can hang on a failing GPU
            backend = open_backend()
            result.append(prolog.run(ctx, backend) if hook == "prolog"
                          else epilog.run(ctx, backend, settled.append))
        except Exception:
            ctx.log(f"failed: {traceback.format_exc(limit=4).strip()}".replace("\n", " | "))
        finally:
            if hook == "epilog":
                taskenv.take_back(ctx)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    worker.join(ctx.policy.hook_timeout_s)
    if worker.is_alive():
        code = settled[0] if settled else ON_FAILURE[hook]
        ctx.log(f"did not finish in {ctx.policy.hook_timeout_s:g} s (hook_timeout_s); "
                f"exit {code}" + (" (the GPUs were dealt with)" if settled else ""))
        return code
    if not result and settled:
        ctx.log(f"failed after the GPUs were dealt with; exit {settled[0]}")
        return settled[0]
    if not result:
        ctx.log(f"exit {ON_FAILURE[hook]}")
        return ON_FAILURE[hook]
    return result[0]


def run_sampler(job_id: str, uuids: list[str], uid: str) -> int:
    """Sample the job's GPUs (by UUID) and follow its cgroup until it ends or is stopped;
    returns the exit status."""
    ctx = context("sampler", {**os.environ, "SLURM_JOB_ID": job_id, "SLURM_JOB_UID": uid})
    stop = threading.Event()
    sampling.install_stop_handler(stop)
    watch = jobcgroup.Watch(job_id, ctx.uid, ctx.node) if ctx.watches_cgroup else None
    return sampling.sample_job(open_backend() if uuids else None, job_id, uuids,
                               ctx.policy.gpu_sample_period_s, ctx.totals_path,
                               ctx.prolog_path, stop, watch)


def main(argv: list[str] | None = None) -> int:
    """Run the hook or the sampler `argv` names; a hook ends the process with its status."""
    parser = argparse.ArgumentParser(prog="python -m slurm_synergy.hooks")
    sub = parser.add_subparsers(dest="hook", required=True)
    sub.add_parser("prolog")
    sub.add_parser("epilog")
    sample = sub.add_parser("sample")
    sample.add_argument("--job", required=True)
    sample.add_argument("--gpus", default="")
    sample.add_argument("--uid", default="")
    args = parser.parse_args(argv)
    if args.hook == "sample":
        return run_sampler(args.job, [u for u in args.gpus.split(",") if u], args.uid)
    code = run_hook(args.hook)
    sys.stdout.flush()
    # os._exit: a worker stuck in NVML must not hold the process open past the deadline.
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
