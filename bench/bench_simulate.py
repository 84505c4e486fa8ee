"""Simulator scale: 100,000 jobs on 512 servers x 8 GPUs (goal: under two minutes on 2
cores for every policy but opt), the allocators' time per round at 128 and 512 GPUs, the
policy comparison on Poisson traces at several loads, and on Synergy's dynamic workload
under both speed rules, and the three profiling flows there. Figures go to
bench/results/simulate.json; name sections (scale, per_round, poisson, dynamic,
opt_dynamic, flows) to run only those and keep the file's others."""

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
from slurm_synergy.simulate.cluster import ClusterSpec, Server, load_cluster  # noqa: E402
from slurm_synergy.simulate.dynamic import dynamic_trace  # noqa: E402
from slurm_synergy.simulate.flows import FLOWS  # noqa: E402
from slurm_synergy.simulate.simulator import Setup, simulate  # noqa: E402
from slurm_synergy.simulate.trace import poisson_trace  # noqa: E402
from slurm_synergy.simulate.workload import read_matrix  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "simulate.json"
WORK = read_matrix()


def scale() -> list[dict]:
    cluster = ClusterSpec("4096-gpu", (Server(8, 24, 500),) * 512)
    trace = poisson_trace(100_000, 0.9, cluster.gpus, WORK, seed=1, max_gpus=8)
    rows = []
    for alloc in ("proportional", "greedy", "tune", "synergy-slurm"):
        s = results.summarise(simulate(trace, WORK, cluster, Setup("fifo", alloc, "matrix")))
        rows.append({"alloc": alloc, "jobs": len(trace), "gpus": cluster.gpus,
                     "rounds": s.rounds,
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


# Synergy's default dynamic run: 128 GPUs, FIFO, jobs 4000-4999 measured; arrivals go
# on past the window so that its last jobs still queue behind others, as in Synergy's.
DYNAMIC_JOBS, DYNAMIC_WINDOW = 5_500, (4000, 4999)
DYNAMIC_ALLOCS = ("proportional", "tune", "synergy-slurm")


def dynamic() -> list[dict]:
    """Seeds x rates x GPU mixes x speed rules: each allocator's mean JCT and makespan over
    the measured window, side by side on the same trace."""
    cluster = load_cluster("128-gpu")
    rows = []
    for rate in (6.0, 9.0):
        for gpus in ("single", "mix"):
            for seed in (42, 1, 2):
                trace = dynamic_trace(DYNAMIC_JOBS, rate, WORK, gpus, seed=seed)
                for speed in ("synergy", "matrix"):
                    got = {a: results.summarise(simulate(trace, WORK, cluster,
                                                         Setup("fifo", a, speed)),
                                                DYNAMIC_WINDOW)
                           for a in DYNAMIC_ALLOCS}
                    rows.append({"rate": rate, "gpus": gpus, "seed": seed, "speed": speed,
                                 **{f"{a}_jct_h": round(s.mean_jct_h, 4)
                                    for a, s in got.items()},
                                 **{f"{a}_makespan_h": round(s.makespan_h, 3)
                                    for a, s in got.items()}})
                    print(rows[-1], flush=True)
    return rows


def opt_dynamic() -> list[dict]:
    """opt's time per run and per round on Synergy's dynamic workload at 9 jobs/h, under
    Synergy's speed rule, beside TUNE's mean JCT on the same trace."""
    cluster = load_cluster("128-gpu")
    rows = []
    for gpus in ("single", "mix"):
        trace = dynamic_trace(DYNAMIC_JOBS, 9.0, WORK, gpus, seed=42)
        runs = {a: simulate(trace, WORK, cluster, Setup("fifo", a, "synergy"))
                for a in ("opt", "tune")}
        ms = sorted(t * 1000 for t in runs["opt"].rounds.alloc_s)
        rows.append({"gpus": gpus, "rounds": len(ms), "opt_wall_s": round(runs["opt"].wall_s, 1),
                     "ms_per_round_median": round(statistics.median(ms), 2),
                     "ms_per_round_max": round(ms[-1], 2),
                     **{f"{a}_jct_h": round(results.summarise(o, DYNAMIC_WINDOW).mean_jct_h, 2)
                        for a, o in runs.items()}})
        print(rows[-1], flush=True)
    return rows


def flows() -> list[dict]:
    """Synergy's dynamic run (seed 42, 1/2/4/8 GPUs, FIFO, 128 GPUs, the matrix) under
    the project's allocator, each flow on the same trace: mean JCT and GPU-hours over
    the measured window and over every job (a workload's first jobs come early, long
    before the window)."""
    cluster = load_cluster("128-gpu")
    rows = []
    for rate in (6.0, 9.0):
        trace = dynamic_trace(DYNAMIC_JOBS, rate, WORK, "mix", seed=42)
        for flow in FLOWS:
            out = simulate(trace, WORK, cluster, Setup("fifo", "synergy-slurm", "matrix", flow))
            window, every = results.summarise(out, DYNAMIC_WINDOW), results.summarise(out)
            rows.append({"rate": rate, "flow": flow, "wall_s": round(out.wall_s, 1),
                         "window_jct_h": round(window.mean_jct_h, 2),
                         "window_gpu_h": round(window.gpu_h),
                         "all_jct_h": round(every.mean_jct_h, 2),
                         "all_gpu_h": round(every.gpu_h),
                         "resubmitted": sum(j.queued_s != j.arrival_s for j in out.jobs)})
            print(rows[-1], flush=True)
    print(flows_table(rows))
    return rows


def flows_table(rows: list[dict]) -> str:
    """The flows' figures as the Markdown table docs/simulation.md shows."""
    lo, hi = DYNAMIC_WINDOW
    lines = [f"| jobs/h | flow | mean JCT, jobs {lo}-{hi} (h) | GPU-hours, jobs {lo}-{hi} | "
             "mean JCT, all jobs (h) | GPU-hours, all jobs | jobs resubmitted |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['rate']:g} | {r['flow']} | {r['window_jct_h']:.2f} | "
              f"{r['window_gpu_h']:,} | {r['all_jct_h']:.2f} | {r['all_gpu_h']:,} | "
              f"{r['resubmitted']:,} |" for r in rows]
    return "\n".join(lines)


SECTIONS = {"scale": ("scale_100k_jobs_4096_gpus", scale),
            "per_round": ("allocator_per_round", per_round),
            "poisson": ("poisson_comparison", comparison),
            "dynamic": ("dynamic_comparison", dynamic),
            "opt_dynamic": ("opt_dynamic", opt_dynamic),
            "flows": ("dynamic_flows", flows)}


def main(names: list[str]) -> None:
    unknown = set(names) - set(SECTIONS)
    if unknown:
        sys.exit(f"unknown section(s) {', '.join(sorted(unknown))}; "
                 f"choose from {', '.join(SECTIONS)}")
    began = time.perf_counter()
    figures = json.loads(OUT.read_text()) if names and OUT.is_file() else {}
    figures["machine"] = f"{platform.node()}, {os.cpu_count()} CPUs"
    for name in names or SECTIONS:
        key, run = SECTIONS[name]
        figures[key] = run()
    if "poisson_comparison" in figures:
        figures["against_tune"] = against_tune(figures["poisson_comparison"])
    figures["bench_s"] = round(time.perf_counter() - began, 1)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main(sys.argv[1:])
