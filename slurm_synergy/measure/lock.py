"""The profile store as profiling uses it: one profiling job per workload at a time,
and the decision table recompiled once a profile is in."""

from __future__ import annotations

import contextlib
import fcntl
import os
from typing import Callable, Iterator

from slurm_synergy.model.errors import SynergyError
from slurm_synergy.profiles import ProfileStore
from slurm_synergy.measure.errors import PROG
from slurm_synergy.site import Site


@contextlib.contextmanager
def profiling_lock(store: ProfileStore, fp: str) -> Iterator[bool]:
    """True when this process holds the right to profile `fp`: the tasks of an array, or
    two jobs of one workload, would otherwise all profile it at the same time."""
    store.claim()
    fd = os.open(store.root / f".{fp}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
                 | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "r+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def sync_decisions(log: Callable[[str], None], prog: str = PROG,
                   site: Site | None = None) -> None:
    """Recompile the decision table (measured in a Slurm job: that cluster's), so the
    plugin rewrites the resubmission; best effort: where this user may not write the
    table, the site's own sync picks the profile up. `site`: the caller's, if it has one."""
    from slurm_synergy.decisions.sync import sync

    try:
        log(f"{prog}: {sync(site=site)}")
    except (SynergyError, OSError) as e:
        log(f"{prog}: decision table not updated: {e}")
