"""Workloads that grow after they were measured, on the local cluster, as an ordinary user:
what right-sizing costs their jobs with root's rescue and without it.

Each scenario is a plain batch script (asking 2 cores and 3G) whose first job is measured
while it trains and decided by the site's sync; then what the key cannot see grows:

  config      its config file edited to hold GROWN_MB more (a larger batch or model)
  data        the dataset file at the same path grown from 20 MB to GROWN_MB (read whole)
  longer      more epochs (its environment, not its key), a cache growing each epoch
  late-peak   more epochs, reaching a validation pass every VAL_EVERY that holds GROWN_MB

and its next job is submitted in two copies side by side (each its own key, measured
alike), under root's timer: one as users submit, one with --no-requeue, which Slurm
refuses to requeue even for root, as every job was before the rescue. On 26.05 a third
copy runs as asked under Slurm's own --mem-update=MEM_UPDATE (the plugin off for it: its
memory lowered once, after the delay, to its RSS then plus the margin; the local cluster
brought up with the step manager it needs). Slurm counts that delay in whole minutes, so
there every scenario's grown jobs run longer (LONGER), past it. For each:

  lost        the job did not complete (want 0 with the rescue)
  rescued     root put it back with what it asked
  wall lost   its failed run plus the wait to its run again (s)
  MB-s        memory held (ReqMem x elapsed, every run of it; under --mem-update the
              asked 3G to the delay, then what it was lowered to) against the same job as
              asked, never lowered (its completed run's elapsed at 3G)

Writes DIR/rescue.json and DIR/rescue.md; ten minutes or so.

    .venv/bin/python bench/bench_rescue.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from slurm_synergy.cluster.localbox import MULTI_PARTITION  # noqa: E402
from slurm_synergy.jobs import FINAL_STATES, wait  # noqa: E402
from slurm_synergy.slurm import Slurm  # noqa: E402
from slurm_synergy.slurm_release import mem_update  # noqa: E402
from tenant import (SiteStore, as_user, cluster_as_found, site_store, site_sync,  # noqa: E402
                    tenants, user_files)
from tests.helpers import flow_policy  # noqa: E402

USER = "synergy-alice"
GROWN_MB = 1200
VAL_EVERY = 4
# --mem-update's margin (%) and delay: the margin of the man page's example, the least
# delay Slurm keeps (it counts minutes: 0:05 reads as a minute).
MARGIN, DELAY_S = 20, 60
MEM_UPDATE = f"{MARGIN}@{DELAY_S // 60}"
PY = str(ROOT / ".venv" / "bin" / "python")
# One trainer for every scenario: a DataLoader over computed samples, for EPOCHS epochs of
# SECONDS each; what it holds besides comes from its config, its dataset, its epochs.
TRAIN = """\
import os, sys, time, torch
from torch.utils.data import DataLoader, Dataset
conf = dict(l.split(":") for l in open("conf.yaml").read().splitlines() if ":" in l)
held = [bytearray(int(conf.get("hold_mb", 0)) << 20)]
if os.path.exists("data.bin"):
    held.append(open("data.bin", "rb").read())
def touch(b):
    for i in range(0, len(b), 4096): b[i] = 1
    return b
for b in held[:1]: touch(b)
class Squares(Dataset):
    def __len__(self): return 256
    def __getitem__(self, i):
        x = torch.full((64,), float(i))
        for _ in range(40): x = (x * 1.0001).sin()
        return x
model = torch.nn.Linear(64, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
epochs, seconds = int(os.environ.get("EPOCHS", "1")), float(os.environ.get("SECONDS_EACH", "22"))
grow, val_every = int(conf.get("grow_mb", 0)), int(conf.get("val_every", 0))
for epoch in range(1, epochs + 1):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for x in DataLoader(Squares(), batch_size=16, num_workers=1):
            loss = model(x).pow(2).mean()
            opt.zero_grad(); loss.backward(); opt.step()
            if time.monotonic() >= end: break
    if grow:
        held.append(touch(bytearray(grow << 20)))        # a cache that grows each epoch
    if val_every and epoch % val_every == 0:
        touch(bytearray(int(conf["val_mb"]) << 20))      # the validation pass's peak
print(f"trained {epochs} epoch(s)", flush=True)
"""
HEADER = """#!/bin/bash
#SBATCH --job-name=rescue-{name}
#SBATCH --cpus-per-task=2
#SBATCH --mem=3G
#SBATCH --time=10
#SBATCH --output={out}/%j.out
#SBATCH --chdir={out}
: {name} {tag}
{py} train.py
"""
# Scenario -> (the measured run's files and environment, then what grows).
SCENARIOS = {
    "config": ({"conf.yaml": "lr: 0.01\n"}, {}, {"conf.yaml": f"lr: 0.01\nhold_mb: {GROWN_MB}\n"},
               {"SECONDS_EACH": "6"}),
    "data": ({"conf.yaml": "lr: 0.01\n", "data.bin": 20}, {}, {"data.bin": GROWN_MB},
             {"SECONDS_EACH": "6"}),
    "longer": ({"conf.yaml": "lr: 0.01\ngrow_mb: 100\n"}, {"EPOCHS": "1"}, {},
               {"EPOCHS": "14", "SECONDS_EACH": "1"}),
    "late-peak": ({"conf.yaml": f"lr: 0.01\nval_every: {VAL_EVERY}\nval_mb: {GROWN_MB}\n"},
                  {"EPOCHS": "1"}, {}, {"EPOCHS": str(VAL_EVERY), "SECONDS_EACH": "3"}),
}


# Where --mem-update runs beside the rescue: each grown job's run past its delay, the
# growth the same (the config and data held from the start; the cache grown each epoch;
# the validation pass at epoch VAL_EVERY), now after the minute.
LONGER = {"config": {"SECONDS_EACH": "90"}, "data": {"SECONDS_EACH": "90"},
          "longer": {"EPOCHS": "14", "SECONDS_EACH": "6"},
          "late-peak": {"EPOCHS": str(VAL_EVERY), "SECONDS_EACH": "25"}}


def runs(slurm: Slurm, job: str) -> list[dict[str, str]]:
    """Every run of a job (sacct --duplicates), earlier first."""
    fields = ("State", "ReqMem", "ElapsedRaw", "Start", "End", "AllocCPUS")
    out = slurm.run(["sacct", "--duplicates", "--allocations", "--parsable2", "--noheader",
                     "--jobs", job, "--format=" + ",".join(fields)])
    return [dict(zip(fields, line.split("|"))) for line in out.splitlines()]


def mb(text: str) -> float:
    return float(text[:-1]) * (1024 if text.endswith("G") else 1)


def epoch_s(text: str) -> float:
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def figures(slurm: Slurm, job: str, asked_mb: float, lowered_after_s: float = 0.0) -> dict:
    """What the job cost: lost, rescued, wall lost, MB-s held and as asked. A job whose
    memory Slurm lowered after `lowered_after_s` held what it asked until then."""
    rs = runs(slurm, job)
    last = rs[-1]
    done = last["State"] == "COMPLETED"
    held = sum(mb(r["ReqMem"]) * int(r["ElapsedRaw"]) for r in rs)
    if lowered_after_s:
        (r,) = rs
        before = min(lowered_after_s, int(r["ElapsedRaw"]))
        held = asked_mb * before + mb(r["ReqMem"]) * (int(r["ElapsedRaw"]) - before)
    wall = epoch_s(last["Start"]) - epoch_s(rs[0]["Start"]) if len(rs) > 1 else 0.0
    return {"job": job, "runs": [r["State"].split(" ")[0] for r in rs], "lost": not done,
            "rescued": len(rs) > 1, "wall_lost_s": wall, "mb_s": held,
            "as_asked_mb_s": asked_mb * int(last["ElapsedRaw"]) if done else None,
            "decided_mb": mb(rs[0]["ReqMem"])}


def scenario(slurm: Slurm, name: str, shared: Path, site: SiteStore, uid: int, gid: int,
             state: Path, arms: tuple[str, ...]) -> dict:
    first_files, first_env, grown_files, grown_env = SCENARIOS[name]
    if "mem-update" in arms:
        grown_env = {**grown_env, **LONGER[name]}
    out = {}
    env = site.env(MULTI_PARTITION)
    folders = {}
    for arm in arms:
        folder = shared / f"{name}-{arm}"
        folder.mkdir()
        os.chown(folder, uid, gid)
        user_files(folder, {"train.py": TRAIN, "job.sh": HEADER.format(
            name=name, out=folder, py=PY, tag=f"{arm}{time.time_ns()}")}, uid, gid)
        user_files(folder, first_files, uid, gid, age_s=300)
        folders[arm] = folder
    # The --mem-update arm is never measured: the plugin is off for it.
    first = [as_user(USER, ["sbatch", "--parsable", "job.sh"], f, {**env, **first_env})
             for arm, f in folders.items() if arm != "mem-update"]
    wait(slurm, first, timeout_s=900)
    site_sync(site, MULTI_PARTITION)
    for f in folders.values():
        user_files(f, grown_files, uid, gid, age_s=300)
    # The second arm's job as before the rescue: Slurm refuses to requeue it.
    options = {"rescue": [], "none": ["--no-requeue"],
               "mem-update": ["--comment=synergy:off", f"--mem-update={MEM_UPDATE}"]}
    jobs = {arm: as_user(USER, ["sbatch", "--parsable", *options[arm], "job.sh"], f,
                        {**env, **grown_env})
            for arm, f in folders.items()}
    # The rescue's timer begins as its arm's job ends, not after the longer --mem-update run.
    wait(slurm, [j for arm, j in jobs.items() if arm != "mem-update"], timeout_s=900)
    # Root's timer, a round every 15 s as the local cluster runs it, until the first arm's
    # job ran again (or three rounds left it as it was).
    for _ in range(40):
        subprocess.run([sys.executable, "-m", "slurm_synergy.cli", "plugin", "timelimits",
                        "--state", str(state)], capture_output=True, text=True,
                       env={**os.environ, "SYNERGY_POLICY": str(site.root_policy)})
        rs = runs(slurm, jobs["rescue"])
        final = rs[-1]["State"].startswith(FINAL_STATES)
        if final and (len(rs) > 1 or rs[-1]["State"] == "COMPLETED" or _ >= 3):
            break
        time.sleep(15)
    wait(slurm, list(jobs.values()), timeout_s=900)
    for arm, job in jobs.items():
        out[arm] = figures(slurm, job, 3072.0, DELAY_S if arm == "mem-update" else 0.0)
    return out


ARM_NAMES = {"rescue": "rescue", "none": "--no-requeue",
             "mem-update": f"--mem-update={MEM_UPDATE}"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--only", nargs="*", default=list(SCENARIOS))
    args = ap.parse_args()
    # The step manager 26.05's --mem-update needs, for the bench alone.
    with cluster_as_found(step_manager=True), tenants(Slurm(), (USER,), ROOT) as shared:
        slurm = Slurm()
        release = slurm.version().split()[-1]
        arms = ("rescue", "none", "mem-update") if mem_update(release) else ("rescue", "none")
        result: dict = {"release": release, "grown_mb": GROWN_MB, "scenarios": {}}
        pw = pwd.getpwnam(USER)
        site = site_store(shared, flow_policy(first_batch_timeout_s="30"))
        state = shared / "root" / "time-limits.json"
        for name in args.only:
            result["scenarios"][name] = scenario(slurm, name, shared, site, pw.pw_uid,
                                                 pw.pw_gid, state, arms)
            print(name, json.dumps(result["scenarios"][name]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rescue.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [f"Slurm {release}; each workload's next job after it grew by {GROWN_MB} MB, "
             "within the 3G its script asks.", "",
             "| workload grew by | arm | decided | runs | lost | wall lost (s) | MB-s held "
             "| MB-s as asked |", "|---|---|---|---|---|---|---|---|"]
    for name, arms in result["scenarios"].items():
        for arm, f in arms.items():
            lines.append(
                f"| {name} | {ARM_NAMES[arm]} | "
                f"{f['decided_mb']:.0f}M | {' -> '.join(f['runs'])} | "
                f"{'yes' if f['lost'] else 'no'} | {f['wall_lost_s']:.0f} | {f['mb_s']:.0f} | "
                f"{'-' if f['as_asked_mb_s'] is None else round(f['as_asked_mb_s'])} |")
    (args.out / "rescue.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
