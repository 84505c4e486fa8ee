"""The built-in workloads measured while they train, several rounds from scratch: the
decision each round gives, beside the offline profiler's, and what the sweep cost.

Each round submits jobs_csv/profile_suite.csv's workloads into a fresh profile store, in
the default flow (measured in the run, on_profiled = continue), each job long enough
for its sweep, and decides from each profile with the site policy against this
cluster's node. The cost is the training the windows at fewer cores lost (samples the
job would have trained at its asked size, as seconds at that rate: the profile's
profiling_s) as a share of a one-hour job; the queue time it adds is none, since no job
is submitted again. Writes bench/results/inrun.md and bench/results/inrun.json.

    make bench          # or: .venv/bin/python bench/bench_inrun.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent

from bench_profiles import decided_already  # noqa: E402
from slurm_synergy.cluster.localbox import LocalCluster  # noqa: E402
from slurm_synergy.csvjobs import load_jobs  # noqa: E402
from slurm_synergy.jobs import wait  # noqa: E402
from slurm_synergy.model.engine import NoDecision, decide  # noqa: E402
from slurm_synergy.model.policy import load_policy, site_catalog  # noqa: E402
from slurm_synergy.model.profile import Profile  # noqa: E402
from slurm_synergy.paths import policy_path  # noqa: E402
from slurm_synergy.profile_table import JOB_HOUR_S  # noqa: E402
from slurm_synergy.profiles import ProfileStore, user_folder  # noqa: E402
from slurm_synergy.shim.table import node_shape  # noqa: E402
from slurm_synergy.slurm import Slurm  # noqa: E402

SUITE = ROOT / "jobs_csv" / "profile_suite.csv"
# Iterations that keep each workload training past its sweep (about 90 s at 2 cores).
ITERATIONS = {"resnet8-jpeg512": 1000, "alexnet-jpeg512": 800, "mobilenet-jpeg512": 520,
              "transformer-text": 360, "lstm-text": 360, "m5-audio": 360}
# The offline profiler's decisions in each of its three rounds (bench_profiles.py,
# 2026-11-26, README's "How sure"): where all three agree, the in-run ones should too.
OFFLINE = {"resnet8-jpeg512": "2c 1024M", "alexnet-jpeg512": "2c 1024M",
           "mobilenet-jpeg512": "2c 1280M", "transformer-text": "1c 1280M",
           "lstm-text": "1c 1024M", "m5-audio": "1c 1280M"}


def suite_csv(work: Path) -> Path:
    """The suite with each row's iterations long enough for its sweep."""
    rows = list(csv.DictReader(io.StringIO(SUITE.read_text())))
    for row in rows:
        row["iterations"] = str(ITERATIONS[row["name"]])
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    path = work / "suite.csv"
    path.write_text(out.getvalue())
    return path


def inrun_round(work: Path, rows: Callable[[Path], Path] = suite_csv) -> list[Profile]:
    """One round from scratch: the CSV that `rows` writes into `work`, submitted in the
    default flow into a fresh store; each row's profile, or SystemExit naming what failed."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "store").mkdir(parents=True, exist_ok=True)
    store = ProfileStore(user_folder(work / "store"))
    env = dict(os.environ, SYNERGY_PROFILES=str(work / "store"), SYNERGY_HOME=str(work / "home"),
               SYNERGY_DATA=str(work.parent / "data"),
               SYNERGY_DECISIONS=str(work / "decisions.tbl"))
    path = rows(work)
    # User mode: this command marks the jobs from the bench's own (empty) store.
    proc = subprocess.run([sys.executable, "-m", "slurm_synergy.cli", "submit", str(path),
                           "--out", str(work / "jobs"), "--mode", "user"],
                          env=env, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    ids = [line.split("\t")[0] for line in proc.stdout.splitlines()]
    recs = wait(Slurm(), ids, timeout_s=3600)
    specs = load_jobs(path)
    failed = [r for r in recs if r.state != "COMPLETED"]
    missing = [s.name for s in specs if not store.has(s.fingerprint)]
    if failed or missing:
        raise SystemExit(f"jobs not completed: {[(r.name, r.state) for r in failed]}; "
                         f"not measured: {missing}; logs in {work / 'jobs' / 'logs'}")
    return [store.load(s.fingerprint) for s in specs]


def site_decider(slurm: Slurm) -> Callable[[Profile], str]:
    """A profile's decision with the site policy on this cluster's node, as "2c 1024M"."""
    policy, catalog = load_policy(policy_path()), site_catalog(policy_path())
    shape = node_shape(slurm, slurm.default_partition())

    def decision(profile: Profile) -> str:
        try:
            d = decide(profile, shape, policy, catalog)
        except NoDecision as e:
            return f"none ({e.reasons[-1][:60]})"
        return f"{d.cpus}c {d.mem_mb}M"
    return decision


def figures(profile: Profile, decider: Callable[[Profile], str], round_no: int) -> dict:
    """One round's figures for one profile: its decision, rates, spreads and cost."""
    points = {p.cores: p for p in profile.train_points()}
    return {"round": round_no, "decision": decider(profile),
            "rates": {k: [round(x, 1) for x in p.repeats] for k, p in points.items()},
            "spread": {k: p.spread for k, p in points.items()},
            "lost_s": profile.profiling_s,
            "lost_share_of_hour": profile.profiling_s / JOB_HOUR_S,
            "model_error": profile.model.mean_error, "notes": list(profile.notes)}


def rate(runs: list[dict], k: int) -> str:
    """A count's median samples/s and spread in each round."""
    def one(x: dict) -> str:
        rates = sorted(x["rates"].get(k, [0.0]))
        spread = x["spread"].get(k)
        return f"{rates[len(rates) // 2]:.0f}" + (f" ±{spread:.0%}" if spread is not None else "")
    return " / ".join(one(x) for x in runs)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = p.parse_args()
    LocalCluster().up(log=lambda line: None)
    # The shim would size a job the cluster's table decides: none of the suite may be.
    decided_already(load_jobs(SUITE))
    slurm = Slurm()
    decider = site_decider(slurm)
    work = Path(os.environ.get("TMPDIR", "/tmp")) / "synergy-bench-inrun"
    rows: dict[str, list[dict]] = {}
    for r in range(args.rounds):
        for profile in inrun_round(work / f"round{r + 1}"):
            row = figures(profile, decider, r + 1)
            rows.setdefault(profile.job_name, []).append(row)
            print(f"round {r + 1} {profile.job_name}: {row['decision']}, lost "
                  f"{profile.profiling_s:.1f}s", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    (args.out / "inrun.json").write_text(json.dumps({"at": when, "workloads": rows},
                                                    indent=1) + "\n")
    lines = [f"In-run profiles, {args.rounds} rounds from scratch ({when}; "
             "`bench/bench_inrun.py`):", "",
             "| workload | 1 core | 2 cores | decision per round | offline (3 rounds) | "
             "same | lost, share of 1 h |", "|---|---|---|---|---|---|---|"]
    for name, runs in rows.items():
        decisions = [x["decision"] for x in runs]
        same = all(d == OFFLINE[name] for d in decisions)
        lost = [x["lost_share_of_hour"] for x in runs]
        lines.append(f"| {name} | {rate(runs, 1)} | {rate(runs, 2)} | {' / '.join(decisions)} | "
                     f"{OFFLINE[name]} | {'yes' if same else 'no'} | "
                     f"{min(lost):.2%}-{max(lost):.2%} |")
    (args.out / "inrun.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
