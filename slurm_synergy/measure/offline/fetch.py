"""DS-Analyzer's fetch rates on this node: reading the dataset from page cache (C) and
from storage (S), and the dataset's size, for the memory model F(x).

Storage reads are made cold without root: posix_fadvise(DONTNEED) drops a file's clean
pages from the page cache before it is read.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Sequence

from slurm_synergy.model.options import value_of
from slurm_synergy.model.profile import FetchRates

# Bookkeeping files of the generators are not data.
SKIP_PREFIXES = (".",)
READ_CHUNK = 1 << 20


def data_files(root: Path) -> list[Path]:
    """The dataset's files under `root` (or `root` itself), without the generators' dot-files."""
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*")
                  if p.is_file() and not p.name.startswith(SKIP_PREFIXES))


def _drop_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)        # dirty pages are not dropped; a freshly generated set has some
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _read_all(files: list[Path]) -> tuple[int, float]:
    t0 = time.perf_counter()
    total = 0
    for path in files:
        with open(path, "rb", buffering=0) as fh:
            while chunk := fh.read(READ_CHUNK):
                total += len(chunk)
    return total, time.perf_counter() - t0


def measure_fetch(root: Path, samples: int, budget_mb: float = 256.0) -> FetchRates:
    """Read up to `budget_mb` of the dataset cold, then again warm.

    `samples` is how many samples the workload counts in the dataset (images, clips,
    sequences), so rates convert to samples/s.
    """
    files = data_files(root)
    if not files:
        raise ValueError(f"no data files under {root}")
    dataset_bytes = sum(p.stat().st_size for p in files)
    # Every k-th file rather than the first ones: a spread over the class folders.
    step = max(1, int(dataset_bytes / (budget_mb * 2**20)))
    picked = files[::step]
    for path in picked:
        _drop_cache(path)
    cold_bytes, cold_s = _read_all(picked)
    warm_bytes, warm_s = _read_all(picked)
    mb = 2**20
    return FetchRates(
        cache_mb_s=warm_bytes / mb / max(warm_s, 1e-9),
        storage_mb_s=cold_bytes / mb / max(cold_s, 1e-9),
        dataset_mb=dataset_bytes / mb,
        sample_mb=dataset_bytes / mb / max(1, samples),
        files_read=len(picked))


def fetch_rates_for(measured: dict[str, Any],
                 script_args: Sequence[str]) -> tuple[FetchRates | None, list[str]]:
    """The memory model's read rates, from the folder the script's dataset reads: the one
    it names itself (ImageFolder's root and the like), else --data, else the first of its
    arguments that is a folder."""
    candidates = [measured.get("data_root") or "", value_of(script_args, ["--data"]) or "",
                  *(a for a in script_args if not a.startswith("-"))]
    folder = next((Path(c) for c in candidates if c and Path(c).is_dir()), None)
    if folder is None:
        return None, ["no data folder found (the dataset names none, no --data, no folder "
                      "among the arguments): memory model off"]
    try:
        return measure_fetch(folder, int(measured.get("dataset_len") or 0) or 1), []
    except (ValueError, OSError) as e:
        return None, [f"data folder {folder}: {e}: memory model off"]
