"""What right-sizing does to a site's queue: the Slurm queue model on real clusters' shapes.

The model is slurm_synergy/simulate/slurmqueue.py (many nodes, priority/basic, the main
scheduler and backfill at Slurm's defaults: bf_interval 30 s, bf_resolution 60 s,
bf_window 1 day, bf_max_job_test 500, default_queue_depth 100). The queue is Synergy's
dynamic workload (its generator, slurm_synergy/simulate/dynamic.py: 1-8 GPUs a job,
mostly 30 minutes to 17 hours at the GPU-proportional share, image/language/speech
20/70/10) at a rate that brings `load` times the cluster's GPU-hours an hour, asked for
as users ask (slurm_synergy/simulate/sitejobs.py: cores and memory over efficiencies
drawn from Beta(3, 2) and Beta(2, 8.5), means 0.6 and 0.19 as King's College London's
CREATE accounting reports, at most a node (--habits over) or at most the GPU-proportional
share (share: a site that caps asks per GPU); a --time the run fills 10-100% of), by 16
users. Four flows (sitejobs.FLOWS): as asked, right-sized (measured in each workload's
first run), right-sized with --time-min, and Slurm 26.05's --mem-update=10@5 alone.

Shapes:
  synergy-4, synergy-16   Synergy's deployment servers: 8 GPUs, 24 cores, 500 GB each
  h100-16, h100-64        a current GPU node: 8 GPUs, 96 cores, 1 TB each

Per shape, load and flow: mean JCT, mean and p99 wait, makespan, and the GPU-hours left
idle while jobs waited on nodes with too few free cores or too little free memory for
any waiting job's share of a GPU; the JCT ratio as asked over right-sized beside
Synergy's 1.5x (its testbed, 4 such servers, dynamic trace). --jobs-per-gpu jobs (12)
per GPU of the cluster, all of them counted. The seconds each run of the model took are
kept too. Writes DIR/site.json and DIR/site.md.

    .venv/bin/python bench/bench_site.py [--quick] [--loads 0.6,0.8,1.0,1.2]
                                         [--habits over,share] [--jobs-per-gpu 12] [--out DIR]
    .venv/bin/python bench/bench_site.py --speed 1000000    # the model's time, printed
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_synergy.simulate.cluster import ClusterSpec, Server  # noqa: E402
from slurm_synergy.simulate.dynamic import dynamic_trace  # noqa: E402
from slurm_synergy.simulate.sitejobs import Habits, rate_for_load  # noqa: E402
from slurm_synergy.simulate.siterun import run_flows  # noqa: E402
from slurm_synergy.simulate.workload import read_matrix  # noqa: E402

SYNERGY_SERVER, H100_NODE = Server(8, 24, 500), Server(8, 96, 1024)
SHAPES = {"synergy-4": (4, SYNERGY_SERVER), "synergy-16": (16, SYNERGY_SERVER),
          "h100-16": (16, H100_NODE), "h100-64": (64, H100_NODE)}
QUICK = ("synergy-4",)
SYNERGY_TESTBED_JCT = 1.5      # Synergy (OSDI'22), its 4-server testbed, dynamic trace


HABITS = {"over": Habits(), "share": Habits(at_most_share=True)}


def one(shape: str, load: float, jobs_per_gpu: int, habits: str) -> list[dict]:
    """Every flow on one shape at one load, users asking by `habits`."""
    count, server = SHAPES[shape]
    cluster = ClusterSpec(shape, (server,) * count)
    workloads = read_matrix()
    trace = dynamic_trace(jobs_per_gpu * cluster.gpus, rate_for_load(load, cluster.gpus),
                          workloads)
    return [{"habits": habits, "shape": shape, "load": load, **asdict(f)}
            for f in run_flows(trace, workloads, cluster, habits=HABITS[habits])]


def table(rows: list[dict]) -> str:
    lines = ["| asks | shape | load | flow | mean JCT h | mean wait h | p99 wait h | makespan h "
             "| GPU-h idle for cores/memory | JCT as asked / flow |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    asked = {(r["habits"], r["shape"], r["load"]): r for r in rows if r["flow"] == "asked"}
    for r in rows:
        base = asked[(r["habits"], r["shape"], r["load"])]
        lines.append(f"| {r['habits']} | {r['shape']} | {r['load']:g} | {r['flow']} | {r['mean_jct_h']:.1f} "
                     f"| {r['mean_wait_h']:.1f} | {r['p99_wait_h']:.1f} | {r['makespan_h']:.0f} "
                     f"| {r['stranded_gpu_h']:.0f} "
                     f"| {base['mean_jct_h'] / r['mean_jct_h']:.2f}x |")
    return "\n".join(lines)


def speed(jobs: int) -> int:
    """One right-sized run of `jobs` jobs on 16,384 GPUs, timed."""
    cluster = ClusterSpec("h100-2048", (H100_NODE,) * 2048)
    workloads = read_matrix()
    trace = dynamic_trace(jobs, rate_for_load(1.0, cluster.gpus), workloads)
    f = run_flows(trace, workloads, cluster, flows=("synergy",))[0]
    print(f"{jobs} jobs on {cluster.gpus} GPUs, right-sized, load 1: {f.model_s:.0f} s of "
          f"model time; mean wait {f.mean_wait_h:.2f} h, p99 wait {f.p99_wait_h:.2f} h")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="synergy-4 only (make bench)")
    ap.add_argument("--loads", default="0.6,0.8,1.0,1.2")
    ap.add_argument("--jobs-per-gpu", type=int, default=12)
    ap.add_argument("--habits", default="over,share", help="over: asks over sites' "
                    "efficiencies, at most a node; share: at most the GPU-proportional share")
    ap.add_argument("--speed", type=int, metavar="JOBS", help="instead: the model's seconds "
                    "for JOBS right-sized jobs on 2,048 h100 nodes (16,384 GPUs) at load 1")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    if args.speed:
        return speed(args.speed)
    loads = [float(x) for x in args.loads.split(",")]
    shapes = QUICK if args.quick else tuple(SHAPES)
    habits = args.habits.split(",")
    runs = [(s, load, args.jobs_per_gpu, h) for h in habits for s in shapes for load in loads]
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        rows = [r for flows in pool.map(one, *zip(*runs)) for r in flows]
    asked = {(r["habits"], r["shape"], r["load"]): r["mean_jct_h"] for r in rows
             if r["flow"] == "asked"}
    ratios = {h: [asked[(h, r["shape"], r["load"])] / r["mean_jct_h"] for r in rows
                  if r["flow"] == "synergy" and r["habits"] == h] for h in habits}
    doc = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "command": "bench/bench_site.py " + " ".join(argv or sys.argv[1:]),
           "habits": {h: asdict(HABITS[h]) for h in habits},
           "synergy_testbed_jct": SYNERGY_TESTBED_JCT, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "site.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    md = (f"# The Slurm queue model on sites' shapes ({doc['when']})\n\n`{doc['command']}`\n\n"
          + table(rows) + "\n\nMean JCT as asked over right-sized, median (range): "
          + "; ".join(f"asks {h} {statistics.median(r):.2f}x ({min(r):.2f}-{max(r):.2f})"
                      for h, r in ratios.items())
          + f"; Synergy's on its testbed {SYNERGY_TESTBED_JCT}x. The model took "
          f"{sum(r['model_s'] for r in rows):.0f} s for {sum(r['jobs'] for r in rows)} jobs.\n")
    (args.out / "site.md").write_text(md, encoding="utf-8")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
