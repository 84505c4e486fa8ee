"""Time limits in the queue model, side by side: what backfill does with the limits users
ask, with a history-based --time, and with slurm-synergy's --time-min.

The model is slurm_synergy/simulate/slurmqueue.py (priority order, the main scheduler's
stop, backfill against time limits), run three ways on each queue:

  asked    every job's --time as its user asked it
  history  a user's jobs get the mean of the user's last two ended runs as --time
           (Tsafrir et al.'s predictor, as the kill time): a job that runs longer is
           killed, its work lost
  ours     --time-min from the workload's ended jobs (model/runtime.py, the rule the
           sync timer applies), the limit put back to --time before it would end a job

Queues:
  synergy-static   Synergy's 100-job deployment trace (all at t=0, one GPU each)
  synergy-dynamic  Synergy's dynamic workload (1-8 GPUs a job, 9 arrivals an hour), 100 jobs
      both on Synergy's deployment cluster pooled into one node (96 cores, 32 GPUs,
      2000 GB), each job asking the GPU-proportional share (3 cores, 62.5 GB a GPU) and
      running its trace's iterations at that share's speed; the traces carry no limits,
      so each job asks the next whole hour past twice its run (an assumption: users ask
      generously); a user is a model's jobs, a workload (the key a --time-min follows)
      its jobs of one length; backfill every 300 s for jobs of hours
  local-bench      bench_cluster.py's queue (--from its cluster.json): each round's
      right-sized flow, its submissions, sizes and the run times measured there

Writes DIR/timelimits.json and DIR/timelimits.md; takes a few seconds.

    .venv/bin/python bench/bench_timelimits.py [--from bench/results/cluster.json] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from slurm_synergy.simulate.dynamic import dynamic_trace  # noqa: E402
from slurm_synergy.simulate.slurmqueue import (LIMITS, Node, QueueJob, Size,  # noqa: E402
                                               figures, run_queue)
from slurm_synergy.simulate.trace import REFERENCE_TRACE, SimJob, read_trace  # noqa: E402
from slurm_synergy.simulate.workload import read_matrix  # noqa: E402

DEPLOYMENT = Node(cpus=96, mem_mb=2_000_000, gpus=32)
SHARE = (3, 62_500)               # cores and MB a GPU
TRACE_BF_S = 300.0


def trace_queue(jobs: list[SimJob]) -> list[QueueJob]:
    """A trace's jobs as the pooled cluster's queue: the share asked, generous limits."""
    matrix = read_matrix()
    out = []
    for n, j in enumerate(jobs, start=1):
        run_s = j.iters * matrix[j.model].iter_s
        limit_s = 3600.0 * math.ceil(2 * run_s / 3600)
        # A workload key is a script and its arguments: a model's jobs of other lengths
        # are other workloads; the history predictor follows the user (one a model).
        out.append(QueueJob(n, f"{j.model}:{j.iters}", j.arrival_s, limit_s,
                            Size(SHARE[0] * j.gpus, SHARE[1] * j.gpus, run_s, j.gpus),
                            user=j.model))
    return out


def bench_queues(path: Path) -> list[list[QueueJob]]:
    """Each round's right-sized flow of bench_cluster.py, as its queue model takes it."""
    from bench_cluster import Job, queue_of    # its own queue builder, one place
    data = json.loads(path.read_text())
    out = []
    for run in data["rounds"]:
        asked = [Job(**j) for j in run["asked"]["per_job"]]
        jobs = [Job(**j) for j in run["synergy"]["per_job"]]
        asked_run_s = {w: sorted(j.elapsed_s for j in asked if j.workload == w)[
            len([j for j in asked if j.workload == w]) // 2] for w in {j.workload for j in asked}}
        out.append(queue_of(jobs, asked_run_s))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--from", dest="source", type=Path,
                   default=ROOT / "bench" / "results" / "cluster.json",
                   help="bench_cluster.py's cluster.json (its local queue; skipped if absent)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = p.parse_args()
    matrix = read_matrix()
    queues: dict[str, tuple[list[list[QueueJob]], Node, float]] = {
        "synergy-static": ([trace_queue(read_trace(REFERENCE_TRACE))], DEPLOYMENT,
                           TRACE_BF_S),
        "synergy-dynamic": ([trace_queue(dynamic_trace(100, 9.0, matrix))], DEPLOYMENT,
                            TRACE_BF_S)}
    if args.source.exists():
        queues["local-bench"] = (bench_queues(args.source), Node(2, 21695, 4), 30.0)
    rows = []
    for name, (rounds, node, bf_s) in queues.items():
        for limits in LIMITS:
            f = [figures(run_queue(q, node, bf_interval_s=bf_s, limits=limits))
                 for q in rounds]
            rows.append({"queue": name, "limits": limits, "rounds": len(rounds),
                         "jobs": sum(len(q) for q in rounds),
                         **{k: sum(getattr(x, k) for x in f) / len(f)
                            for k in ("mean_wait_s", "mean_jct_s", "makespan_s")},
                         "killed": sum(x.killed for x in f),
                         "past_time_min": sum(x.past_time_min for x in f)})
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "timelimits.json").write_text(json.dumps({"at": when, "rows": rows},
                                                         indent=1) + "\n")
    lines = [f"Time limits in the queue model ({when}; `bench/bench_timelimits.py`).", "",
             "| queue | limits | jobs | mean wait s | mean JCT s | makespan s | killed | "
             "ran past time_min |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['queue']} | {r['limits']} | {r['jobs']} | {r['mean_wait_s']:.0f} | "
              f"{r['mean_jct_s']:.0f} | {r['makespan_s']:.0f} | {r['killed']} | "
              f"{r['past_time_min']} |" for r in rows]
    (args.out / "timelimits.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
