"""`synergy report`: per-job resources, GPU energy and utilisation, from sacct and the
node epilogs' GPU stats."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from slurm_synergy.model.errors import SynergyError


def add_parser(sub) -> None:
    """`report [JOBS] [--since/--until/--user] [--format] [--tasks] [--out]`."""
    p = sub.add_parser("report", help="per-job resources, GPU energy and utilisation, "
                       "from sacct and the node epilogs' GPU stats")
    p.add_argument("--jobs", type=lambda v: [j for j in v.split(",") if j], default=[],
                   help="these job ids (comma-separated) instead of a period")
    p.add_argument("--since", help="start of the period, as sacct takes it (default: now-1days)")
    p.add_argument("--until", help="end of the period (default: now)")
    p.add_argument("--user", type=lambda v: [u for u in v.split(",") if u], default=[],
                   help="only these users' jobs (comma-separated)")
    p.add_argument("--format", choices=("table", "csv", "html", "json"), default="table",
                   help="what goes to the terminal (html: the page only, in --out)")
    p.add_argument("--tasks", action="store_true",
                   help="an array's tasks one by one (default: one line per array)")
    p.add_argument("--out", type=Path, help="also write jobs.csv, workloads.csv, PNG plots and "
                   "report.html here (html: default runs/report)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """The jobs' report (the last day's where none are named) as a table, JSON or CSV
    on standard output, and files under --out (or for --format html); problems on
    standard error."""
    from slurm_synergy.report import output
    from slurm_synergy.report.build import build
    from slurm_synergy.slurm import Slurm

    if not args.jobs and args.since is None:
        args.since = "now-1days"
    report = build(Slurm(), args.jobs, args.since, args.until, args.user)
    for line in report.problems:
        print(f"synergy report: {line}", file=sys.stderr)
    if report.empty and args.format == "table":
        print(f"no jobs in {report.period}")
        return 0
    if report.empty:                 # scripts still get a document they can parse
        print(f"synergy report: no jobs in {report.period}", file=sys.stderr)
    if args.format == "json":
        print(output.as_json(report))
    elif args.format == "csv":
        print(output.as_csv(report.jobs), end="")
    elif args.format == "table":
        print(output.text(report, args.tasks))
    if (args.out or args.format == "html") and not report.empty:
        out = args.out or Path("runs/report")
        try:
            written = output.write(report, out, args.tasks)
        except OSError as e:
            raise SynergyError(f"cannot write the report to {out}: {e.strerror or e}") from None
        print(f"report: {', '.join(str(p) for p in written)}", file=sys.stderr)
    return 0
