"""An ordinary user of the local cluster for the benches that need one (root's timer
acting on users' jobs): made where missing and removed after, a folder all may write, and
the user's commands run with runuser."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

from slurm_synergy.cluster.users import ensure_user, reachable
from slurm_synergy.slurm import Slurm

ACCOUNT = "synergy-tenants"


@contextlib.contextmanager
def tenants(slurm: Slurm, names: tuple[str, ...], checkout: Path) -> Iterator[Path]:
    """`names` as users who may submit, the checkout's venv theirs to run, and a folder
    all may write (mode 1777) with a root-only `root/` in it, for the block."""
    made = [n for n in names if ensure_user(slurm, n, ACCOUNT)]
    shared = Path(tempfile.mkdtemp(prefix="synergy-bench-"))
    shared.chmod(0o1777)
    (shared / "root").mkdir(mode=0o700)
    try:
        with reachable(checkout):
            yield shared
    finally:
        shutil.rmtree(shared, ignore_errors=True)
        for name in made:
            subprocess.run(["userdel", name], check=False)


def as_user(user: str, args: list[str], shared: Path,
            extra: dict[str, str] | None = None) -> str:
    """`args` run as `user` in `shared`, with `extra` in its environment besides PATH,
    SLURM_CONF and HOME; its output, or SystemExit with its error."""
    env = {"PATH": os.environ["PATH"], "SLURM_CONF": os.environ["SLURM_CONF"],
           "HOME": str(shared)}
    ran = subprocess.run([shutil.which("runuser") or "/usr/sbin/runuser", "-u", user, "--",
                          "env", *(f"{k}={v}" for k, v in (extra or {}).items()), *args],
                         capture_output=True, text=True, env=env, cwd=shared)
    if ran.returncode:
        raise SystemExit(f"{user}: {' '.join(args[:3])}: {ran.stderr.strip()}")
    return ran.stdout.strip()


def sbatch(user: str, shared: Path, script: Path, *options: str) -> str:
    """A one-core job of `user`'s; its id."""
    return as_user(user, ["sbatch", "--parsable", "--cpus-per-task=1", "--mem=100M",
                          f"--output={shared}/%j.out", *options, str(script)], shared)


def script(shared: Path, name: str, tag: str, nap: str = "${NAP:-1}") -> Path:
    """A job script of its own workload key (the tag in a command: a key leaves a
    script's comments out) that naps as its environment says."""
    path = shared / f"{name}.sh"
    path.write_text(f"#!/bin/bash\n: {name} {tag}\nsleep {nap}\n")
    path.chmod(0o755)
    return path


def add_round_option(ap: argparse.ArgumentParser) -> None:
    """--round: root's time-limit round to measure, as a command (another checkout's)."""
    ap.add_argument("--round", default="", help="root's round, a command (default: this "
                    "checkout's synergy plugin timelimits, with a record of its own)")


def round_argv(command: str, state: Path) -> list[str]:
    """The round --round names, else this checkout's with its record at `state`."""
    return shlex.split(command) if command else [
        sys.executable, "-m", "slurm_synergy.cli", "plugin", "timelimits", "--state", str(state)]


def site_sync(site: Path, policy: Path, partition: str) -> None:
    """The site's cron: root compiles every user's folder of the store `site` under
    `policy`, for `partition`."""
    subprocess.run([sys.executable, "-m", "slurm_synergy.cli", "plugin", "sync",
                    "--partition", partition], check=True, capture_output=True,
                   env={**os.environ, "SYNERGY_PROFILES": str(site),
                        "SYNERGY_POLICY": str(policy)})
