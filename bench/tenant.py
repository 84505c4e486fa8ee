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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from slurm_synergy.cluster.localbox import LocalCluster
from slurm_synergy.cluster.users import ensure_user, reachable
from slurm_synergy.decisions.sync import TIMER_EVERY_S
from slurm_synergy.slurm import Slurm

ACCOUNT = "synergy-tenants"


@contextlib.contextmanager
def cluster_as_found(step_manager: bool = False) -> Iterator[None]:
    """The local cluster up with its timers off (and the step manager, where asked) for
    the block; afterwards as it was found: down, or up with its own settings and its
    timers on or off, on the environment as it is then (`up` restarts a timer started with
    a bench's store or policy), and its own decision table compiled again."""
    found = LocalCluster()
    was_up, timers_on = found.status()[0], found.timer_running()
    LocalCluster(sync_every_s=0, step_manager=step_manager).up(log=lambda line: None)
    try:
        yield
    finally:
        if not was_up:
            LocalCluster().down(log=lambda line: None)
        else:
            LocalCluster(sync_every_s=TIMER_EVERY_S if timers_on else 0).up(
                log=lambda line: None)
            own_table_back()


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


@dataclass(frozen=True)
class SiteStore:
    """A site's profile store every user may write, the policy its users' jobs read and
    root's copy of it (root's sync refuses a policy a user can write)."""

    store: Path
    policy: Path
    root_policy: Path

    def env(self, partition: str) -> dict[str, str]:
        """What a user's submissions to `partition` run with."""
        return {"SYNERGY_PROFILES": str(self.store), "SYNERGY_POLICY": str(self.policy),
                "SBATCH_PARTITION": partition}


def site_store(shared: Path, policy_text: str) -> SiteStore:
    """A SiteStore in `shared` (tenants' folder), its policy `policy_text`."""
    store = shared / "site"
    store.mkdir()
    store.chmod(0o1777)
    policy = shared / "policy.toml"
    policy.write_text(policy_text)
    policy.chmod(0o644)
    root_policy = shared / "root" / "policy.toml"
    root_policy.write_text(policy_text)
    return SiteStore(store, policy, root_policy)


def user_files(folder: Path, files: dict[str, str | int], uid: int, gid: int,
               age_s: float = 600) -> None:
    """`files` (name: text, or a dataset of that many MB, sparse) written in `folder` as
    `uid`'s, `age_s` old: written well before the job, as users' files are (a file written
    as a run starts is its output, not its program: probe/cmdfiles.py)."""
    for name, content in files.items():
        path = folder / name
        if isinstance(content, int):
            with open(path, "wb") as f:
                f.truncate(content << 20)
        else:
            path.write_text(content)
        os.chown(path, uid, gid)
        os.utime(path, (time.time() - age_s,) * 2)


def site_sync(site: SiteStore, partition: str) -> None:
    """The site's cron: root compiles every user's folder of the store under its own
    policy, for `partition`."""
    subprocess.run([sys.executable, "-m", "slurm_synergy.cli", "plugin", "sync",
                    "--partition", partition], check=True, capture_output=True,
                   env={**os.environ, "SYNERGY_PROFILES": str(site.store),
                        "SYNERGY_POLICY": str(site.root_policy)})


def own_table_back() -> None:
    """The local cluster's own decision table compiled again, after a bench's store."""
    subprocess.run([sys.executable, "-m", "slurm_synergy.cli", "plugin", "sync"],
                   capture_output=True)
