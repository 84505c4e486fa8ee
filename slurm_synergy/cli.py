"""The `synergy` command."""

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="synergy", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("cluster", help="the local Slurm cluster: up, down, status")
    p.add_argument("action", choices=("up", "down", "status"))
    p.set_defaults(func=_cluster)
    return parser


def main(argv: list[str] | None = None) -> int:
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
