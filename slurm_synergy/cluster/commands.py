"""The local cluster's setup commands run and checked, and its daemons' logs read back:
a command that fails names itself and what it printed; a log is read for its last lines."""

from __future__ import annotations

import subprocess
from pathlib import Path

from slurm_synergy.model.errors import SynergyError


def tail(path: Path, lines: int = 20) -> str:
    """The last `lines` lines of a log, or why it cannot be read."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(cannot read {path}: {exc.strerror})"


def checked(cmd: list[str], what: str, env: dict[str, str] | None = None) -> None:
    """Run a setup command; SynergyError naming `what`, its exit and its output on failure."""
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise SynergyError(f"{what} failed (exit {proc.returncode}): "
                           f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
