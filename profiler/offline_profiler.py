"""Profile a training workload inside its Slurm allocation, as Synergy's optimistic profiler
does, and store the profile under the workload's fingerprint.

    python -m profiler.offline_profiler [profiler options] SCRIPT [script args]
    synergy profile [profiler options] SCRIPT [script args]          (the same)

Each measurement is an `srun` step of the current allocation, held by Slurm's cgroups to
k cores, that runs the script under the script probe (slurm_synergy.probe): the script
is not changed and need declare nothing. The probe sets the loader's workers for the
step (the job's own with --workers), counts the batches its loaders yield, times the
wait on them, and ends the script after a warm-up and --max-iterations measured steps
(fewer where they would take more than --window seconds at the first step's rate; by
default, more where 20 would take under a second). CPU sensitivity is swept: the full
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

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn, Sequence

from slurm_synergy.argtypes import int_at_least, positive_float
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.jobspec import BUILTIN_SCRIPT as BUILTIN
from slurm_synergy.model.units import mem_mb
from slurm_synergy.measure.errors import BUSY_EXIT, MOVE_EXIT, PROG, USAGE_EXIT, Busy, UsageError
from slurm_synergy.measure.offline.gpuroom import MoveGpu
from slurm_synergy.measure.offline.plan import ProfileRequest
from slurm_synergy.measure.offline.run import profile_workload
from slurm_synergy.measure.offline.session import LEAST_MEASURE_S, MOST_ITERATIONS
from slurm_synergy.measure.search import PLATEAU


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """Exit with USAGE_EXIT and one line naming the bad option."""
        self.exit(USAGE_EXIT, f"{PROG}: error: {message} (see --help)\n")


def _memory_mb(text: str) -> int:
    """Slurm's size syntax: 4096 (MB), 4096M, 16G, 1T."""
    size = mem_mb(text)
    if size is None or size < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a memory size (e.g. 16G, 4096M)")
    return int(size)


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The profiler's command line, under the name `prog`."""
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
    add("--max-iterations", type=int_at_least(1),
        help=f"measured iterations per step (default {MOST_ITERATIONS}, or as many as "
        f"fill {LEAST_MEASURE_S:g}s where those take less: a shorter measurement reads "
        "the batches its loader fetched ahead)")
    add("--window", type=positive_float, default=4.0,
        help="seconds each step measures, as iterations at the first step's rate (at "
        "least 5, at most --max-iterations, or its default's second; default %(default)s)")
    add("--warmup", type=int, default=3,
        help="first iterations of each step left out (default %(default)s)")
    add("--workers", type=int_at_least(0), metavar="N",
        help="data-loader workers per process in every training step: the job's own, "
        "where its row sets them, so that the steps measure the job that runs (default: "
        "at each core count, the cores less one per process, at least 1)")
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
    add("--plateau", type=float, default=PLATEAU,
        help="halve the cores while throughput stays within this fraction of the best "
        "(default %(default)s, Synergy's)")
    add("--repeats", type=int_at_least(1), default=2,
        help="runs of each swept core count, interleaved with the others' (default "
        "%(default)s); up to --max-repeats where the decision's noise rule cannot yet "
        "tell two counts apart")
    add("--max-repeats", type=int_at_least(1), default=4,
        help="most runs of one core count (default %(default)s)")
    add("--budget", type=float, default=72.0,
        help="seconds of profiling an optional step must end within, at what its last "
        "run took: extra repeats, then a second run of each component (default %(default)s, "
        "2%% of a one-hour job); the sweep, its --repeats and the components run "
        "regardless")
    add("--step-timeout", type=float, default=600.0,
        help="seconds a step may run before it is stopped (default %(default)s)")
    add("--launcher", choices=("auto", "srun", "local"), default="auto",
        help="srun steps (inside an allocation; auto picks it there) or local processes "
        "pinned to k cores (a workstation; not enforced by Slurm)")
    add("--fresh-steps", action="store_true",
        default=os.environ.get("SYNERGY_FRESH_STEPS") == "1",
        help="start every step as a new process, as the job starts its script (default: "
        "a Python script's steps fork one interpreter that has imported torch, which "
        "saves its start-up at every step; SYNERGY_FRESH_STEPS=1 sets this for jobs)")
    add("--power-sweep", choices=("auto", "off"), default="auto",
        help="sweep GPU power limits where the node allows setting them")
    add("--force", action="store_true", help="profile again even if a profile exists")
    add("--docker-img", help=argparse.SUPPRESS)
    add("--container-mnt", help=argparse.SUPPRESS)
    add("script", help=f"the training script (a .py file, a program, or {BUILTIN})")
    add("script_args", nargs=argparse.REMAINDER, help="the script's own arguments")
    return p


def request(args: argparse.Namespace) -> ProfileRequest:
    """The parsed command line as the profiler's request; UsageError for what it refuses."""
    if args.docker_img or args.container_mnt:
        raise UsageError("--docker-img and --container-mnt are Synergy's container options; "
                         "here each profiling step is an srun step in the job's own Slurm "
                         "allocation, with the job's environment, so leave them out")
    if args.nnodes != 1:
        raise UsageError(f"--nnodes {args.nnodes}: profiling runs on one node of the "
                         "allocation; multi-node jobs are profiled per node (use --nnodes 1)")
    return ProfileRequest(
        script=args.script, script_args=tuple(args.script_args), job_name=args.job_name,
        fingerprint=args.fingerprint, store=args.store, workdir=args.workdir,
        num_gpus=args.num_gpus, cpu=args.cpu, mem_mb=args.memory, batch=args.batch,
        workers=args.workers, torchrun=args.torchrun, max_iterations=args.max_iterations,
        window_s=args.window, warmup=args.warmup,
        first_batch_timeout_s=args.first_batch_timeout, step_timeout_s=args.step_timeout,
        plateau=args.plateau, repeats=args.repeats, max_repeats=args.max_repeats,
        budget_s=args.budget, launcher=args.launcher, fresh_steps=args.fresh_steps,
        power_sweep=args.power_sweep == "auto", force=args.force)


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Profile the workload `argv` names and store its profile; returns the exit status (0,
    1 on an error, USAGE_EXIT, BUSY_EXIT, MOVE_EXIT)."""
    args = build_parser(prog).parse_args(argv)
    try:
        profile_workload(request(args),
                         log=lambda line: print(line, file=sys.stderr, flush=True))
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return USAGE_EXIT
    except Busy as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return BUSY_EXIT
    except MoveGpu as e:
        print(f"{prog}: no step run on {e.move.from_type}: {e}", file=sys.stderr)
        return MOVE_EXIT
    except (SynergyError, ValueError, OSError) as e:
        print(f"{prog}: error: {e}; nothing was stored", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
