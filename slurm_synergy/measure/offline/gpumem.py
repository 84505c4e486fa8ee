"""The workload's peak GPU memory, estimated before its steps run: the built-in trainer's
by profiler/gpumem.py in a process of its own (it imports torch, the profiler does not),
a user's script by its own steps under the probe. A failed estimate is recorded with its
reason and changes nothing."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time

from slurm_synergy.model.profile import BatchPeak, GpuMemory
from slurm_synergy.measure.errors import ProfilingError
from slurm_synergy.measure.offline.steps import Runner, Step

METHOD = "PyTorch fake tensors, memory tracker over 2 SGD steps"
SCRIPT_STEPS = 2
SCRIPT_METHOD = f"the script's own step on the CPU, memory tracker over {SCRIPT_STEPS} steps"
TIMEOUT_S = 120.0


def nearby(batch: int) -> list[int]:
    """The batch, half and twice it: what the gres rewrite and its advice look at."""
    return sorted({max(1, batch // 2), batch, batch * 2})


def estimate_gpu_memory(script_args: list[str], batch: int) -> GpuMemory:
    """The built-in trainer's workload, from its model built as fake tensors."""
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


def measure_script_memory(runner: Runner, cores: int, procs: int, batch: int, *,
                          workers: int) -> GpuMemory:
    """A user's script, which the profiler cannot rebuild: its own steps, run by the
    probe in memory mode on the CPU (the GPUs hidden, for on one too small the step would
    fail) under the same memory tracker, with `workers` loader workers per process. A
    script that will not train on the CPU gives no estimate, which changes nothing."""
    if procs > 1:
        return GpuMemory("", batch, reason="a torchrun job's step is not run on the CPU "
                         "(its ranks need their GPUs); its peak is measured where it runs")
    # One warm-up step (it makes the optimizer's state) and two tracked: on the CPU a big
    # model's step is slow, and the estimate is held to TIMEOUT_S like the built-in one.
    short = dataclasses.replace(runner, warmup=1, iterations=SCRIPT_STEPS,
                                timeout_s=min(runner.timeout_s, TIMEOUT_S))
    t0 = time.perf_counter()
    try:
        m, _ = short.run(Step("memory", cores, workers, gpus=0))
    except ProfilingError as e:
        return GpuMemory("", batch, seconds=round(time.perf_counter() - t0, 3),
                         reason=f"the script's step did not run on the CPU: "
                         f"{str(e).splitlines()[0]}")
    finally:
        runner.steps_run = short.steps_run      # the step folders keep counting
    seconds = round(time.perf_counter() - t0, 3)
    peak, steps = m.get("step_peak_mib"), m.get("steps") or 0
    if peak is None or not steps:
        return GpuMemory("", batch, seconds=seconds, reason="the tracker saw no step")
    # The batch as the script took it, where the profiler was not told it.
    taken = batch if batch > 0 else round(m.get("samples", 0) / steps)
    return GpuMemory(SCRIPT_METHOD, taken, (BatchPeak(taken, float(peak)),), seconds)
