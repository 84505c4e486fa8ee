"""Root's timers as processes of their own: the decision table's sync and the time-limit
timer each run one round every so many seconds, for ever (a site's cron as one process;
the local cluster's timers), under a name ps shows."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable


def name_process(name: str) -> None:
    """This process's name (comm, at most 15 characters) is `name`, as ps shows it: the
    local cluster finds its timers by it."""
    try:
        Path("/proc/self/comm").write_text(name)
    except OSError:
        pass        # not Linux: only the name ps shows


def keep_running(round_: Callable[[], str], every_s: float,
                 log: Callable[[str], None] = print) -> None:
    """`round_` every `every_s` seconds, for ever; logs a round's line when it differs from
    the last one's. One failed round never stops the timer."""
    last = ""
    while True:
        try:
            line = round_()
        except Exception as e:  # noqa: BLE001 - one failed round must not stop the timer
            line = f"round failed: {type(e).__name__}: {e}"
        if line != last:
            log(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}")
            last = line
        time.sleep(every_s)
