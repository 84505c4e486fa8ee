"""Slurm calls one round of root's time-limit timer makes, on the local cluster, with a
user's 2,000 opted-out pending jobs (--comment=synergy:time-as-asked, of a workload with
a prediction) and one keyed job that vanishes while the round runs (cancelled right after
the round's first read of the queue saw it).

Every Slurm command is counted by a stand-in on PATH that logs it and runs the real one
(any version of the code counts alike: --round names another's round command). Rounds:
the first (the vanished job among them), then one more with nothing new.

Writes DIR/timer_calls.json and DIR/timer_calls.md; a few minutes (the submissions).

    .venv/bin/python bench/bench_timer_calls.py [--jobs 2000] [--out DIR] [--round 'CMD ...']
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from slurm_synergy.cluster.localbox import LocalCluster  # noqa: E402
from slurm_synergy.jobs import wait  # noqa: E402
from slurm_synergy.slurm import Slurm  # noqa: E402
from tenant import add_round_option, as_user, round_argv, script, tenants  # noqa: E402

USER = "synergy-alice"
COMMANDS = ("squeue", "sacct", "scontrol", "sinfo", "sacctmgr", "scancel")


def counting_path(folder: Path, log: Path, vanish: Path) -> str:
    """A folder of stand-ins for Slurm's commands that log each call to `log`; the first
    squeue after `vanish` names a job (the round's read of the queue) cancels that job."""
    folder.mkdir()
    for cmd in COMMANDS:
        real = shutil.which(cmd)
        assert real, f"{cmd} not on PATH"
        (folder / cmd).write_text(
            f"#!/bin/bash\necho \"{cmd} $*\" >> {log}\n"
            f"if [ {cmd} = squeue ] && [ -s {vanish} ]; then\n"
            f"  {real} \"$@\"; rc=$?; {shutil.which('scancel')} $(cat {vanish}); : > {vanish}\n"
            f"  exit $rc\nfi\nexec {real} \"$@\"\n")
        (folder / cmd).chmod(0o755)
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    add_round_option(ap)
    args = ap.parse_args()
    LocalCluster(sync_every_s=0).up(log=lambda line: None)
    slurm = Slurm()
    with tenants(slurm, (USER,), ROOT) as shared:
        rounds, gone, kept, one_round = measure(slurm, shared, args.jobs, args.round)
    result = {"jobs_opted_out": args.jobs, "vanished": gone, "set_expected": kept,
              "round": one_round, "rounds": rounds, "slurm": slurm.version(),
              "at": time.strftime("%Y-%m-%d %H:%M")}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "timer_calls.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["| round | Slurm calls | by command | s | exit | said |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['round']} | {r['calls']} | "
              f"{', '.join(f'{k} {v}' for k, v in sorted(r['by_command'].items()))} | "
              f"{r['seconds']} | {r['exit']} | {r['said'][:160]} |" for r in rounds]
    (args.out / "timer_calls.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def measure(slurm: Slurm, shared: Path, jobs: int, round_command: str
            ) -> tuple[list[dict], str, str, list[str]]:
    """The queue set up as a user's, and root's two rounds counted."""
    log, vanish = shared / "root" / "calls.log", shared / "root" / "vanish"
    one_round = round_argv(round_command, shared / "root" / "time-limits.json")
    env = dict(os.environ, PATH=counting_path(shared / "root" / "bin", log, vanish),
               SYNERGY_DECISIONS=str(shared / "root" / "synergy-decisions.tbl"))
    job = script(shared, "job", shared.name)
    sub = ["sbatch", "--parsable", "--partition=gpu", "--cpus-per-task=1", "--mem=100M",
           "--time=20", f"--output={shared}/%j.out"]
    ids: list[str] = []
    rounds = []
    try:
        first = as_user(USER, [*sub, str(job)], shared)          # the workload's history
        ids.append(first)
        wait(slurm, [first])
        for _ in tqdm(range(jobs), desc="opted-out jobs", unit="job", mininterval=5):
            ids.append(as_user(USER, [*sub, "--hold", "--comment=synergy:time-as-asked",
                                      str(job)], shared))
        gone = as_user(USER, [*sub, "--hold", str(job)], shared)
        kept = as_user(USER, [*sub, "--hold", str(job)], shared)
        ids += [gone, kept]
        vanish.write_text(gone)
        for n in (1, 2):
            log.write_text("")
            start = time.monotonic()
            done = subprocess.run(one_round, capture_output=True, text=True, env=env,
                                  cwd=shared)
            took = time.monotonic() - start
            calls = Counter(line.split()[0] for line in log.read_text().splitlines())
            rounds.append({"round": n, "calls": sum(calls.values()), "by_command":
                           dict(calls), "seconds": round(took, 2),
                           "said": (done.stdout + done.stderr).strip()[:2000],
                           "exit": done.returncode})
    finally:
        slurm.cancel(ids)
    return rounds, gone, kept, one_round


if __name__ == "__main__":
    sys.exit(main())
