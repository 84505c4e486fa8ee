"""Ordinary users of the local cluster: the integration tests and the store bench submit
as them, because what the product does depends on who submits."""

from __future__ import annotations

import pwd
import subprocess

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
