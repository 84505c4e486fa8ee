"""Root's timers as processes of their own: the decision table's sync and the time-limit
timer each run one round every so many seconds, for ever (a site's cron as one process;
the local cluster's timers), under a name ps shows, each leaving how its last round went
beside the table (`synergy cluster status` shows it: a timer whose rounds fail, on a
removed policy say, is seen at once, not only in its log)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from slurm_synergy.fileio import atomic_write_text

FAILED = "round failed: "
LAST_ROUND_BYTES = 8192


@dataclass(frozen=True)
class LastRound:
    """How a timer's last round went: when (epoch s), whether it ran through, its line."""

    at: float
    ok: bool
    line: str


def last_round_path(table: Path, timer: str) -> Path:
    """Where the timer named `timer` leaves its last round, beside the table it serves."""
    return table.with_name(f".{table.name}.{timer}.last-round")


def read_last_round(path: Path) -> LastRound | None:
    """The timer's last round; None where it left none (or one this cannot read)."""
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read(LAST_ROUND_BYTES))
        return LastRound(float(data["at"]), bool(data["ok"]), str(data["line"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def name_process(name: str) -> None:
    """This process's name (comm, at most 15 characters) is `name`, as ps shows it: the
    local cluster finds its timers by it."""
    try:
        Path("/proc/self/comm").write_text(name)
    except OSError:
        pass        # not Linux: only the name ps shows


def keep_running(round_: Callable[[], tuple[str, bool]], every_s: float,
                 log: Callable[[str], None] = print, record: Path | None = None) -> None:
    """`round_` (its line, and whether it ran through) every `every_s` seconds, for ever;
    logs a round's line when it differs from the last one's, and leaves each round's
    outcome at `record`. One failed round (one that raised) never stops the timer."""
    last = fault = ""
    while True:
        try:
            line, ok = round_()
        except Exception as e:  # noqa: BLE001 - one failed round must not stop the timer
            line, ok = f"{FAILED}{type(e).__name__}: {e}", False
        if line != last:
            log(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}")
            last = line
        if record is not None:
            try:
                atomic_write_text(record, json.dumps(asdict(LastRound(
                    time.time(), ok, line[:LAST_ROUND_BYTES // 2]))) + "\n", 0o644)
            except OSError as e:
                if str(e) != fault:
                    log(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} the rounds' outcome not left "
                        f"at {record}: {e}")
                fault = str(e)
        time.sleep(every_s)
