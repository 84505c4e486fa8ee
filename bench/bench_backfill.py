"""Backfill with --time-min on real Slurm: short jobs asking generous limits behind a long one.

The queue a lab sees every day, on the local cluster's node1 (2 cores), two users, all
submitted at once: user a's long job (one core, about --long-s seconds, --time 10
minutes), user b's wide job (both cores, --time 10 minutes), then --short short jobs of
one workload (one core, about 30 s, --time 30 minutes "to be safe"), the users taking
turns. Priority is submission order (priority/basic): the wide job waits for the long
one and holds a reservation at the long job's limit; backfill (every 30 s) starts a
short job on the free core only if its limit ends before that reservation, which 30
minutes never does.

The long and wide jobs are someone else's, opted out (--comment=synergy:off). The short
jobs are a keyed plain script: a warm-up runs each user's once (measured while it
trains, decided, in sacct), and every flow after it uses that one profile store, so the
two flows differ in the policy's time limits alone:

  time-asked  policy time_min = false: every job keeps the limit it asked
  timemin     the shipped policy: root's time-limit timer sets --time-min on the short jobs from
              their key's completed runs (model/runtime.py)

Flows interleaved over --rounds (the order turned each round). Per flow and round, from
sacct: the short jobs' mean wait, every job's mean wait and JCT, the makespan, the short
jobs that started before the wide one, those given a time_min and those that ran past
it, failures (a TIMEOUT is one). Needs root and the local cluster; run it from a clone
of its own with nothing else running. Writes DIR/backfill.json and DIR/backfill.md.

    .venv/bin/python bench/bench_backfill.py [--rounds 3] [--short 3] [--long-iterations N]
                                             [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_cluster import (PYTHON, USERS, WORKLOADS, Job, bench_cluster,  # noqa: E402
                           bench_policy, fresh_cluster, give, make_data, read_jobs, submit)
from slurm_synergy.cluster.localbox import PARTITION  # noqa: E402
from slurm_synergy.jobs import wait  # noqa: E402
from slurm_synergy.model.comment import OPT_OUT  # noqa: E402

FLOWS = ("time-asked", "timemin")
SCRIPT = """#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --cpus-per-task={cpus}
#SBATCH --mem={mem}
#SBATCH --gres=gpu:1
#SBATCH --time={minutes}
#SBATCH --partition={partition}
#SBATCH --output={folder}/%x-%j.out
{comment}{python} -m profiler.train {args}
"""


def scripts(work: Path, data: Path, long_iterations: int) -> dict[str, Path]:
    """Each user's folder (theirs, 0700) with the three scripts: long, wide, short."""
    text = WORKLOADS["text"].format(data=data)
    shapes = {
        "long": dict(cpus=1, mem="1G", minutes=10, comment=f"#SBATCH --comment={OPT_OUT}\n",
                     args=text.replace("--max-iterations 60",
                                       f"--max-iterations {long_iterations}")),
        "wide": dict(cpus=2, mem="2G", minutes=10, comment=f"#SBATCH --comment={OPT_OUT}\n",
                     args=WORKLOADS["image"].format(data=data)),
        "short": dict(cpus=1, mem="2G", minutes=30, comment="", args=text),
    }
    folders = {}
    for user in USERS:
        folder = work / user
        folder.mkdir()
        for name, shape in shapes.items():
            (folder / f"{name}.sh").write_text(SCRIPT.format(
                name=name, folder=folder, python=PYTHON, partition=PARTITION, **shape))
        give(user, folder)
        folders[user] = folder
    return folders


def plan(short: int) -> list[tuple[str, str]]:
    """(user, script) in submission order: a's long job, b's wide one, the short ones."""
    return [(USERS[0], "long"), (USERS[1], "wide")] + \
        [(USERS[i % 2], "short") for i in range(short)]


def figures(jobs: list[Job]) -> dict:
    shorts = [j for j in jobs if j.workload == "short"]
    (wide,) = [j for j in jobs if j.workload == "wide"]
    return {
        "failed": [f"{j.job_id} {j.state}" for j in jobs if j.state != "COMPLETED"],
        "short_mean_wait_s": statistics.mean(j.start_s - j.submit_s for j in shorts),
        "mean_wait_s": statistics.mean(j.start_s - j.submit_s for j in jobs),
        "mean_jct_s": statistics.mean(j.end_s - j.submit_s for j in jobs),
        "makespan_s": max(j.end_s for j in jobs) - min(j.submit_s for j in jobs),
        "long_run_s": next(j.elapsed_s for j in jobs if j.workload == "long"),
        "short_before_wide": sum(j.start_s < wide.start_s for j in shorts),
        "time_min_set": sum(j.time_min_s > 0 for j in shorts),
        "ran_past_time_min": sum(0 < j.time_min_s < j.elapsed_s for j in shorts),
        "predicted_over_actual": [round(j.predicted_s / j.elapsed_s, 3) for j in shorts
                                  if j.predicted_s and j.elapsed_s],
        "per_job": [asdict(j) for j in jobs],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--short", type=int, default=3, help="short jobs in the queue")
    p.add_argument("--long-iterations", type=int, default=500,
                   help="the long job's iterations (500: about 150 s on one core here)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = p.parse_args()
    runs: list[dict] = []
    with bench_cluster(USERS, "bench-backfill") as (slurm, work):
        folders = scripts(work, make_data(work), args.long_iterations)
        policies = {"time-asked": bench_policy(work, "synergy"),
                    "timemin": bench_policy(work, "timemin")}
        store = work / "store"
        store.mkdir()
        store.chmod(0o1777)
        # The warm-up: each user's short job measured and decided, and in sacct.
        fresh_cluster(store, policies["time-asked"])
        ids = submit("warm-up", [(u, "short") for u in USERS], 0, folders, store,
                     policies["time-asked"])
        wait(slurm, list(ids), timeout_s=1800)
        for r in range(args.rounds):
            one: dict = {"round": r + 1}
            for flow in FLOWS if r % 2 == 0 else FLOWS[::-1]:
                fresh_cluster(store, policies[flow])
                ids = submit(flow, plan(args.short), 0, folders, store, policies[flow])
                wait(slurm, list(ids), timeout_s=3600)
                one[flow] = figures(read_jobs(slurm, ids))
                print(f"round {r + 1} {flow}: jobs {min(ids, key=int)}-"
                      f"{max(ids, key=int)}", file=sys.stderr)
            runs.append(one)
            write(args, runs)        # each round's figures kept as it ends
    return 1 if any(run[f]["failed"] for run in runs for f in FLOWS) else 0


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f})"


def write(args: argparse.Namespace, runs: list[dict]) -> None:
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    args.out.mkdir(parents=True, exist_ok=True)
    # A wait of under a second is a second: the ratio stays finite.
    ratios = {key: [r["time-asked"][key] / max(r["timemin"][key], 1.0) for r in runs]
              for key in ("short_mean_wait_s", "mean_wait_s", "mean_jct_s", "makespan_s")}
    (args.out / "backfill.json").write_text(json.dumps(
        {"at": when, "short": args.short, "long_iterations": args.long_iterations,
         "rounds": runs, "time_asked_over_timemin": ratios}, indent=1) + "\n")
    cmd = f"bench/bench_backfill.py --rounds {args.rounds} --short {args.short} " \
        f"--long-iterations {args.long_iterations}"
    lines = [f"A long job, a wide job and {args.short} short jobs asking 30 minutes, on the "
             f"local cluster's node1 (2 cores), two users, {len(runs)} round(s), flows "
             f"interleaved ({when}; `{cmd}`).", "",
             "| round | flow | short jobs' mean wait s | mean wait s | mean JCT s | "
             "makespan s | long job ran s | short started before wide | "
             "time_min set (ran past) | failed |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        for flow in FLOWS:
            f = run[flow]
            lines.append(
                f"| {run['round']} | {flow} | {f['short_mean_wait_s']:.0f} | "
                f"{f['mean_wait_s']:.0f} | {f['mean_jct_s']:.0f} | {f['makespan_s']:.0f} | "
                f"{f['long_run_s']:.0f} | {f['short_before_wide']}/{args.short} | "
                f"{f['time_min_set']} ({f['ran_past_time_min']}) | {len(f['failed'])} |")
    lines += ["", "time-asked over timemin (median of rounds, min-max):", "",
              f"- short jobs' mean wait: {_spread(ratios['short_mean_wait_s'])}",
              f"- every job's mean wait: {_spread(ratios['mean_wait_s'])}",
              f"- mean JCT: {_spread(ratios['mean_jct_s'])}",
              f"- makespan: {_spread(ratios['makespan_s'])}"]
    pred = sorted(x for run in runs for x in run["timemin"]["predicted_over_actual"])
    if pred:
        lines += ["", f"Predicted over actual run of the {len(pred)} short jobs given a "
                  f"time_min: median {statistics.median(pred):.2f}, min {pred[0]:.2f}, "
                  f"max {pred[-1]:.2f}."]
    (args.out / "backfill.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
