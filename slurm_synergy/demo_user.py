"""The demo's second part: an ordinary user of the local cluster, who has never heard of
slurm-synergy, submits a training batch script of their own with plain sbatch, twice.

The shim keys the first and marks it; it trains to its end, measured while it runs, and
its profile lands in the cluster's shared store; the cluster's sync timer (root's, as a
site's cron) compiles it into the decision table; the second submission of the same
script is right-sized by the shim as it is submitted. Nobody runs sync by hand.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from slurm_synergy import paths
from slurm_synergy.cluster.users import ensure_user
from slurm_synergy.decisions.sync import TIMER_EVERY_S
from slurm_synergy.decisions.table import entries_of, read, table_path
from slurm_synergy.jobs import job_table, records, wait
from slurm_synergy.model.comment import decision, fingerprint
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.profiles import site_store_root
from slurm_synergy.slurm import Slurm

RUNUSER = shutil.which("runuser") or "/usr/sbin/runuser"    # the user's PATH has no sbin
DEMO_USER = "synergy-demo"
DEMO_ACCOUNT = "synergy-demo"
# What a user writes: the sizes users ask for, a language model trained by hand (the
# built-in trainer's, called as any script is).
SCRIPT = """#!/bin/bash
#SBATCH --job-name=my-lm
#SBATCH --cpus-per-task=2
#SBATCH --mem=3G
#SBATCH --gres=gpu:1
#SBATCH --time=20
#SBATCH --output=%x-%j.out
{python} -m profiler.train --arch transformer --batch 32 --workers 1 \\
    --max-iterations 200 --dataset-size 2048 --data data --generate-data
"""
# The timer's sync has this long after the first job's end to compile its decision.
DECISION_WAIT_S = 4 * TIMER_EVERY_S + 30


def plain_sbatch_twice(slurm: Slurm, user: str, out: Path) -> bool:
    """The ordinary user's two submissions, shown; False where a job failed or the second
    was not right-sized (with why). Only on the local cluster, as root (it makes the
    user, kept for the next demo); elsewhere it says why it does nothing."""
    store = site_store_root()
    if os.geteuid() != 0 or store is None or not paths.on_local_cluster():
        print("an ordinary user's own script: not shown (the local cluster, started by "
              "root, with its shared profile store, shows it)")
        return True
    ensure_user(slurm, user, DEMO_ACCOUNT)
    account = pwd.getpwnam(user)
    out.mkdir(parents=True, exist_ok=True)
    out.chmod(0o755)
    folder = out / user
    folder.mkdir(exist_ok=True)
    os.chown(folder, account.pw_uid, account.pw_gid)
    folder.chmod(0o700)
    script = folder / "train.sh"
    script.write_text(SCRIPT.format(python=sys.executable))
    os.chown(script, account.pw_uid, account.pw_gid)
    commands = paths.local_slurm_commands()
    env = {"PATH": ":".join([*([str(commands)] if commands else []),
                             str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
           "SLURM_CONF": str(paths.local_slurm_conf()), "HOME": str(folder),
           "SYNERGY_HOME": str(folder / ".slurm-synergy"), "SYNERGY_PROFILES": str(store)}

    def as_user(*argv: str) -> subprocess.CompletedProcess:
        """Run `argv` as the demo user, in their folder and environment (120 s at most)."""
        return subprocess.run([RUNUSER, "-u", user, "--", *argv], capture_output=True,
                              text=True, env=env, cwd=folder, timeout=120)

    can = as_user(sys.executable, "-c", "import profiler.train")
    if can.returncode != 0:
        print(f"an ordinary user's own script: not shown: {user} cannot run "
              f"{sys.executable} ({can.stderr.strip().splitlines()[-1:]}); a checkout "
              "other users can reach (o+x on each folder above it) shows it")
        return True

    def submit() -> str:
        """Submit the user's script with plain sbatch as them; returns the job id."""
        done = as_user("sbatch", "--parsable", str(script))
        if done.returncode != 0:
            raise SynergyError(f"sbatch as {user} failed: {done.stderr.strip()}")
        return done.stdout.strip().split(";")[0]

    print(f"{user}, an ordinary user, submits {script} with plain sbatch (2 cores, 3G):")
    first = submit()
    wait(slurm, [first])
    (one,) = records(slurm, [first])
    key = fingerprint(one.comment)
    if key is None:
        print(f"job {first} was not keyed by the shim (comment {one.comment!r})")
        return False
    (row,) = slurm.sacct([first], ["End"])
    ended = datetime.fromisoformat(row["End"]).timestamp()
    table = table_path()
    while key not in entries_of(read(table)[1], account.pw_uid):
        if time.time() - ended > DECISION_WAIT_S:
            print(f"no decision for {key} within {DECISION_WAIT_S:.0f} s of job {first}'s "
                  f"end; the sync timer's log: {paths.state_dir() / 'log' / 'sync.log'}")
            break
        time.sleep(1)
    else:
        print(f"the cluster's sync timer had compiled its decision at most "
              f"{max(0.0, time.time() - ended):.0f} s after job {first} ended; "
              f"{user} submits the same script again:")
    second = submit()
    wait(slurm, [second])
    recs = records(slurm, [first, second])
    print(job_table(recs))
    why = as_user(str(Path(sys.executable).parent / "synergy"), "plugin", "explain", key)
    shown = [line for line in why.stdout.splitlines()
             if line.strip().startswith(("decision:", "- cores:", "- memory:"))]
    print(f"why (synergy plugin explain {key}, as {user}):\n" + "\n".join(shown))
    failed = [r.job_id for r in recs if r.state != "COMPLETED"]
    sized = decision(recs[-1].comment) is not None
    if failed:
        print(f"{user}'s job(s) {', '.join(failed)} did not complete; logs in {folder}")
    return not failed and sized
