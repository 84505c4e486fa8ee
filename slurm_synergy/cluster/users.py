"""Ordinary users of the local cluster: the demo, the integration tests and the store
bench submit as them, because what the product does depends on who submits."""

from __future__ import annotations

import pwd
import stat
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from slurm_synergy.slurm import Slurm


SHELL = "/bin/sh"


def ensure_user(slurm: Slurm, name: str, account: str) -> bool:
    """`name` is a system user (no home, no password) who may submit under `account`.
    Returns True when the user was made here (the caller removes it).

    Its shell is /bin/sh, not nologin: slurmd loads a job's environment through root's
    `su - user` where the job asks it (--export=ALL,VAR=..., --export=NONE), and from
    Slurm 26.05 a job whose environment cannot be loaded is requeued, never run."""
    try:
        user = pwd.getpwnam(name)
        made = False
        if user.pw_shell != SHELL:
            subprocess.run(["usermod", "--shell", SHELL, name], check=True)
    except KeyError:
        subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                        "--shell", SHELL, name], check=True)
        made = True
        # An association kept from an earlier run names the user by the uid slurmctld
        # resolved then (or could not): made again, it must name this one.
        if (account, name) in slurm.associations():
            slurm.remove_user(name)
    slurm.add_user(name, account)
    return made


@contextmanager
def reachable(checkout: Path) -> Iterator[None]:
    """Ordinary users may run `checkout`'s venv meanwhile: o+x on each folder above it
    that lacks it, o+r on the checkout (Python lists it), put back after. A fresh clone
    lives in a 0700 folder (mktemp -d)."""
    changed = []
    for folder in [checkout, *checkout.parents]:
        mode = folder.stat().st_mode
        need = stat.S_IXOTH | (stat.S_IROTH if folder == checkout else 0)
        if mode & need != need:
            folder.chmod(mode | need)
            changed.append((folder, mode))
    try:
        yield
    finally:
        for folder, mode in changed:
            folder.chmod(mode)
