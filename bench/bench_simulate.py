"""Simulator scale: 10,000 jobs on 64 servers x 8 GPUs (goal: under a minute on 2 cores),
the allocators' time per round at 128 and 512 GPUs, and the policy comparison on
Poisson traces at several loads. Figures go to bench/results/simulate.json."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurm_synergy.simulate import results  # noqa: E402
from slurm_synergy.simulate.cluster import load_cluster  # noqa: E402
from slurm_synergy.simulate.simulator import Setup, simulate  # noqa: E402
from slurm_synergy.simulate.trace import poisson_trace  # noqa: E402
from slurm_synergy.simulate.workload import read_matrix  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "simulate.json"
WORK = read_matrix()


def scale() -> list[dict]:
    cluster = load_cluster("512-gpu")
    trace = poisson_trace(10_000, 0.9, cluster.gpus, WORK, seed=1, max_gpus=8)
    rows = []
    for alloc in ("proportional", "tune", "synergy-slurm"):
        s = results.summarise(simulate(trace, WORK, cluster, Setup("fifo", alloc, "matrix")))
        rows.append({"alloc": alloc, "jobs": 10_000, "gpus": cluster.gpus, "rounds": s.rounds,
                     "wall_s": round(s.wall_s, 2), "mean_jct_h": round(s.mean_jct_h, 3),
                     "makespan_h": round(s.makespan_h, 2)})
        print(rows[-1], flush=True)
    return rows


def per_round() -> list[dict]:
    """Allocator time per round, on traces that keep the cluster full (load 1.3): the
    first 40 rounds of the queue's steady state."""
    rows = []
    for name in ("128-gpu", "512-gpu"):
        cluster = load_cluster(name)
        jobs = cluster.gpus * 3
        trace = poisson_trace(jobs, 1.3, cluster.gpus, WORK, seed=2, max_gpus=8)
        for alloc in ("proportional", "tune", "synergy-slurm", "opt"):
            out = simulate(trace, WORK, cluster, Setup("fifo", alloc, "matrix"))
            busy = [t * 1000 for t, n in zip(out.rounds.alloc_s, out.rounds.running)
                    if n >= 0.5 * cluster.gpus / 2]
            rows.append({"cluster": name, "alloc": alloc, "rounds": len(busy),
                         "ms_per_round_median": round(statistics.median(busy), 2),
                         "ms_per_round_max": round(max(busy), 2),
                         "jobs_running_max": max(out.rounds.running)})
            print(rows[-1], flush=True)
    return rows


# opt takes ~10 s a run at 128 GPUs; the comparison runs it on the small cluster only.
COMPARED = {"deployment": ("proportional", "tune", "opt", "synergy-slurm"),
            "128-gpu": ("proportional", "tune", "synergy-slurm")}


def comparison() -> list[dict]:
    """Each allocator against TUNE on 300-job Poisson traces: 3 loads x 5 seeds x FIFO,
    SRTF and LAS, side by side on the same traces."""
    rows = []
    for name, allocs in COMPARED.items():
        cluster = load_cluster(name)
        for load in (0.6, 0.9, 1.2):
            for seed in range(1, 6):
                trace = poisson_trace(300, load, cluster.gpus, WORK, seed=seed, max_gpus=8)
                for order in ("fifo", "srtf", "las"):
                    got = {a: results.summarise(simulate(trace, WORK, cluster,
                                                         Setup(order, a, "matrix")))
                           for a in allocs}
                    rows.append({"cluster": name, "load": load, "seed": seed, "order": order,
                                 **{f"{a}_jct_h": round(s.mean_jct_h, 4) for a, s in got.items()},
                                 **{f"{a}_makespan_h": round(s.makespan_h, 3)
                                    for a, s in got.items()}})
                    print(rows[-1], flush=True)
    return rows


def against_tune(rows: list[dict]) -> list[dict]:
    """Per cluster, load and allocator: runs with shorter / equal / longer mean JCT and
    makespan than TUNE's (equal: within 0.01%), and the mean and worst differences."""
    out = []
    keys = sorted({(r["cluster"], r["load"]) for r in rows}, key=lambda k: (k[0], k[1]))
    for name, load in keys:
        runs = [r for r in rows if r["cluster"] == name and r["load"] == load]
        for a in COMPARED[name]:
            if a == "tune":
                continue
            dj = [r[f"{a}_jct_h"] / r["tune_jct_h"] - 1 for r in runs]
            dm = [r[f"{a}_makespan_h"] - r["tune_makespan_h"] for r in runs]
            out.append({
                "cluster": name, "load": load, "alloc": a, "runs": len(runs),
                "jct_shorter": sum(d < -1e-4 for d in dj),
                "jct_equal": sum(abs(d) <= 1e-4 for d in dj),
                "jct_longer": sum(d > 1e-4 for d in dj),
                "jct_mean_change_pct": round(100 * statistics.mean(dj), 2),
                "jct_worst_change_pct": round(100 * max(dj), 2),
                "makespan_shorter": sum(d < -1e-6 for d in dm),
                "makespan_equal": sum(abs(d) <= 1e-6 for d in dm),
                "makespan_longer": sum(d > 1e-6 for d in dm),
                "makespan_worst_change_h": round(max(dm), 2)})
            print(out[-1], flush=True)
    return out


def main() -> None:
    began = time.perf_counter()
    figures = {"machine": f"{platform.node()}, {os.cpu_count()} CPUs",
               "scale_10k_jobs_512_gpus": scale(), "allocator_per_round": per_round(),
               "poisson_comparison": comparison()}
    figures["against_tune"] = against_tune(figures["poisson_comparison"])
    figures["bench_s"] = round(time.perf_counter() - began, 1)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
