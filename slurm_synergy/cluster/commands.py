"""The local cluster's setup commands run and checked, and its daemons read back: a
command that fails names itself and what it printed; a log is read for its last lines; a
pid file names a daemon only while that daemon runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

from slurm_synergy.model.errors import SynergyError


def running_pid(pidfile: Path, comm: str) -> int | None:
    """The pid `pidfile` names while a process called `comm` runs under it; None where the
    file is missing or unreadable, or the pid is gone or reused by another program."""
    try:
        pid = int(pidfile.read_text().split()[0])
        running = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError, IndexError):
        return None
    # comm is truncated to 15 characters; Debian's binaries are e.g. slurmctld-wlm.
    return pid if running.startswith(comm[:15]) else None


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
