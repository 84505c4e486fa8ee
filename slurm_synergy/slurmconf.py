"""slurm.conf read and replaced whole, with a backup: the plugin's and the node hooks'
installs both edit it, and say each change as a ConfChange."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from slurm_synergy.fileio import atomic_write_text
from slurm_synergy.model.errors import SynergyError


@dataclass(frozen=True)
class ConfChange:
    what: str
    done: bool                  # already in place

    @property
    def planned(self) -> str:
        """As a plan prints it."""
        return f"#    {'ok  ' if self.done else 'add '} {self.what}"

    @property
    def applied(self) -> str:
        """As --apply reports it."""
        return ("ok   " if self.done else "done ") + self.what


def read_conf(conf: Path) -> str:
    """The text of slurm.conf; SynergyError naming the file where it cannot be read."""
    try:
        return conf.read_text()
    except OSError as e:
        raise SynergyError(f"cannot read {conf}: {e.strerror}") from None


def write_conf(conf: Path, old: str, new: str) -> bool:
    """slurm.conf replaced by `new`, the old one kept as slurm.conf.synergy-backup; False
    when there was nothing to change."""
    if new == old:
        return False
    shutil.copy2(conf, conf.with_name(conf.name + ".synergy-backup"))
    atomic_write_text(conf, new, conf.stat().st_mode & 0o777)
    return True
