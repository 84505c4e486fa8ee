"""Right-sized runs timed against their decision's prediction, on the local cluster, as an
ordinary user: how often an unchanged workload is taken for slower (want never), and from
what slowdown a slower one is caught.

Each workload is a plain batch script (asking 2 cores) whose steps wait SLOW seconds
besides their compute (I/O, a remote service), so its measured run is decided one core.
Then its next jobs run at that core with each step waiting FACTOR times as long:

  unchanged   four runs as measured (1x), two at a time beside the others
  1.1x 1.5x 3x   one run each, every factor its own workload

For each run, from its log (measure/inrun/pace.py): the rate it trained at, the rate its
decision predicted, whether it was taken for slower, and the workload's cores after the
site's sync.

Writes DIR/pace.json and DIR/pace.md; five minutes or so.

    .venv/bin/python bench/bench_pace.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from slurm_synergy.cluster.localbox import MULTI_PARTITION  # noqa: E402
from slurm_synergy.decisions.table import TABLE_NAME, read  # noqa: E402
from slurm_synergy.jobs import wait  # noqa: E402
from slurm_synergy.slurm import Slurm  # noqa: E402
from tenant import (SiteStore, as_user, cluster_as_found, site_store, site_sync,  # noqa: E402
                    tenants, user_files)
from tests.helpers import flow_policy  # noqa: E402

USER = "synergy-alice"
PY = str(ROOT / ".venv" / "bin" / "python")
SLOW = 0.01               # what each step waits besides its compute, as measured (s)
SECONDS = 45              # each timed run: pace.py judges six spans of 5 s past the first
TRAIN = """\
import os, time, torch
model = torch.nn.Linear(64, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(4096, 64)
wait, end = float(os.environ["STEP_WAIT"]), time.monotonic() + float(os.environ["SECONDS"])
while time.monotonic() < end:
    for i in range(0, 4096, 32):
        loss = model(data[i:i + 32]).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        time.sleep(wait)
        if time.monotonic() >= end: break
"""
HEADER = """#!/bin/bash
#SBATCH --job-name=pace-{name}
#SBATCH --cpus-per-task=2
#SBATCH --mem=1G
#SBATCH --time=10
#SBATCH --output={out}/%j.out
#SBATCH --chdir={out}
: {name} {tag}
{py} train.py
"""
# Workload -> the factor of each of its timed runs.
WORKLOADS = {"unchanged": (1.0, 1.0, 1.0, 1.0), "1.1x": (1.1,), "1.5x": (1.5,), "3x": (3.0,)}
LINE = re.compile(r"job (\d+) trained at ([\d.]+) \S+ \(±(\d+)% over [^)]*\) on its decided "
                  r"(\d+) core\(s\)[;,] (?:where )?its decision predicted ([\d.]+)")


def synced(site: SiteStore) -> dict:
    """The site's sync, then the decision table it wrote."""
    site_sync(site, MULTI_PARTITION)
    return read(Path(os.environ["SLURM_CONF"]).parent / TABLE_NAME)[1]


def key_of(slurm: Slurm, job: str) -> str:
    (row,) = slurm.sacct([job], ("JobIDRaw", "Comment"))
    m = re.match(r"synergy:fp=([0-9a-f]{16})", row["Comment"])
    if not m:
        raise SystemExit(f"job {job} has no key: {row['Comment']!r}")
    return m.group(1)


def timed(folder: Path, job: str) -> dict:
    """What the run's log says of its pace."""
    log = (folder / f"{job}.out").read_text(errors="replace")
    m = LINE.search(log)
    if not m or m.group(1) != job:
        return {"job": job, "timed": False}
    return {"job": job, "timed": True, "observed": float(m.group(2)),
            "spread_pct": int(m.group(3)), "cores": int(m.group(4)),
            "predicted": float(m.group(5)), "slower": "slower by more than their noise" in log}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args()
    with cluster_as_found(), tenants(Slurm(), (USER,), ROOT) as shared:
        slurm = Slurm()
        release = slurm.version().split()[-1]
        result: dict = {"release": release, "step_wait_s": SLOW, "workloads": {}}
        pw = pwd.getpwnam(USER)
        site = site_store(shared, flow_policy(first_batch_timeout_s="30"))
        env = site.env(MULTI_PARTITION)
        folders = {}
        for name in WORKLOADS:
            folder = shared / name.replace(".", "_")
            folder.mkdir()
            os.chown(folder, pw.pw_uid, pw.pw_gid)
            user_files(folder, {"train.py": TRAIN, "job.sh": HEADER.format(
                name=name, out=folder, py=PY, tag=time.time_ns())}, pw.pw_uid, pw.pw_gid)
            folders[name] = folder
        measured = {name: as_user(USER, ["sbatch", "--parsable", "job.sh"], f,
                                 {**env, "STEP_WAIT": str(SLOW), "SECONDS": "40"})
                    for name, f in folders.items()}
        wait(slurm, list(measured.values()), timeout_s=900)
        table = synced(site)
        keys = {name: key_of(slurm, job) for name, job in measured.items()}
        decided = {name: getattr(table.get((pw.pw_uid, keys[name])), "cpus", None)
                   for name in WORKLOADS}
        runs: dict[str, list[dict]] = {name: [] for name in WORKLOADS}
        # Two at a time: every workload's n-th run beside the unchanged one's.
        for n in range(max(len(f) for f in WORKLOADS.values())):
            batch = {name: factors[n] for name, factors in WORKLOADS.items()
                     if n < len(factors)}
            jobs = {name: as_user(USER, ["sbatch", "--parsable", "job.sh"], folders[name],
                                 {**env, "STEP_WAIT": str(SLOW * factor),
                                  "SECONDS": str(SECONDS)})
                    for name, factor in batch.items()}
            wait(slurm, list(jobs.values()), timeout_s=900)
            for name, job in jobs.items():
                runs[name].append({"factor": batch[name], **timed(folders[name], job)})
        after = synced(site)
        for name in WORKLOADS:
            result["workloads"][name] = {
                "key": keys[name], "measured_job": measured[name],
                "decided_cpus": decided[name], "runs": runs[name],
                "cpus_after": getattr(after.get((pw.pw_uid, keys[name])), "cpus", None)}
            print(name, json.dumps(result["workloads"][name]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pace.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [f"Slurm {release}; steps waiting {SLOW * 1000:.0f} ms besides their compute when "
             "measured, each timed run that many times as long.", "",
             "| workload | decided | run | slowed | trained at | predicted | taken for slower "
             "| cores after |", "|---|---|---|---|---|---|---|---|"]
    for name, w in result["workloads"].items():
        for r in w["runs"]:
            trained = f"{r['observed']:.0f} ±{r['spread_pct']}%" if r["timed"] else "not timed"
            predicted = f"{r['predicted']:.0f}" if r["timed"] else "-"
            lines.append(f"| {name} | {w['decided_cpus']} core(s) | {r['job']} | "
                         f"{r['factor']:g}x | {trained} | {predicted} | "
                         f"{'yes' if r.get('slower') else 'no'} | {w['cpus_after']} |")
    (args.out / "pace.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
