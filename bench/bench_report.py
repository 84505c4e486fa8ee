"""Benchmark `synergy report` on thousands of jobs: the real path (one sacct call to the
local cluster's slurmdbd for jobs submitted held and cancelled, then the joins, figures
and files), and the report's own code on synthetic sacct lines of finished jobs at a
larger scale. Figures go to
bench/results/report.json.

    make bench        # or: .venv/bin/python bench/bench_report.py --jobs 2000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_synergy.cluster.localbox import LocalCluster  # noqa: E402
from slurm_synergy.report import accounting, advice, output, summary  # noqa: E402
from slurm_synergy.report.build import Report, build  # noqa: E402
from slurm_synergy import paths  # noqa: E402
from slurm_synergy.model.policy import site_catalog  # noqa: E402
from slurm_synergy.report.enrich import (add_cgroup_use, add_counterfactual, add_gpu_memory,  # noqa: E402
                                          add_gpu_stats, read_stats_of)


def synthetic(n: int) -> list[dict[str, str]]:
    """n finished jobs as sacct writes them: the job line and three steps each."""
    t0 = datetime(2026, 11, 1)
    rows = []
    for i in range(n):
        sub = t0 + timedelta(seconds=30 * i)
        start, end = sub + timedelta(seconds=60), sub + timedelta(seconds=60 + 600 + i % 300)
        base = {"JobName": f"job{i % 50}", "User": "ann", "Partition": "gpu",
                "State": "COMPLETED", "ExitCode": "0:0", "Submit": sub.isoformat(),
                "Start": start.isoformat(), "End": end.isoformat(),
                "ElapsedRaw": str(600 + i % 300), "AllocCPUS": "4", "ReqCPUS": "4",
                "ReqMem": "16G", "AllocTRES": "billing=4,cpu=4,gres/gpu=1,mem=16G,node=1",
                "NodeList": f"n{i % 64}",
                "Comment": f"synergy:fp={i % 50:016x} asked=c8,m32768,g1 decision=c4,m16384,g1,w3"}
        rows.append({**base, "JobIDRaw": str(i), "JobID": str(i), "TotalCPU": "20:00.000",
                     "MaxRSS": ""})
        for step in ("batch", "extern", "0"):
            rows.append({**base, "JobIDRaw": f"{i}.{step}", "JobID": f"{i}.{step}",
                         "TotalCPU": "05:00.000", "MaxRSS": f"{1_000_000 + i}K"})
    return rows


def time_synthetic(n: int, out: Path) -> dict[str, float]:
    rows = synthetic(n)
    t = time.perf_counter()
    jobs = accounting.jobs_frame(rows)
    fold = time.perf_counter() - t
    stats, _ = read_stats_of(jobs, "", out / "no-stats")
    add_gpu_stats(jobs, stats)
    add_cgroup_use(jobs, stats)
    for col in ("samples_per_s", "data_wait_share", "resubmitted_as", "profiled_as"):
        jobs[col] = None
    add_gpu_memory(jobs, {}, site_catalog(paths.ETC / "policy.toml"))
    add_counterfactual(jobs, {}, None)
    report = Report("synthetic", jobs, summary.workloads(jobs), summary.cluster(jobs),
                    advice.lines(jobs))
    figures = time.perf_counter() - t
    output.text(report)
    output.write(report, out / "synthetic")
    total = time.perf_counter() - t
    return {"jobs": n, "sacct_lines": len(rows), "fold_s": round(fold, 2),
            "figures_s": round(figures, 2), "total_with_files_s": round(total, 2)}


def time_real(n: int, out: Path) -> dict[str, float]:
    box = LocalCluster()
    box.up(log=lambda line: None)
    slurm = box.slurm
    script = out / "held.sh"
    script.write_text("#!/bin/sh\ntrue\n")
    ids = [slurm.sbatch(script, ["--hold", "--output=/dev/null", "--job-name=bench-report"])
           for _ in range(n)]
    for chunk in range(0, n, 500):
        slurm.cancel(ids[chunk:chunk + 500])
    time.sleep(3)                                     # accounting catches up
    # By id: held jobs never became eligible, so a period query (which selects on
    # eligibility) would not list them.
    t = time.perf_counter()
    rows = accounting.fetch(slurm, ids)
    sacct = time.perf_counter() - t
    t = time.perf_counter()
    report = build(slurm, ids)
    built = time.perf_counter() - t
    output.text(report)
    output.write(report, out / "real")
    total = time.perf_counter() - t
    return {"jobs": len(report.jobs), "sacct_lines": len(rows), "sacct_s": round(sacct, 2),
            "build_s": round(built, 2), "total_with_files_s": round(total, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000, help="real jobs in the period")
    parser.add_argument("--synthetic", type=int, default=20000, help="synthetic jobs")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "report.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-report-"))
    real = time_real(args.jobs, work)
    print(f"real: {real}", file=sys.stderr)
    synth = time_synthetic(args.synthetic, work)
    print(f"synthetic: {synth}", file=sys.stderr)
    result = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "host": platform.node(), "cpus": os.cpu_count(), "real": real,
              "synthetic": synth}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"report over {real['jobs']} real jobs: {real['total_with_files_s']} s "
          f"(sacct {real['sacct_s']} s); over {synth['jobs']} synthetic: "
          f"{synth['total_with_files_s']} s; {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
