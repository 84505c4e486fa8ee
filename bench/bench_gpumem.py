"""Peak GPU memory of every built-in workload, estimated without a GPU, at its batch, half
and twice it, beside an independent count; and what the estimate costs a job.

The workloads are jobs_csv/profile_suite.csv's rows. For each, `python -m
profiler.gpumem` estimates the peak of a training step under fake tensors and PyTorch's
memory tracker, and counts parameters, gradients, momentum, the batch and what autograd
saves for the backward pass, separately. The cost per job is the wall time of the
profiler's own call (a fresh process: Python, torch and the model included), repeated
--repeats times interleaved across the workloads. Writes bench/results/gpumem.json and
bench/results/gpumem.md.

    make bench          # or: .venv/bin/python bench/bench_gpumem.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from profiler.gpumem import estimate  # noqa: E402
from slurm_synergy.submission.csvjobs import load_jobs  # noqa: E402
from slurm_synergy.measure.offline.gpumem import estimate_gpu_memory, nearby  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, default=ROOT / "jobs_csv" / "profile_suite.csv")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    specs = load_jobs(args.csv)
    rows = []
    for spec in specs:
        argv = [*spec.script_argv(), *spec.args, "--data", "unused"]
        for batch in nearby(spec.batch):
            e = estimate(argv, batch, check=True)
            assert e.analytic_mib is not None
            rows.append({"workload": spec.name, **asdict(e),
                         "ratio": round(e.peak_mib / e.analytic_mib, 3)})
    costs: dict[str, list[float]] = {s.name: [] for s in specs}
    for _ in range(args.repeats):
        for spec in specs:
            mem = estimate_gpu_memory([*spec.script_argv(), *spec.args, "--data", "unused"],
                                      spec.batch)
            if not mem.method:
                raise SystemExit(f"{spec.name}: {mem.reason}")
            costs[spec.name].append(mem.seconds)
    lines = ["| workload | batch | estimated peak (MiB) | independent count (MiB) | ratio | "
             "live at the peak (MiB) |", "|---|---|---|---|---|---|"]
    for r in rows:
        parts = ", ".join(f"{k.lower()} {v:.1f}" for k, v in r["parts_mib"].items())
        lines.append(f"| {r['workload']} | {r['batch']} | {r['peak_mib']:.1f} | "
                     f"{r['analytic_mib']:.1f} | {r['ratio']:.2f} | {parts} |")
    lines += ["", "| workload | cost per job (s): median (min-max of "
              f"{args.repeats}) |", "|---|---|"]
    for name, seconds in costs.items():
        lines.append(f"| {name} | {statistics.median(seconds):.1f} ({min(seconds):.1f}-"
                     f"{max(seconds):.1f}) |")
    table = "\n".join(lines)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "gpumem.md").write_text(table + "\n")
    report = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "host": platform.node(), "cpus": os.cpu_count(), "csv": str(args.csv),
              "estimates": rows, "cost_s": costs}
    (args.results / "gpumem.json").write_text(json.dumps(report, indent=2) + "\n")
    print(table)
    print(f"written: {args.results / 'gpumem.json'}, {args.results / 'gpumem.md'}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
