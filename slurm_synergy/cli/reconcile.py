"""`synergy reconcile [CSV...]`: the submission ledger set against what Slurm has."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub) -> None:
    """`reconcile [CSV...]`."""
    p = sub.add_parser("reconcile", help="check the submission ledger against Slurm after a "
                       "fault: drop rows Slurm lost, finish cancelling a failed submission")
    p.add_argument("csv", type=Path, nargs="*", help="only these job lists' rows "
                   "(default: every row in the ledger)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Set the ledger's rows (the CSVs' only, where given) against Slurm: a line per row
    with its job and state, or what was done with it. Exits 1 where a job that should be
    cancelled could not be."""
    from slurm_synergy.submission.csvjobs import load_jobs
    from slurm_synergy.submission.ledger import Ledger, ledger_path, row_key
    from slurm_synergy.submission.reconcile import reconcile
    from slurm_synergy.slurm import Slurm

    slurm = Slurm()
    ledger = Ledger(ledger_path(slurm.cluster_name()))
    with ledger.transaction():
        if args.csv:
            keys = [row_key(s) for csv in args.csv for s in load_jobs(csv)]
            keys = [k for k in keys if k in ledger.entries]
        else:
            keys = list(ledger.entries)
        names = {k: ledger.entries[k].name for k in keys}
        done = reconcile(ledger, keys, slurm)
        ledger.save()
    for key in keys:
        if key in done.present:
            what = f"{done.present[key].job_id}\t{done.present[key].state}"
        elif key in done.unreached:
            what = f"{done.unreached[key]}\tstill to cancel (scancel failed)"
        elif key in done.cancelled:
            what = "-\tcancelled (its submission had failed)"
        else:
            what = "-\tnot in Slurm: dropped from the ledger"
        print(f"{names[key]}\t{what}")
    print(f"{len(keys)} row(s): {done.summary()}", file=sys.stderr)
    if done.lost:
        again = " ".join(str(c) for c in args.csv) or "<csv>"
        print(f"`synergy submit {again}` submits the {len(done.lost)} row(s) not in Slurm, "
              "and only those", file=sys.stderr)
    return 1 if done.unreached else 0
