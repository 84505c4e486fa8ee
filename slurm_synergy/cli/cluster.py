"""`synergy cluster up|down|status`: the local Slurm cluster."""

from __future__ import annotations

import argparse

from slurm_synergy.argtypes import non_negative_float
from slurm_synergy.decisions.sync import TIMER_EVERY_S


def add_parser(sub) -> None:
    """`cluster up|down|status`."""
    p = sub.add_parser("cluster", help="the local Slurm cluster: up, down, status")
    p.add_argument("action", choices=("up", "down", "status"))
    p.add_argument("--sync-every", type=non_negative_float, default=TIMER_EVERY_S,
                   metavar="SECONDS", help="up: root's sync of the decision table runs "
                   "this often, as a site's cron (default %(default)s; 0: no timer, the "
                   "table is compiled only by `up` and by hand)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Start, stop or check the local cluster; status exits 1 where it is not healthy."""
    from slurm_synergy.cluster.localbox import LocalCluster

    box = LocalCluster(sync_every_s=args.sync_every)
    if args.action == "up":
        box.up()
    elif args.action == "down":
        box.down()
    else:
        healthy, lines = box.status()
        print("\n".join(lines))
        return 0 if healthy else 1
    return 0
