"""synergy: right-size deep-learning training jobs on Slurm.

Commands talk to the cluster named by SLURM_CONF, else to the one of Slurm's default
slurm.conf; the local cluster (`synergy cluster up`) prints the SLURM_CONF that names it.
"""

from __future__ import annotations

import argparse
import sys

from slurm_synergy.cli import (cluster, demo, hetero, hooks, jobs, plugin, profile, profiles,
                               reconcile, report, simulate, submit, tune)
from slurm_synergy import slurm_release
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.slurm import Slurm

# The verbs that read or change a site's cluster: each says first where its release is
# not one slurm-synergy was tested on (plugin and hooks install refuse one).
ON_A_CLUSTER = {"submit", "reconcile", "jobs", "plugin", "report", "tune"}
# One module per verb, each with add_parser(sub) and run(args); in --help's order.
VERBS = (cluster, submit, reconcile, jobs, profile, profiles, plugin, hooks, report, simulate,
         tune, hetero, demo)


def build_parser() -> argparse.ArgumentParser:
    """The synergy command's parser, a sub-parser per verb (but profile's, its own)."""
    parser = argparse.ArgumentParser(prog="synergy", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for verb in VERBS:
        verb.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one verb on `argv` (default: sys.argv); its exit status. A SynergyError is one
    line on standard error and status 1."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["profile"]:
        return profile.run_argv(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        if args.command in ON_A_CLUSTER:
            say_release()
        return args.func(args)
    except SynergyError as exc:
        print(f"synergy: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def say_release() -> None:
    """One line on standard error where the cluster's Slurm (its own `scontrol --version`,
    read once) is not a release slurm-synergy was tested on."""
    try:
        note = slurm_release.untested(Slurm().version())
    except SynergyError:
        return          # no Slurm to ask: the verb itself says so, in its own words
    if note:
        print(f"synergy: note: {note}", file=sys.stderr)
