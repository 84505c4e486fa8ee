"""Profile the built-in workloads on the cluster and report what profiling costs.

Submits jobs_csv/profile_suite.csv with --profile-only into a fresh profile store, so every
workload is profiled inside its own allocation (srun steps, Slurm's cgroups), waits, and
writes the profiles' table (bench/results/profiles.md), a plot of throughput against
cores (bench/results/profiles.png) and the figures (bench/results/profiles.json): the
model's error on the held-out points and the cost of profiling, in seconds and as a
share of a one-hour job.

    make bench          # or: .venv/bin/python bench/bench_profiles.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_synergy.cluster.localbox import LocalCluster  # noqa: E402
from slurm_synergy.csvjobs import load_jobs  # noqa: E402
from slurm_synergy.jobs import wait  # noqa: E402
from slurm_synergy.profiles import ProfileStore  # noqa: E402
from slurm_synergy.profile_table import JOB_HOUR_S, markdown, plot, profiles_table  # noqa: E402
from slurm_synergy.slurm import Slurm  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, default=ROOT / "jobs_csv" / "profile_suite.csv")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    if not os.environ.get("SLURM_CONF"):
        LocalCluster().up(log=lambda line: print(line, file=sys.stderr))
    work = args.results / "profiles-run"
    shutil.rmtree(work, ignore_errors=True)
    store = ProfileStore(work / "store")
    # The profiles' decisions go to a table of the bench's own, not the cluster's.
    env = dict(os.environ, SYNERGY_PROFILES=str(store.root), SYNERGY_HOME=str(work / "home"),
               SYNERGY_DATA=str(work / "data"), SYNERGY_DECISIONS=str(work / "decisions.tbl"))
    proc = subprocess.run([sys.executable, "-m", "slurm_synergy.cli", "submit", str(args.csv),
                           "--out", str(work / "jobs"), "--profile-only", "--sequential"],
                          env=env, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        return 1
    ids = [line.split("\t")[0] for line in proc.stdout.splitlines()]
    recs = wait(Slurm(), ids, timeout_s=3600)
    failed = [r for r in recs if r.state != "COMPLETED"]
    specs = load_jobs(args.csv)
    missing = [s.name for s in specs if not store.has(s.fingerprint)]
    if failed or missing:
        print(f"jobs not completed: {[(r.name, r.state) for r in failed]}; "
              f"not profiled: {missing}; logs in {work / 'jobs' / 'logs'}", file=sys.stderr)
        return 1
    profiles = [store.load(s.fingerprint) for s in specs]
    figures = [{
        "workload": p.job_name,
        "samples_per_s": {str(pt.cores): round(pt.samples_per_s, 2) for pt in p.train_points()},
        "prep_core_ms": round(p.model.prep_core_s * 1e3, 3),
        "host_core_ms": round(p.model.host_core_s * 1e3, 3),
        "held_out": [{"cores": e.cores, "measured": round(e.measured, 2),
                      "predicted": round(e.predicted, 2), "error": round(e.error, 4)}
                     for e in p.model.held_out],
        "mean_error": p.model.mean_error,
        "profiling_s": p.profiling_s,
        "share_of_1h_job": round(p.profiling_s / JOB_HOUR_S, 4),
    } for p in profiles]
    png = plot(profiles, args.results / "profiles.png")
    (args.results / "profiles.md").write_text(markdown(profiles) + "\n")
    report = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "host": platform.node(), "cpus": os.cpu_count(), "csv": str(args.csv),
              "profiles": figures}
    (args.results / "profiles.json").write_text(json.dumps(report, indent=2) + "\n")
    print(profiles_table(profiles))
    print(f"written: {args.results / 'profiles.json'}, {args.results / 'profiles.md'}, {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
