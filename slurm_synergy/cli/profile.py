"""`synergy profile [options] SCRIPT [args]`: profile a workload inside its allocation.
The profiler (profiler/offline_profiler.py) parses its own options, then the script's."""

from __future__ import annotations

from typing import Sequence


def add_parser(sub) -> None:
    """`profile`: its options are the profiler's own."""
    sub.add_parser("profile", add_help=False,
                   help="profile a workload inside its allocation (profiler/offline_profiler.py)")


def run_argv(argv: Sequence[str]) -> int:
    """The profiler on the rest of the command line; its exit status (measure/errors.py)."""
    from profiler.offline_profiler import main as profile_main

    return profile_main(list(argv), prog="synergy profile")
