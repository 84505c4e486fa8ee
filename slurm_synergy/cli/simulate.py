"""`synergy simulate`: run one or several policy pairs and flows on a trace, side by side."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from dataclasses import asdict
from pathlib import Path

from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.policy import load_policy
from slurm_synergy.paths import policy_path
from slurm_synergy.model.profile import ProfileError
from slurm_synergy.profiles import ProfileStore
from slurm_synergy.simulate import plots, results
from slurm_synergy.simulate.cluster import ClusterSpec, load_cluster
from slurm_synergy.simulate.demand import SPEED_MODELS
from slurm_synergy.simulate.dynamic import GPUS_PER_JOB, dynamic_trace
from slurm_synergy.simulate.flows import FLOWS, FlowCosts
from slurm_synergy.simulate.order import ORDERS
from slurm_synergy.simulate.simulator import ALLOCATORS, Setup, simulate
from slurm_synergy.simulate.siterun import flow_table, run_flows
from slurm_synergy.simulate.trace import (REFERENCE_TRACE, parse_mix, poisson_trace, read_trace,
                    SimJob, write_trace)
from slurm_synergy.simulate.workload import (REFERENCE_MATRIX, Workload, from_profile,
                                             read_matrix)


def _names(allowed):
    def parse(text: str) -> list[str]:
        """Comma-separated names of `allowed`, or all of them."""
        names = list(allowed) if text == "all" else [n.strip() for n in text.split(",")]
        bad = [n for n in names if n not in allowed]
        if bad or not names:
            raise argparse.ArgumentTypeError(f"{', '.join(bad) or text!r}: choose from "
                                             f"{', '.join(allowed)} (comma-separated, or all)")
        return names
    return parse


def _window(text: str) -> tuple[int, int]:
    lo, sep, hi = text.partition(",")
    if not (sep and lo.strip().isdigit() and hi.strip().isdigit()) or int(lo) > int(hi):
        raise argparse.ArgumentTypeError(f"{text!r}: expected LO,HI, two job ids with LO <= HI")
    return int(lo), int(hi)


def add_parser(sub) -> None:
    """`simulate [trace options] [--policy/--alloc/--flow] [--out]`."""
    p = sub.add_parser("simulate", help="simulate scheduling and allocation policies on a "
                       "trace and a cluster, side by side")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--trace", type=Path, help="job_id,model,arrival_s,iters,gpus per line "
                     "(default: Synergy's static 100-job trace)")
    src.add_argument("--poisson", type=int, metavar="JOBS",
                     help="generate JOBS jobs arriving as a Poisson process instead")
    src.add_argument("--dynamic", type=int, metavar="JOBS",
                     help="generate JOBS jobs by the rules of Synergy's dynamic workload "
                     "(--rate jobs an hour, its run times and 20/70/10 class split)")
    p.add_argument("--rate", type=float, default=9.0, help="arrivals per hour of --dynamic "
                   "(default 9)")
    p.add_argument("--gpus-per-job", choices=GPUS_PER_JOB, default="mix",
                   help="--dynamic: 1, 2, 4 or 8 GPUs at 70/10/15/5 %% (mix, the default), "
                   "or one GPU each (single)")
    p.add_argument("--load", type=float, default=0.8, help="offered load of --poisson: "
                   "GPU-hours arriving per hour over the cluster's GPUs (default 0.8)")
    p.add_argument("--mix", type=parse_mix, default=None, help="model mix of --poisson, "
                   "families or models: image=0.6,language=0.3,speech=0.1 (the default)")
    p.add_argument("--seed", type=int, help="random seed of --poisson (default 0) or "
                   "--dynamic (default 42, as Synergy's)")
    p.add_argument("--write-trace", type=Path, help="also save the trace used here")
    p.add_argument("--cluster", default="deployment", help="a TOML file, a name from "
                   "etc/simulate/ (deployment, 128-gpu, 512-gpu), or slurm[:PARTITION] for "
                   "a live partition's nodes (default: deployment)")
    p.add_argument("--scheduler", choices=("rounds", "slurm"), default="rounds",
                   help="rounds: Synergy's lease rounds with --policy, --alloc and --flow "
                   "(the default); slurm: the queue as slurmctld runs it (priority, the "
                   "main scheduler, backfill at Slurm's defaults), users asking by "
                   "sites' habits, in four flows: as asked, right-sized, right-sized "
                   "with --time-min, 26.05's --mem-update alone")
    p.add_argument("--policy", type=_names(ORDERS), default=["fifo"],
                   help="scheduling: fifo, srtf, las, ftf (comma-separated, or all)")
    p.add_argument("--alloc", type=_names(ALLOCATORS), default=["proportional", "tune",
                                                                "synergy-slurm"],
                   help="allocation: proportional, greedy, tune, opt, synergy-slurm "
                   "(comma-separated, or all; default proportional,tune,synergy-slurm)")
    p.add_argument("--speed", choices=tuple(SPEED_MODELS), default="matrix",
                   help="matrix: jobs run at the speed their allocation gives (default); "
                   "synergy: the speed-up only with the whole ideal demand, else 1.0, as "
                   "in Synergy's simulator")
    p.add_argument("--flow", type=_names(FLOWS), default=["known"],
                   help="how jobs come to be right-sized: known (every profile exists "
                   "already; the default), in-run (the first job of a workload sweeps "
                   "during its run, its waiting siblings are right-sized in place), "
                   "resubmit (it profiles, then it and its siblings submit themselves "
                   "again); comma-separated, or all")
    costs = FlowCosts()
    p.add_argument("--profile-s", type=float, default=costs.profile_s,
                   help="resubmit: seconds a profiling job holds its allocation, training "
                   f"nothing (default {costs.profile_s:g})")
    p.add_argument("--restart-s", type=float, default=costs.restart_s,
                   help="resubmit: seconds a sibling marked for profiling runs before it "
                   f"finds the profile and submits itself again (default {costs.restart_s:g})")
    p.add_argument("--sweep-s", type=float, default=costs.sweep_s,
                   help="in-run: seconds of the first job's run until its decision exists "
                   f"(default {costs.sweep_s:g})")
    p.add_argument("--sweep-lost-s", type=float, default=costs.sweep_lost_s,
                   help="in-run: seconds of training the sweep's windows cost it "
                   f"(default {costs.sweep_lost_s:g})")
    p.add_argument("--matrix", type=Path, default=REFERENCE_MATRIX,
                   help="per-model throughput matrices (Synergy's format)")
    p.add_argument("--profiles", type=Path, help="also use this profile store's workloads "
                   "(by job name), as the plugin sees them")
    p.add_argument("--window", type=_window, metavar="LO,HI",
                   help="JCT, wait and makespan over the jobs with ids LO to HI alone (the "
                   "measured window of a dynamic trace, as Synergy reports it), in the "
                   "table and the plots; jobs.csv keeps every job")
    p.add_argument("--out", type=Path, help="write summary.csv, summary.json, jobs.csv and "
                   "the plots here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Simulate every policy, allocator and flow asked on one trace; the summary table
    on standard output, the figures under --out."""
    cluster = load_cluster(args.cluster)
    workloads = read_matrix(args.matrix)
    if args.profiles:
        if not args.profiles.is_dir():
            raise SynergyError(f"profile store {args.profiles}: no such folder")
        server = cluster.smallest
        try:
            for profile in ProfileStore(args.profiles):
                w = from_profile(profile, *cluster.share, server.cpus, server.mem_gb)
                workloads[w.name] = w
        except ProfileError as e:
            raise SynergyError(str(e)) from None
    if args.poisson is not None:
        seed = 0 if args.seed is None else args.seed
        trace = poisson_trace(args.poisson, args.load, cluster.gpus, workloads,
                              **({"mix": args.mix} if args.mix else {}),
                              max_gpus=max(s.gpus for s in cluster.servers), seed=seed)
        source = f"Poisson, {args.poisson} jobs at load {args.load:g}, seed {seed}"
    elif args.dynamic is not None:
        seed = 42 if args.seed is None else args.seed
        trace = dynamic_trace(args.dynamic, args.rate, workloads, args.gpus_per_job,
                              seed=seed)
        source = (f"Synergy's dynamic workload, {args.dynamic} jobs at {args.rate:g} an "
                  f"hour, GPUs per job: {args.gpus_per_job}, seed {seed}")
    else:
        path = args.trace or REFERENCE_TRACE
        trace = read_trace(path)
        source = str(path)
    if args.write_trace:
        try:
            write_trace(trace, args.write_trace)
        except OSError as e:
            raise SynergyError(f"cannot write the trace to {args.write_trace}: "
                               f"{e.strerror or e}") from None
    if args.scheduler == "slurm":
        return _run_slurm(trace, workloads, cluster, source, args.out)
    policy = load_policy(policy_path()) if policy_path().is_file() else None
    print(f"trace: {source} ({len(trace)} jobs); cluster: {cluster.name}, "
          f"{cluster.describe()}, rounds of {cluster.round_s:g} s; speed model: {args.speed}"
          + (f"; JCT and makespan over job ids {args.window[0]}-{args.window[1]}"
             if args.window else ""), file=sys.stderr)
    costs = FlowCosts(args.profile_s, args.restart_s, args.sweep_s, args.sweep_lost_s)
    outcomes, rows = [], []
    for order, alloc, flow in itertools.product(args.policy, args.alloc, args.flow):
        out = simulate(trace, workloads, cluster, Setup(order, alloc, args.speed, flow, costs),
                       policy)
        outcomes.append(out)
        rows.append(results.summarise(out, args.window))
    print(results.summary_table(rows, rows[0] if len(rows) > 1 else None))
    if args.out:
        try:
            written = (results.write(rows, outcomes, args.out)
                       + plots.write(outcomes, args.out, args.window))
        except OSError as e:
            raise SynergyError(f"cannot write to {args.out}: {e.strerror or e}") from None
        print(f"written: {', '.join(str(p) for p in written)}", file=sys.stderr)
    return 0


def _run_slurm(trace: list[SimJob], workloads: dict[str, Workload], cluster: ClusterSpec,
               source: str, out: Path | None) -> int:
    """The Slurm queue model's four flows on the trace: a table, and site.json under --out."""
    print(f"trace: {source} ({len(trace)} jobs); cluster: {cluster.name}, "
          f"{cluster.describe()}; the Slurm queue model at Slurm's defaults",
          file=sys.stderr)
    rows = run_flows(trace, workloads, cluster)
    print(flow_table(rows))
    if out:
        try:
            out.mkdir(parents=True, exist_ok=True)
            path = out / "site.json"
            path.write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n",
                            encoding="utf-8")
        except OSError as e:
            raise SynergyError(f"cannot write to {out}: {e.strerror or e}") from None
        print(f"written: {path}", file=sys.stderr)
    return 0
