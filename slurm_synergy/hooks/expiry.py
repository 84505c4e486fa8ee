"""The stats folder kept to the site's stats_keep_days.

Every epilog writes one record per job and node (hooks/records.stats_path), so a site's
folder grows by its whole job count, and a report lists the folder each time it runs. An
epilog removes the records older than stats_keep_days: at most once a day for the folder
(the first epilog past the day claims it; the others, on every node, go on at once), and
for a bounded time, so that no epilog is held up by a large folder. A report over a period
whose records are gone reads sacct's figures there, and says so (docs/reports.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import stat
import time
from pathlib import Path
from typing import Callable

from slurm_synergy.hooks.records import JOB_ID, job_of, not_this_accounts_alone

MARKER = ".pruned"      # in the stats folder: its mtime is when it was last pruned
DAY_S = 86400.0
# An epilog's time for it, at most; less where a quarter of hook_timeout_s is less
# (epilog.run).
BUDGET_S = 3.0


def prune(folder: Path, keep_days: int, budget_s: float, log: Callable[[str], None],
          now: float | None = None) -> int:
    """Remove the records in `folder` last written over `keep_days` days ago (0: keep them
    all), once a day, for at most `budget_s` seconds; the number removed."""
    if keep_days <= 0:
        return 0
    now = time.time() if now is None else now
    # Only the epilogs' own folder (records._write_stats writes to no other): in one that
    # others may write or swap, names could be anyone's.
    if not_this_accounts_alone(folder):
        return 0
    try:
        fd = os.open(folder / MARKER, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
    except OSError as e:
        log(f"stats folder {folder} not pruned: {MARKER}: {e.strerror}")
        return 0
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        marked = os.fstat(fd)
        # A marker just made has this moment's mtime: its size tells it from a pruned one.
        if marked.st_size and now - marked.st_mtime < DAY_S:
            return 0
        # Claimed for the day before the scan, so that one cut short by its budget is not
        # begun again by every epilog after it; records are looked at in a random order,
        # so that the next day's scan reaches others.
        os.pwrite(fd, b"pruned\n", 0)
        os.utime(fd, (now, now))
        removed, done = _remove_older(folder, now - keep_days * DAY_S,
                                      time.monotonic() + budget_s)
    except BlockingIOError:
        return 0                        # another epilog prunes it now
    except OSError as e:
        log(f"stats folder {folder} not pruned: {e.strerror}")
        return 0
    finally:
        os.close(fd)
    if removed or not done:
        log(f"stats folder {folder}: {removed} records older than {keep_days} days removed"
            + ("" if done else f"; stopped after {budget_s:g} s, the rest tomorrow"))
    return removed


def _remove_older(folder: Path, cutoff: float, deadline: float) -> tuple[int, bool]:
    """(records removed, whether every record was looked at by the deadline)."""
    names = [n for n in os.listdir(folder) if n.endswith(".json") and JOB_ID.match(job_of(n))]
    random.shuffle(names)
    removed = 0
    for name in names:
        if time.monotonic() > deadline:
            return removed, False
        with contextlib.suppress(OSError):
            st = os.lstat(folder / name)
            if stat.S_ISREG(st.st_mode) and st.st_mtime < cutoff:
                os.unlink(folder / name)
                removed += 1
    return removed, True
