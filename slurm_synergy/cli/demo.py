"""`synergy demo`: the local cluster up, example jobs in, the sacct table out."""

from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    """`demo`."""
    p = sub.add_parser("demo", help="local cluster up, example jobs in, sacct table out")
    p.add_argument("--user", help="the ordinary user who submits a batch script of their own "
                   "(default: synergy-demo, made where missing and kept)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """The demo's run (slurm_synergy/demo.py); its exit status."""
    from slurm_synergy.demo import run_demo

    return run_demo(**({"user": args.user} if args.user else {}))
