"""synergy: right-size deep-learning training jobs on Slurm.

Commands talk to the cluster named by SLURM_CONF, or to the local cluster
(`synergy cluster up`) when SLURM_CONF is not set.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from slurm_synergy.model.errors import SynergyError


def _cluster(args: argparse.Namespace) -> int:
    from slurm_synergy.cluster.localbox import LocalCluster

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


def _submit(args: argparse.Namespace) -> int:
    from slurm_synergy.submit import SubmitOptions, submit_csv

    out = args.out or Path("runs") / args.csv.stem
    opts = SubmitOptions(out=out, dry_run=args.dry_run, sequential=args.sequential,
                         force=args.force, arrays=args.arrays, hold=args.hold,
                         profile=args.profile, mode=args.mode)
    # stdout carries only "job id<TAB>name" lines, for scripts; everything else is stderr.
    result = submit_csv(args.csv, opts, log=lambda line: print(line, file=sys.stderr))
    for name, job_id in result.job_ids.items():
        print(f"{job_id}\t{name}")
    if result.job_ids:
        print(f"submitted {len(result.job_ids)} job(s) in {len(result.units)} sbatch call(s); "
              f"scripts in {out / 'scripts'}", file=sys.stderr)
    return 0


def _reconcile(args: argparse.Namespace) -> int:
    from slurm_synergy.csvjobs import load_jobs
    from slurm_synergy.ledger import Ledger, row_key
    from slurm_synergy.reconcile import reconcile
    from slurm_synergy.slurm import Slurm

    ledger = Ledger()
    with ledger.transaction():
        if args.csv:
            keys = [row_key(s) for csv in args.csv for s in load_jobs(csv)]
            keys = [k for k in keys if k in ledger.entries]
        else:
            keys = list(ledger.entries)
        names = {k: ledger.entries[k].name for k in keys}
        done = reconcile(ledger, keys, Slurm())
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


def _jobs(args: argparse.Namespace) -> int:
    from slurm_synergy.jobs import job_table, records, wait
    from slurm_synergy.slurm import Slurm

    slurm = Slurm()
    recs = wait(slurm, args.job_ids, args.timeout) if args.wait else records(slurm, args.job_ids)
    # An array's id stands for its tasks (12 for 12_0, 12_1, ...).
    missing = [j for j in args.job_ids
               if not any(r.job_id == j or r.job_id.startswith(f"{j}_") for r in recs)]
    if recs:
        print(job_table(recs))
    if missing:
        print(f"synergy: not in accounting: job(s) {', '.join(missing)}", file=sys.stderr)
    done = not args.wait or all(r.state == "COMPLETED" for r in recs)
    return 0 if done and not missing else 1


def _report(args: argparse.Namespace) -> int:
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
        print(output.text(report))
    if (args.out or args.format == "html") and not report.empty:
        out = args.out or Path("runs/report")
        try:
            written = output.write(report, out)
        except OSError as e:
            raise SynergyError(f"cannot write the report to {out}: {e.strerror or e}") from None
        print(f"report: {', '.join(str(p) for p in written)}", file=sys.stderr)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from slurm_synergy.demo import run_demo

    return run_demo()


def _profiles(args: argparse.Namespace) -> int:
    from slurm_synergy.model.profile import ProfileError
    from slurm_synergy.profiles import ProfileStore
    from slurm_synergy.profile_table import plot, profiles_table

    store = ProfileStore(args.store.resolve()) if args.store else ProfileStore.default()
    fps = args.fingerprints or store.fingerprints()
    profiles, broken = [], 0
    for fp in fps:
        # One bad file is named and skipped, as `plugin sync` does; it fails the command
        # only when the user asked for that profile.
        try:
            profiles.append(store.load(fp))
        except ProfileError as exc:
            broken += 1
            print(f"synergy: skipped: {exc}", file=sys.stderr)
    if args.json:
        print("[" + ",\n".join(p.to_json().rstrip() for p in profiles) + "]")
    else:
        print(profiles_table(profiles) if profiles else f"no profiles in {store.root}")
    if args.plot and profiles:
        print(f"plot: {plot(profiles, args.plot)}", file=sys.stderr)
    return 1 if broken and args.fingerprints else 0


def _plugin(args: argparse.Namespace) -> int:
    from slurm_synergy.shim import cli as plugin_cli

    return plugin_cli.run(args)


def _install_options(a: argparse.ArgumentParser) -> None:
    a.add_argument("--apply", action="store_true", help="make the changes, not just print them")
    a.add_argument("--conf", type=Path, help="the cluster's slurm.conf (default: SLURM_CONF, "
                   "else the local cluster's)")


def _plugin_parser(sub) -> None:
    p = sub.add_parser("plugin", help="the decision engine and the job_submit shim")
    actions = p.add_subparsers(dest="action", required=True)
    a = actions.add_parser("sync", help="compile the decision table from the profile store")
    a.add_argument("--table", type=Path, help="where (default: beside slurm.conf)")
    a.add_argument("--partition", help="size decisions for this partition (default: the "
                   "default partition)")
    a = actions.add_parser("explain", help="a workload's decision and every reason for it")
    a.add_argument("fingerprint", help="16 hex digits, as in the job comment synergy:fp=...")
    a.add_argument("--partition", help="as for sync")
    a = actions.add_parser("install", help="the slurm.conf lines and files the shim needs")
    _install_options(a)
    a = actions.add_parser("chains", help="profiling jobs and the jobs they resubmitted")
    a = actions.add_parser("resubmit", help="(run by a job after profiling) submit it again")
    a.add_argument("--job", required=True)
    a.add_argument("--script", type=Path, required=True)
    a.add_argument("--comment", required=True)
    a.add_argument("--job-name", default="")
    a.add_argument("--array-task", default="")
    a.add_argument("--mode", choices=("auto", "shim", "user"), default="auto")
    p.set_defaults(func=_plugin)


def _hooks(args: argparse.Namespace) -> int:
    from slurm_synergy.hooks import cli as hooks_cli

    return hooks_cli.run(args)


def _hooks_parser(sub) -> None:
    p = sub.add_parser("hooks", help="the node prolog/epilog: GPU power caps and energy")
    actions = p.add_subparsers(dest="action", required=True)
    a = actions.add_parser("install", help="the slurm.conf lines and wrappers the hooks need")
    _install_options(a)
    a.add_argument("--stats-dir", type=Path, help="per-job GPU stats, on storage the report "
                   "host shares (default: SYNERGY_GPU_STATS, else /var/lib/slurm-synergy/gpustats)")
    actions.add_parser("gpus", help="this node's GPUs, their limits and the ceiling")
    p.set_defaults(func=_hooks)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="synergy", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("cluster", help="the local Slurm cluster: up, down, status")
    p.add_argument("action", choices=("up", "down", "status"))
    p.set_defaults(func=_cluster)

    p = sub.add_parser("submit", help="submit every row of a job list (CSV)")
    p.add_argument("csv", type=Path, help="job list; see README for its columns")
    p.add_argument("--dry-run", action="store_true", help="validate and write scripts only")
    p.add_argument("--sequential", action="store_true",
                   help="run rows one after another (afterany dependencies)")
    p.add_argument("--out", type=Path, help="folder for scripts, logs and stats "
                   "(default: runs/<csv name>)")
    p.add_argument("--force", action="store_true", help="submit rows already in the ledger again")
    p.add_argument("--arrays", action="store_true",
                   help="submit rows with identical resources and workload as job arrays")
    p.add_argument("--hold", action="store_true",
                   help="leave the jobs held; release them with scontrol release")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--profile", dest="profile", action="store_const", const="always",
                     default="auto", help="profile each workload first, inside its job, even "
                     "where the site policy would not (default: as the policy says)")
    how.add_argument("--no-profile", dest="profile", action="store_const", const="never",
                     help="never profile these jobs; run them as decided or as written")
    how.add_argument("--profile-only", dest="profile", action="store_const", const="only",
                     help="profile each workload, then end the job without training")
    p.add_argument("--mode", choices=("auto", "shim", "user"), default="auto",
                   help="who applies the plugin's decisions: the cluster's job_submit shim, "
                   "or this command (user mode, for clusters without the shim); "
                   "default: the shim where the cluster has it")
    p.set_defaults(func=_submit)

    p = sub.add_parser("reconcile", help="check the submission ledger against Slurm after a "
                       "fault: drop rows Slurm lost, finish cancelling a failed submission")
    p.add_argument("csv", type=Path, nargs="*", help="only these job lists' rows "
                   "(default: every row in the ledger)")
    p.set_defaults(func=_reconcile)

    p = sub.add_parser("jobs", help="a table of jobs from sacct")
    p.add_argument("job_ids", nargs="+", help="job ids (array tasks as 12_3)")
    p.add_argument("--wait", action="store_true", help="wait until all have finished")
    p.add_argument("--timeout", type=float, default=3600, help="seconds to wait at most")
    p.set_defaults(func=_jobs)

    # Parsed by the profiler itself (its options, then the script and the script's own).
    sub.add_parser("profile", add_help=False,
                   help="profile a workload inside its allocation (profiler/offline_profiler.py)")

    p = sub.add_parser("profiles", help="the stored profiles: table, JSON, plot")
    p.add_argument("fingerprints", nargs="*", help="only these (default: all)")
    p.add_argument("--store", type=Path, help="profile store (default: SYNERGY_PROFILES "
                   "or ~/.slurm-synergy/profiles)")
    p.add_argument("--json", action="store_true", help="print the profiles as JSON")
    p.add_argument("--plot", type=Path, help="write throughput against cores to this PNG")
    p.set_defaults(func=_profiles)

    _plugin_parser(sub)
    _hooks_parser(sub)
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
    p.add_argument("--out", type=Path, help="also write jobs.csv, workloads.csv, PNG plots and "
                   "report.html here (html: default runs/report)")
    p.set_defaults(func=_report)

    from slurm_synergy.simulate.cli import add_parser as add_simulate
    from slurm_synergy.tune.cli import add_parser as add_tune
    add_simulate(sub)
    add_tune(sub)

    p = sub.add_parser("demo", help="local cluster up, example jobs in, sacct table out")
    p.set_defaults(func=_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["profile"]:
        from profiler.offline_profiler import main as profile_main

        return profile_main(argv[1:], prog="synergy profile")
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
