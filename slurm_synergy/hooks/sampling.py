"""The per-job sampler the prolog starts on each node: NVML readings of the job's GPUs
every period, and its cgroup's memory peak and CPU time (jobcgroup), for the job's life,
as running totals written every `flush_s`.

It stops on SIGTERM from the epilog, writing its totals a last time, and on its own once
the prolog's record is gone (an epilog that never stopped it), so none outlives its job
for long.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from slurm_synergy.fileio import atomic_write_text
from slurm_synergy.gpu import Backend
from slurm_synergy.gpu.sampler import Totals, sample_once
from slurm_synergy.hooks.jobcgroup import CgroupUse, Watch
from slurm_synergy.hooks.records import RecordError


@dataclass(frozen=True)
class SamplerTotals:
    """What the sampler last wrote: each GPU's totals by UUID, and the job's cgroup use
    (None where it did not watch the cgroup)."""

    gpus: dict[str, Totals]
    cgroup: CgroupUse | None


def write_totals(path: Path, job_id: str, totals: Sequence[Totals],
                 cgroup: CgroupUse | None = None) -> None:
    """Write the job's running totals to `path` (0600), replacing the last ones."""
    doc = {"job_id": job_id, "updated": time.time(), "gpus": [t.to_dict() for t in totals],
           "cgroup": asdict(cgroup) if cgroup else None}
    atomic_write_text(path, json.dumps(doc) + "\n", 0o600)


def read_totals(path: Path) -> SamplerTotals:
    """What the sampler last wrote; RecordError where it cannot be read."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        gpus = {t["uuid"]: Totals.from_dict(t) for t in doc["gpus"]}
        cg = doc.get("cgroup")
        return SamplerTotals(gpus, CgroupUse(**cg) if cg else None)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise RecordError(f"{path}: {e}") from None


def sample_job(backend: Backend | None, job_id: str, uuids: Sequence[str], period_s: float,
               out: Path, alive: Path, stop: threading.Event, watch: Watch | None = None,
               flush_s: float = 10.0) -> int:
    """Sample the job's GPUs every `period_s` and follow its cgroup until stopped, its cgroup
    is gone or its prolog record no longer names this sampler; returns 1 with nothing to follow."""
    gpus = backend.find(uuids)[0] if backend is not None and uuids else []
    if not gpus and watch is None:
        return 1
    totals = [Totals(g.info.uuid) for g in gpus]
    last_flush = last_sample = -period_s
    while True:
        now = time.monotonic()
        if gpus and now - last_sample >= period_s:
            sample_once(gpus, totals, time.monotonic)
            last_sample = now
        if watch is not None:
            watch.poll()
        # With no GPU to follow, the job's cgroup gone is the job over.
        ended = not gpus and watch is not None and watch.done
        if stop.is_set() or ended or now - last_flush >= max(flush_s, period_s):
            write_totals(out, job_id, totals, watch.use() if watch is not None else None)
            last_flush = now
            if stop.is_set() or ended or not _still_mine(alive):
                return 0
        stop.wait(min(period_s, watch.interval()) if watch is not None else period_s)


def _still_mine(record: Path) -> bool:
    """The job's prolog record still exists and names no other sampler (a prolog run
    twice over a lost record must not leave two writing one file)."""
    try:
        pid = json.loads(record.read_text()).get("sampler_pid")
    except FileNotFoundError:
        return False
    except (OSError, ValueError, AttributeError):
        return True      # mid-rewrite or unreadable: the epilog decides, not us
    return pid is None or pid == os.getpid()


def install_stop_handler(stop: threading.Event) -> None:
    """Set `stop` on SIGTERM (the epilog's) or SIGINT."""
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
