"""The per-job GPU sampler the prolog starts: NVML readings every period for the job's
life, as running totals written every `flush_s`.

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
from pathlib import Path
from typing import Sequence

from slurm_synergy.fileio import atomic_write_text
from slurm_synergy.gpu import Backend
from slurm_synergy.gpu.sampler import Totals, sample_once
from slurm_synergy.hooks.records import RecordError


def write_totals(path: Path, job_id: str, totals: Sequence[Totals]) -> None:
    doc = {"job_id": job_id, "updated": time.time(), "gpus": [t.to_dict() for t in totals]}
    atomic_write_text(path, json.dumps(doc) + "\n", 0o600)


def read_totals(path: Path) -> dict[str, Totals]:
    """The sampler's last totals by GPU UUID."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        return {t["uuid"]: Totals.from_dict(t) for t in doc["gpus"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise RecordError(f"{path}: {e}") from None


def sample_job(backend: Backend, job_id: str, uuids: Sequence[str], period_s: float,
               out: Path, alive: Path, stop: threading.Event, flush_s: float = 10.0) -> int:
    gpus, _ = backend.find(uuids)
    if not gpus:
        return 1
    totals = [Totals(g.info.uuid) for g in gpus]
    last_flush = 0.0
    while True:
        sample_once(gpus, totals, time.monotonic)
        now = time.monotonic()
        if stop.is_set() or now - last_flush >= max(flush_s, period_s):
            write_totals(out, job_id, totals)
            last_flush = now
            if stop.is_set() or not _still_mine(alive):
                return 0
        stop.wait(period_s)


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
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
