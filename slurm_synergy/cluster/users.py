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


def ensure_user(slurm: Slurm, name: str, account: str) -> bool:
    """`name` is a system user (no home, no login shell) who may submit under
    `account`. Returns True when the user was made here (the caller removes it)."""
    try:
        pwd.getpwnam(name)
        made = False
    except KeyError:
        subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                        "--shell", "/usr/sbin/nologin", name], check=True)
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
