"""The workload's peak GPU memory, estimated before its steps run (profiler/gpumem.py
does the estimating, in a process of its own: it imports torch, the profiler does not).
A failed estimate is recorded with its reason and changes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from slurm_synergy.model.profile import BatchPeak, GpuMemory

METHOD = "PyTorch fake tensors, memory tracker over 2 SGD steps"
TIMEOUT_S = 120.0


def nearby(batch: int) -> list[int]:
    """The batch, half and twice it: what the gres rewrite and its advice look at."""
    return sorted({max(1, batch // 2), batch, batch * 2})


def estimate_gpu_memory(builtin: bool, script_args: list[str], batch: int) -> GpuMemory:
    if not builtin:
        return GpuMemory("", batch, reason="estimated for the built-in trainer only; a "
                         "script's own peak is measured where it runs on a GPU")
    if batch < 1:
        return GpuMemory("", batch, reason="the job's batch size is unknown")
    argv = [sys.executable, "-m", "profiler.gpumem", "--json", "--batches",
            ",".join(map(str, nearby(batch))), *script_args]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return GpuMemory("", batch, reason=f"the estimate took longer than {TIMEOUT_S:.0f}s")
    seconds = round(time.perf_counter() - t0, 3)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        return GpuMemory("", batch, seconds=seconds, reason=f"the estimate failed: {last}")
    try:
        peaks = tuple(BatchPeak(int(d["batch"]), float(d["peak_mib"]))
                      for d in map(json.loads, proc.stdout.splitlines()))
    except (ValueError, KeyError, TypeError) as e:
        return GpuMemory("", batch, seconds=seconds, reason=f"the estimate's output is "
                         f"unreadable: {e}")
    return GpuMemory(METHOD, batch, peaks, seconds)
