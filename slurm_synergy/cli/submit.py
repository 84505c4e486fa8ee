"""`synergy submit JOBS.csv`: every row of a job list, all or none."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from slurm_synergy.model.policy import ON_PROFILED


def add_parser(sub) -> None:
    """`submit JOBS.csv [options]`."""
    p = sub.add_parser("submit", help="submit every row of a job list (CSV)")
    p.add_argument("csv", type=Path, help="job list; its columns: docs/submitting.md")
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
    how = p.add_mutually_exclusive_group()
    how.add_argument("--profile", dest="profile", action="store_const", const="always",
                     default="auto", help="profile each workload in full first (srun steps "
                     "inside its job), even where the site policy would not (default: a new "
                     "workload is measured while its first job trains, as the policy says)")
    how.add_argument("--no-profile", dest="profile", action="store_const", const="never",
                     help="never profile these jobs; run them as decided or as written")
    how.add_argument("--profile-only", dest="profile", action="store_const", const="only",
                     help="profile each workload, then end the job without training")
    p.add_argument("--on-profiled", choices=ON_PROFILED,
                   help="once a job is profiled: continue (train on as submitted; its "
                   "workload's pending jobs are right-sized in place) or resubmit (submit it "
                   "again right-sized: a second queue wait); a row's on_profiled column "
                   "wins (default: the site policy's)")
    p.add_argument("--mode", choices=("auto", "shim", "user"), default="auto",
                   help="who applies the plugin's decisions: the cluster's job_submit shim, "
                   "or this command (user mode, for clusters without the shim); "
                   "default: the shim where the cluster has it")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Submit every row of the job list, all or none: "job id<TAB>name" lines on
    standard output, everything else on standard error."""
    from slurm_synergy.submission.submit import SubmitOptions, submit_csv

    out = args.out or Path("runs") / args.csv.stem
    opts = SubmitOptions(out=out, dry_run=args.dry_run, sequential=args.sequential,
                         force=args.force, arrays=args.arrays, hold=args.hold,
                         profile=args.profile, mode=args.mode, on_profiled=args.on_profiled)
    # stdout carries only "job id<TAB>name" lines, for scripts; everything else is stderr.
    result = submit_csv(args.csv, opts, log=lambda line: print(line, file=sys.stderr))
    for name, job_id in result.job_ids.items():
        print(f"{job_id}\t{name}")
    if result.job_ids:
        print(f"submitted {len(result.job_ids)} job(s) in {len(result.units)} sbatch call(s); "
              f"scripts in {out / 'scripts'}", file=sys.stderr)
    return 0
