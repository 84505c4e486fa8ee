"""The built-in workloads measured while they train, several rounds from scratch: the
decision each round gives, beside the offline profiler's, and what the sweep cost.

Each round submits jobs_csv/profile_suite.csv's workloads into a fresh profile store, in
the default flow (measured in the run, on_profiled = continue), each job long enough
for its sweep, and decides from each profile with the site policy against this
cluster's node, beside the offline profiler's decisions of the same day
(bench/results/profiles.json, which bench_profiles.py writes first in `make bench`).
Each profile is also decided under two other noise rules, side by side: unbounded (the
noise excuses any loss, as before max_noise_loss) and the medians alone. The cost is the
training the windows at fewer cores lost (samples the job would have trained at its
asked size, as seconds at that rate: the profile's profiling_s) as a share of a one-hour
job; the queue time it adds is none, since no job is submitted again. The rounds' stores
stay in bench/results/inrun-run; --decide-only decides again from them (after a change
of the engine or the policy), measuring nothing. Writes bench/results/inrun.md and
bench/results/inrun.json.

    make bench          # or: .venv/bin/python bench/bench_inrun.py [--rounds 3] [--decide-only]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent

from bench_profiles import decided, decided_already  # noqa: E402
from slurm_synergy.cluster.localbox import LocalCluster  # noqa: E402
from slurm_synergy.submission.csvjobs import load_jobs  # noqa: E402
from slurm_synergy.jobs import wait  # noqa: E402
from slurm_synergy.model.engine import NoDecision, decide  # noqa: E402
from slurm_synergy.model.policy import Policy, load_policy, site_catalog  # noqa: E402
from slurm_synergy.model.profile import Profile  # noqa: E402
from slurm_synergy.paths import policy_path  # noqa: E402
from slurm_synergy.profile_table import JOB_HOUR_S  # noqa: E402
from slurm_synergy.profiles import ProfileStore, user_folder  # noqa: E402
from slurm_synergy.slurm import node_shape  # noqa: E402
from slurm_synergy.slurm import Slurm  # noqa: E402

SUITE = ROOT / "jobs_csv" / "profile_suite.csv"
# Iterations that keep each workload training past its sweep (about 90 s at 2 cores).
ITERATIONS = {"resnet8-jpeg512": 1000, "alexnet-jpeg512": 800, "mobilenet-jpeg512": 520,
              "transformer-text": 360, "lstm-text": 360, "m5-audio": 360}
# Each profile is decided under the site's noise rule and, side by side, two others: the
# noise excusing any loss (before max_noise_loss) and the medians alone.
RULES = ("site", "unbounded", "medians")


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
    store = round_store(work)
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


def round_store(work: Path) -> ProfileStore:
    """The profile store of a round's folder (this user's, as the round's jobs filed)."""
    return ProfileStore(user_folder(work / "store"))


def kept_round(work: Path) -> list[Profile]:
    """A round's profiles from its kept store, in the order of the CSV it submitted;
    SystemExit where the round was not run."""
    csvs = sorted(work.glob("*.csv"))
    if not csvs:
        raise SystemExit(f"{work}: no round kept there; run without --decide-only first")
    store = round_store(work)
    return [store.load(s.fingerprint) for s in load_jobs(csvs[0])
            if store.has(s.fingerprint)]


def site_decider(slurm: Slurm) -> Callable[[Profile], dict[str, str]]:
    """A profile's decisions, as "2c 1024M", with the site policy on this cluster's node,
    under each of RULES."""
    site, catalog = load_policy(policy_path()), site_catalog(policy_path())
    policies: dict[str, Policy] = {
        "site": site, "unbounded": replace(site, max_noise_loss=1.0),
        "medians": replace(site, max_noise_loss=site.tolerance)}
    shape = node_shape(slurm, slurm.default_partition())

    def one(profile: Profile, policy: Policy) -> str:
        try:
            d = decide(profile, shape, policy, catalog)
        except NoDecision as e:
            return f"none ({e.reasons[-1][:60]})"
        return f"{d.cpus}c {d.mem_mb}M"

    return lambda profile: {rule: one(profile, policies[rule]) for rule in RULES}


def as_profiled(profile: Profile) -> Profile:
    """The profile as its sweep stored it, before its job's whole run raised its memory
    (an in-run profile's points share one footprint and it has no page-cache model)."""
    if not profile.raised:
        return profile
    mb = profile.measured_footprint_mb
    points = tuple(replace(p, peaks_mb=(mb,), peak_own_mb=mb) for p in profile.points)
    return replace(profile, points=points, raised=(),
                   model=replace(profile.model, footprint_mb=mb))


def figures(profile: Profile, decider: Callable[[Profile], dict[str, str]],
            round_no: int) -> dict:
    """One round's figures for one profile: its decisions (followed to the job's end, and
    as the sweep stored it), rates, spreads and cost."""
    points = {p.cores: p for p in profile.train_points()}
    decisions = decider(profile)
    return {"round": round_no, "decision": decisions["site"], "by_rule": decisions,
            "as_profiled": decider(as_profiled(profile))["site"],
            "footprint_mb": round(profile.model.footprint_mb),
            "profiled_mb": round(profile.measured_footprint_mb),
            "rates": {k: [round(x, 1) for x in p.repeats] for k, p in points.items()},
            "spread": {k: p.spread for k, p in points.items()},
            "lost_s": profile.profiling_s,
            "lost_share_of_hour": profile.profiling_s / JOB_HOUR_S,
            "model_error": profile.model.mean_error, "notes": list(profile.notes)}


def ratio(runs: list[dict]) -> str:
    """One core's median over two cores' in each round."""
    def one(x: dict) -> str:
        rates = {int(k): statistics.median(v) for k, v in x["rates"].items() if v}
        return f"{rates[1] / rates[2]:.2f}" if 1 in rates and rates.get(2) else "-"
    return " / ".join(one(x) for x in runs)


def per_round(runs: list[dict], rule: str = "site") -> str:
    """A rule's decisions (or the as-profiled ones), round by round, shortened where all
    rounds agree."""
    ds = [x["as_profiled"] if rule == "as_profiled" else x["by_rule"][rule] for x in runs]
    return f"{ds[0]} ×{len(ds)}" if len(set(ds)) == 1 and len(ds) > 1 else " / ".join(ds)


def offline_decisions(results: Path) -> dict[str, list[str]]:
    """The offline profiler's decisions per workload and round, from bench_profiles.py's
    figures (make bench writes them first); SystemExit if there are none."""
    path = results / "profiles.json"
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"{path}: {e}; run bench/bench_profiles.py first (make bench "
                         "does)") from None
    out: dict[str, list[str]] = {}
    for round_ in report["steps"]["warm"]:
        for prof in round_["profiles"]:
            out.setdefault(prof["workload"], []).append(decided(prof["decision"]))
    return out


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
    p.add_argument("--decide-only", action="store_true",
                   help="decide again from the rounds' kept stores, measuring nothing")
    args = p.parse_args()
    LocalCluster(sync_every_s=0).up(log=lambda line: None)
    offline = offline_decisions(args.out)
    if not args.decide_only:
        # The shim would size a job the cluster's table decides: none of the suite may be.
        decided_already(load_jobs(SUITE))
    slurm = Slurm()
    decider = site_decider(slurm)
    work = args.out / "inrun-run"
    rows: dict[str, list[dict]] = {}
    for r in range(args.rounds):
        folder = work / f"round{r + 1}"
        for profile in kept_round(folder) if args.decide_only else inrun_round(folder):
            row = figures(profile, decider, r + 1)
            rows.setdefault(profile.job_name, []).append(row)
            print(f"round {r + 1} {profile.job_name}: {row['decision']}, lost "
                  f"{profile.profiling_s:.1f}s", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    (args.out / "inrun.json").write_text(json.dumps(
        {"at": when, "offline": offline, "workloads": rows}, indent=1) + "\n")
    lines = [f"In-run profiles, {args.rounds} rounds from scratch ({when}; "
             "`bench/bench_inrun.py`). As profiled: the profile as its sweep stored it; "
             "followed: after its own job's whole run (a peak above the profile's raises "
             "it, as every later job's does in either flow):", "",
             "| workload | 1 core | 2 cores | 1c/2c | as profiled, per round | "
             "offline per round | same where offline agrees | peak as profiled, MB | "
             "followed to the end, MB | decision followed | unbounded noise rule | "
             "medians alone | lost, share of 1 h |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, runs in rows.items():
        ds = [x["as_profiled"] for x in runs]
        off = offline.get(name, [])
        same = ("offline differs" if len(set(off)) != 1 else
                "yes" if all(d == off[0] for d in ds) else "no")
        off_text = f"{off[0]} ×{len(off)}" if len(set(off)) == 1 else " / ".join(off)
        lost = [x["lost_share_of_hour"] for x in runs]
        mbs = [(x["profiled_mb"], x["footprint_mb"]) for x in runs]
        lines.append(f"| {name} | {rate(runs, 1)} | {rate(runs, 2)} | {ratio(runs)} | "
                     f"{per_round(runs, 'as_profiled')} | {off_text} | {same} | "
                     f"{' / '.join(str(a) for a, _ in mbs)} | "
                     f"{' / '.join(str(b) if b != a else '=' for a, b in mbs)} | "
                     f"{per_round(runs)} | "
                     f"{per_round(runs, 'unbounded')} | {per_round(runs, 'medians')} | "
                     f"{min(lost):.2%}-{max(lost):.2%} |")
    (args.out / "inrun.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
