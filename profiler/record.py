"""What a training run records: one timing record per iteration, the summary over the
measured ones, peak memory, and the files they go to (iterations.csv, summary.json)."""

from __future__ import annotations

import csv
import io
import os
import resource
import tempfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch

MB = 2**20


@dataclass
class IterationStats:
    iteration: int
    epoch: int
    data_s: float       # blocked waiting for the loader
    h2d_s: float        # host-to-device copy
    compute_s: float    # forward + backward + optimizer step
    total_s: float
    cpu_s: float        # CPU time of this process, all threads (not loader workers)
    loss: float


def summarise(stats: list[IterationStats], warmup: int, batch: int) -> dict[str, Any]:
    """Throughput, mean timings and CPU time over the iterations after the warmup (over
    all of them when the run is no longer than the warmup, so short runs still report)."""
    measured = stats[warmup:] or stats
    total = sum(s.total_s for s in measured)
    data = sum(s.data_s for s in measured)
    cpu = sum(s.cpu_s for s in measured)
    n = len(measured)
    return {
        "measured_iterations": n,
        "samples_per_s": n * batch / total if total > 0 else 0.0,
        "cpu_s": cpu,
        "host_cpu_s_per_sample": cpu / (n * batch),
        "mean_data_s": data / n,
        "mean_h2d_s": sum(s.h2d_s for s in measured) / n,
        "mean_compute_s": sum(s.compute_s for s in measured) / n,
        "mean_total_s": total / n,
        "data_stall_fraction": data / total if total > 0 else 0.0,
        "final_loss": stats[-1].loss,
    }


def iterations_csv(stats: list[IterationStats]) -> str:
    """One CSV line per iteration's stats, under a header of their field names."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([f.name for f in fields(IterationStats)])
    for s in stats:
        row = asdict(s)
        writer.writerow([f"{v:.6f}" if isinstance(v, float) else "" if v is None else v
                         for v in row.values()])
    return out.getvalue()


def peak_rss_mb() -> float:
    """Peak resident memory of this process plus that of its largest finished child (the
    loader workers, once shut down); Linux reports ru_maxrss in KiB."""
    kib = sum(resource.getrusage(who).ru_maxrss
              for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return kib * 1024 / MB


def peak_gpu_mem_mb(gpus: int) -> float | None:
    """The most memory PyTorch allocated on any one GPU, None without GPUs."""
    if not gpus:
        return None
    return max(torch.cuda.max_memory_allocated(i) for i in range(gpus)) / MB


def write_whole(path: Path, text: str) -> None:
    """Write `text` to `path` (0644) by renaming a temporary file over it."""
    # Reports read summary.json while jobs write theirs: a reader sees all or nothing.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
