"""synergy: right-size deep-learning training jobs on Slurm.

Commands talk to the cluster named by SLURM_CONF, or to the local cluster
(`synergy cluster up`) when SLURM_CONF is not set.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import SynergyError


def _cluster(args: argparse.Namespace) -> int:
    from .cluster.localbox import LocalCluster

    box = LocalCluster()
    if args.action == "up":
        box.up()
    elif args.action == "down":
        box.down()
    else:
        healthy, lines = box.status()
        print("\n".join(lines))
        return 0 if healthy else 1
    return 0


def _submit(args: argparse.Namespace) -> int:
    from .submit import SubmitOptions, submit_csv

    out = args.out or Path("runs") / args.csv.stem
    opts = SubmitOptions(out=out, dry_run=args.dry_run, sequential=args.sequential,
                         force=args.force, arrays=args.arrays, hold=args.hold,
                         profile=args.profile)
    # stdout carries only "job id<TAB>name" lines, for scripts; everything else is stderr.
    result = submit_csv(args.csv, opts, log=lambda line: print(line, file=sys.stderr))
    for name, job_id in result.job_ids.items():
        print(f"{job_id}\t{name}")
    if result.job_ids:
        print(f"submitted {len(result.job_ids)} job(s) in {len(result.units)} sbatch call(s); "
              f"scripts in {out / 'scripts'}", file=sys.stderr)
    return 0


def _jobs(args: argparse.Namespace) -> int:
    from .jobs import records, table, wait
    from .slurm import Slurm

    slurm = Slurm()
    recs = wait(slurm, args.job_ids, args.timeout) if args.wait else records(slurm, args.job_ids)
    print(table(recs))
    return 0 if not args.wait or all(r.state == "COMPLETED" for r in recs) else 1


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo()


def _profiles(args: argparse.Namespace) -> int:
    from .profile import ProfileStore
    from .profile_table import plot, table

    store = ProfileStore(args.store.resolve()) if args.store else ProfileStore.default()
    fps = args.fingerprints or store.fingerprints()
    profiles = [store.load(fp) for fp in fps]
    if args.json:
        print("[" + ",\n".join(p.to_json().rstrip() for p in profiles) + "]")
    else:
        print(table(profiles) if profiles else f"no profiles in {store.root}")
    if args.plot and profiles:
        print(f"plot: {plot(profiles, args.plot)}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="synergy", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("cluster", help="the local Slurm cluster: up, down, status")
    p.add_argument("action", choices=("up", "down", "status"))
    p.set_defaults(func=_cluster)

    p = sub.add_parser("submit", help="submit every row of a job list (CSV)")
    p.add_argument("csv", type=Path, help="job list; see README for its columns")
    p.add_argument("--dry-run", action="store_true", help="validate and write scripts only")
    p.add_argument("--sequential", action="store_true",
                   help="run rows one after another (afterany dependencies)")
    p.add_argument("--out", type=Path, help="folder for scripts, logs and stats "
                   "(default: runs/<csv name>)")
    p.add_argument("--force", action="store_true", help="submit rows already in the ledger again")
    p.add_argument("--arrays", action="store_true",
                   help="submit rows with identical resources and workload as job arrays")
    p.add_argument("--hold", action="store_true",
                   help="leave the jobs held; release them with scontrol release")
    p.add_argument("--profile", action="store_true",
                   help="profile each workload that has no profile yet, first thing in its job")
    p.set_defaults(func=_submit)

    p = sub.add_parser("jobs", help="a table of jobs from sacct")
    p.add_argument("job_ids", nargs="+", help="job ids (array tasks as 12_3)")
    p.add_argument("--wait", action="store_true", help="wait until all have finished")
    p.add_argument("--timeout", type=float, default=3600, help="seconds to wait at most")
    p.set_defaults(func=_jobs)

    # Parsed by the profiler itself (its options, then the script and the script's own).
    sub.add_parser("profile", add_help=False,
                   help="profile a workload inside its allocation (profiler/offline_profiler.py)")

    p = sub.add_parser("profiles", help="the stored profiles: table, JSON, plot")
    p.add_argument("fingerprints", nargs="*", help="only these (default: all)")
    p.add_argument("--store", type=Path, help="profile store (default: SYNERGY_PROFILES "
                   "or ~/.slurm-synergy/profiles)")
    p.add_argument("--json", action="store_true", help="print the profiles as JSON")
    p.add_argument("--plot", type=Path, help="write throughput against cores to this PNG")
    p.set_defaults(func=_profiles)

    p = sub.add_parser("demo", help="local cluster up, example jobs in, sacct table out")
    p.set_defaults(func=_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["profile"]:
        from profiler.offline_profiler import main as profile_main

        return profile_main(argv[1:], prog="synergy profile")
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SynergyError as exc:
        print(f"synergy: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
