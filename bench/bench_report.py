"""Benchmark `synergy report` on thousands of jobs: the real path (jobs of every shape run
on the local cluster: arrays, multi-node, several tasks and steps, hetjobs; the whole
report, its one sacct call included, timed against that sacct call alone, interleaved),
and the report's own code on synthetic sacct lines of finished jobs at a larger scale.
Figures go to bench/results/report.json.

    make bench        # or: .venv/bin/python bench/bench_report.py --jobs 2000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_synergy.cluster.localbox import LocalCluster  # noqa: E402
from slurm_synergy.jobs import wait  # noqa: E402
from slurm_synergy.slurm import SEP, Slurm  # noqa: E402
from tests.shapes import node_stats_done  # noqa: E402
from slurm_synergy.report import accounting, advice, output, summary  # noqa: E402
from slurm_synergy.report.build import Report, build  # noqa: E402
from slurm_synergy import paths  # noqa: E402
from slurm_synergy.model.policy import site_catalog  # noqa: E402
from slurm_synergy.hooks.records import stats_for  # noqa: E402
from slurm_synergy.report.enrich import (add_cgroup_use, add_counterfactual, add_gpu_memory,  # noqa: E402
                                          add_gpu_stats)


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
    stats, _ = stats_for(out / "no-stats", set(jobs["raw_id"]))
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


# The real jobs' shapes, each a batch script running nothing: a line is a job, an array
# task or a hetjob component. Arrays make up the count (they start fastest); hetjobs go
# last, since only the backfill scheduler starts them and one waiting at the head of the
# queue would hold the rest back.
MIX = {
    "multi-node": ("--partition=multi --nodes=2 --ntasks-per-node=1", "srun true", 1, 20),
    "steps": ("--ntasks=2", "srun true\nsrun --ntasks=1 true", 1, 20),
    "hetjob": ("--partition=multi\n#SBATCH hetjob\n#SBATCH --partition=multi --mem=100M",
               "srun --het-group=0,1 true", 2, 6),
}
ARRAY_TASKS = 100


def submit_mix(slurm: Slurm, lines: int, folder: Path) -> list[str]:
    """Jobs of every shape making `lines` report lines; their sbatch ids."""
    scripts = {}
    for name, (options, body, _, _) in [*MIX.items(), ("array", ("--partition=multi", "true", 1, 0))]:
        path = folder / f"{name}.sh"
        path.write_text(f"#!/bin/sh\n#SBATCH --job-name=bench-{name} --cpus-per-task=1 "
                        f"--mem=100M --output=/dev/null\n#SBATCH {options}\n{body}\n")
        scripts[name] = path
    fixed = sum(per * count for _, _, per, count in MIX.values())
    ids = []
    left = max(lines - fixed, 0)
    while left:
        tasks = min(left, ARRAY_TASKS)
        ids.append(slurm.sbatch(scripts["array"], [f"--array=0-{tasks - 1}"]))
        left -= tasks
    for name, (_, _, _, count) in MIX.items():
        ids += [slurm.sbatch(scripts[name]) for _ in range(count)]
    return ids


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3)}


def time_real(n: int, out: Path, rounds: int, against: list[Path]) -> dict[str, Any]:
    """n report lines of every shape, run on the local cluster; then, interleaved, sacct
    alone, the report's sacct query (its lines read into Python) and the whole report (its
    own sacct query included)."""
    box = LocalCluster(sync_every_s=0)
    box.up(log=lambda line: None)
    slurm = box.slurm
    ids = submit_mix(slurm, n, out)
    wait(slurm, ids, timeout_s=3600)
    first = build(slurm, ids)
    lines = output.records(first.jobs)
    node_stats_done(paths.cluster_stats_dir(slurm.cluster_name()), lines)
    # sacct itself, its output thrown away, as a user at a shell would time it.
    bare = ["sacct", "--parsable2", "--noheader", f"--delimiter={SEP}",
            "--format=" + ",".join(accounting.FIELDS), "--jobs=" + ",".join(ids), "--allusers"]
    bare_s, sacct_s, build_s = [], [], []
    for _ in range(rounds):
        t = time.perf_counter()
        subprocess.run(bare, stdout=subprocess.DEVNULL, env=slurm.env(), check=True)
        bare_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        rows = list(accounting.query(slurm, ids))
        sacct_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        report = build(slurm, ids)
        build_s.append(time.perf_counter() - t)
    t = time.perf_counter()
    output.text(report)
    output.write(report, out / "real")
    files = time.perf_counter() - t
    versions = side_by_side(slurm, against, ids, out) if against else []
    return {"jobs": len(report.jobs), "sacct_lines": len(rows),
            "shapes": dict(Counter(_shape(j) for j in lines)),
            "from_cgroup": int((report.jobs["usage_from"] == "cgroup").sum()),
            "rounds": rounds, "bare_sacct_s": _spread(bare_s), "sacct_s": _spread(sacct_s),
            "build_s": _spread(build_s),
            "build_over_sacct": _spread([b / a for a, b in zip(sacct_s, build_s)]),
            "build_over_bare_sacct": _spread([b / a for a, b in zip(bare_s, build_s)]),
            "files_s": round(files, 2), "versions": versions}


def side_by_side(slurm: Slurm, against: list[Path], ids: list[str],
                 out: Path) -> list[dict[str, Any]]:
    """Other checkouts' report code and this one's, each in a process of its own doing 15
    interleaved rounds against sacct alone, alternated twice, on the same jobs."""
    ids_file = out / "ids.txt"
    ids_file.write_text("\n".join(ids) + "\n")
    runs = []
    for _ in range(2):
        for tree in [*against, ROOT]:
            proc = subprocess.run([sys.executable, str(ROOT / "bench" / "report_rounds.py"),
                                   str(tree), str(ids_file), "15"],
                                  capture_output=True, text=True, env=slurm.env())
            if proc.returncode:
                raise SystemExit(f"report_rounds.py on {tree} failed:\n{proc.stderr}")
            runs.append(json.loads(proc.stdout))
    return runs


def _shape(job: dict[str, Any]) -> str:
    return ("array task" if job["array_id"] else "hetjob component" if "+" in job["job_id"]
            else "multi-node" if not job["one_node"] else "several tasks" if not job["one_task"]
            else "one task")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000,
                        help="report lines of real jobs of every shape")
    parser.add_argument("--rounds", type=int, default=9,
                        help="sacct and report timings, interleaved")
    parser.add_argument("--synthetic", type=int, default=20000, help="synthetic jobs")
    parser.add_argument("--against", type=Path, nargs="*", default=[],
                        help="other checkouts (git worktree add DIR COMMIT) whose report code "
                             "to time side by side with this one's on the same jobs")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "report.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-report-"))
    real = time_real(args.jobs, work, args.rounds, args.against)
    print(f"real: {real}", file=sys.stderr)
    synth = time_synthetic(args.synthetic, work)
    print(f"synthetic: {synth}", file=sys.stderr)
    result = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "host": platform.node(), "cpus": os.cpu_count(), "real": real,
              "synthetic": synth}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    over, bare = real["build_over_sacct"], real["build_over_bare_sacct"]
    print(f"report over {real['jobs']} real jobs of every shape: {real['build_s']['median']} s "
          f"against its sacct query's {real['sacct_s']['median']} s (x{over['median']:.2f}, "
          f"{over['min']:.2f}-{over['max']:.2f}) and bare sacct's "
          f"{real['bare_sacct_s']['median']} s (x{bare['median']:.2f}, {bare['min']:.2f}-"
          f"{bare['max']:.2f}) over {real['rounds']} interleaved rounds; "
          f"over {synth['jobs']} synthetic: {synth['total_with_files_s']} s; {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
