"""`synergy tune`: Synergy-TUNE's fallback applied to the pending jobs of a live cluster.

One pass by default (run it from cron), or `--every SECONDS` as a daemon. Admins (root
or the SlurmUser) tune everyone's pending jobs; anyone else only their own.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from slurm_synergy.model.errors import SynergyError
from slurm_synergy.slurm import Slurm, user_name
from slurm_synergy.tune import apply as applying
from slurm_synergy.tune.plan import plan_resizes


def add_parser(sub) -> None:
    """`tune [--every S] [--revert JOB...] [...]`."""
    p = sub.add_parser("tune", help="start pending jobs that cannot start at their ideal "
                       "size at their GPU-proportional share (scontrol update, logged)")
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.add_argument("--every", type=float, metavar="SECONDS",
                   help="run as a daemon, one pass every SECONDS")
    p.add_argument("--partition", help="the partition whose nodes give room (default: the "
                   "default partition)")
    p.add_argument("--revert", type=lambda v: [j for j in v.split(",") if j], metavar="JOBS",
                   help="put these pending jobs back to the size they had before tuning")
    p.add_argument("--log", type=Path, help="the change log (default: SYNERGY_TUNE_LOG, else "
                   "~/.slurm-synergy/tune.jsonl)")
    p.set_defaults(func=run)


def _is_admin(slurm: Slurm, me: str) -> bool:
    return os.geteuid() == 0 or me == slurm.config().get("SlurmUser", "").split("(")[0]


def _one_pass(slurm: Slurm, args, me: str, admin: bool, log: Path) -> int:
    queue = slurm.queue(() if admin else (me,))
    partition = args.partition or slurm.default_partition()
    changes, notes = plan_resizes(queue, slurm.node_use(partition), me, admin, partition,
                          tuned=applying.in_force(log), memory_per_cpu=slurm.memory_per_cpu)
    for line in notes:
        print(f"  leave {line}")
    failed = 0
    for c in changes:
        if args.dry_run:
            print(f"would tune {c.job_id} ({c.user}): {c.why}")
            continue
        error = applying.apply(slurm, c, log)
        if error:
            failed += 1
            print(f"could not tune {c.job_id}: {error}", file=sys.stderr)
        else:
            print(f"tuned {c.job_id} ({c.user}): {c.why}")
    if not changes:
        print("nothing to tune")
    return 1 if failed else 0


def run(args: argparse.Namespace) -> int:
    """One pass of Synergy-TUNE's fallback over the pending jobs (every user's for an
    admin, else one's own), or one every --every seconds; --revert puts jobs back."""
    slurm = Slurm()
    log = args.log or applying.log_path()
    if args.revert:
        for job in args.revert:
            rec = applying.revert(slurm, job, log)
            print(f"reverted {job}: back to {rec['cpus_before']} cores, "
                  f"{rec['mem_before_mb']} MB")
        return 0
    me = user_name()
    admin = _is_admin(slurm, me)
    print(f"tune as {me}{' (admin: every user)' if admin else ' (own jobs only)'}; "
          f"log {log}", file=sys.stderr)
    if args.every is None:
        return _one_pass(slurm, args, me, admin, log)
    if not args.every >= 5:
        raise SynergyError("--every must be at least 5 seconds")
    while True:
        try:
            _one_pass(slurm, args, me, admin, log)
        except SynergyError as e:        # a daemon outlives a slurmctld restart
            print(f"synergy tune: {e}", file=sys.stderr)
        time.sleep(args.every)
