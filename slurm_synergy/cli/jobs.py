"""`synergy jobs IDS [--wait]`: a table of jobs from sacct."""

from __future__ import annotations

import argparse
import sys


def add_parser(sub) -> None:
    """`jobs IDS [--wait [--timeout S]]`."""
    p = sub.add_parser("jobs", help="a table of jobs from sacct")
    p.add_argument("job_ids", nargs="+", help="job ids (array tasks as 12_3)")
    p.add_argument("--wait", action="store_true", help="wait until all have finished")
    p.add_argument("--timeout", type=float, default=3600, help="seconds to wait at most")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """The jobs' sacct table; with --wait, once all have ended. Exits 1 where a job is
    not in accounting, or (--wait) did not complete."""
    from slurm_synergy.jobs import job_table, records, unmatched, wait
    from slurm_synergy.slurm import Slurm

    slurm = Slurm()
    recs = wait(slurm, args.job_ids, args.timeout) if args.wait else records(slurm, args.job_ids)
    missing = unmatched(args.job_ids, (r.job_id for r in recs))
    if recs:
        print(job_table(recs))
    if missing:
        print(f"synergy: not in accounting: job(s) {', '.join(missing)}", file=sys.stderr)
    done = not args.wait or all(r.state == "COMPLETED" for r in recs)
    return 0 if done and not missing else 1
