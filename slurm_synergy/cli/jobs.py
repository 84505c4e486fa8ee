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
    from slurm_synergy.jobs import job_table, records, unmatched, unseen, wait
    from slurm_synergy.model.errors import SlurmError
    from slurm_synergy.slurm import Slurm

    slurm = Slurm()
    recs = wait(slurm, args.job_ids, args.timeout) if args.wait else records(slurm, args.job_ids)
    try:
        later, unknown = unseen(slurm, args.job_ids, recs)
    except SlurmError as e:          # slurmctld silent: accounting's answer is all there is
        later, unknown = [], unmatched(args.job_ids, (r.job_id for r in recs))
        print(f"synergy: slurmctld did not answer ({e})", file=sys.stderr)
    if recs:
        print(job_table(recs))
    if later:
        print(f"synergy: not in accounting yet: job(s) {', '.join(later)} (slurmctld has "
              "them; slurmdbd records a job moments after slurmctld)", file=sys.stderr)
    if unknown:
        print(f"synergy: not in accounting: job(s) {', '.join(unknown)}, nor known to "
              "slurmctld", file=sys.stderr)
    done = not args.wait or all(r.state == "COMPLETED" for r in recs)
    return 0 if done and not later and not unknown else 1
