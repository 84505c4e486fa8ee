"""Root's two timers on the local cluster (the decision table's sync and the time-limit
timer: decisions/rounds.py), as processes of their own: each started with the settings
it was given kept beside its pid file, so that `up` starts again one that runs with
others (a bench's store or policy, since removed, would fail every round), and each one's
status with how its last round went."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from slurm_synergy.decisions.rounds import last_round_path, read_last_round
from slurm_synergy.fileio import atomic_write_text


def settings() -> dict[str, str]:
    """This process's SYNERGY_* settings: a root timer started now would run with them."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("SYNERGY_")}


def _settings_file(pidfile: Path) -> Path:
    return pidfile.with_suffix(".settings")


def runs_as_now(pidfile: Path) -> bool:
    """The timer of `pidfile` was started with this process's settings (one started before
    they were kept counts as started with others)."""
    try:
        return json.loads(_settings_file(pidfile).read_text()) == settings()
    except (OSError, ValueError):
        return False


def start(action: list[str], every_s: float, table: Path, conf: Path, pidfile: Path,
          log: Path) -> None:
    """`synergy plugin <action> --every every_s --table table` in the background, logging
    to `log`, its pid and this process's settings kept (the sync timer compiles the store
    they name: site_store_root)."""
    with open(log, "a") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "slurm_synergy.cli", "plugin", *action,
             "--every", str(every_s), "--table", str(table)],
            stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True,
            env=dict(os.environ, SLURM_CONF=str(conf)))
    atomic_write_text(pidfile, f"{proc.pid}\n")
    atomic_write_text(_settings_file(pidfile), json.dumps(settings()), 0o600)


def status_lines(name: str, pid: int | None, what: str, log: Path, table: Path,
                 program: str) -> list[str]:
    """The timer's line for `cluster status`, and where it runs, how its last round went."""
    lines = [f"{name:<13} {'up' if pid else 'off':<5} pid {pid or '-'} ({what}; log {log})"]
    last = read_last_round(last_round_path(table, program))
    if pid and last is not None:
        ago = f"{max(0, time.time() - last.at):.0f} s ago"
        lines.append(f"{'':<13} last round {ago}: "
                     + ("ran through" if last.ok else f"FAILED: {last.line}"))
    return lines
