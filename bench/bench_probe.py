"""Benchmark the script probe's cost, two ways, side by side in one run.

End to end: each round runs the built-in trainer for --iterations on one workload twice,
once plain and once under `python -m slurm_synergy.probe --mode watch` (the mode
ordinary jobs run in), in alternating order, so drift on a shared machine hits both
alike. The figure is the trainer's own samples/s (its summary.json), so the probe is
judged by a clock it does not own; the probe's own figure for the same run is kept
beside it, to show it measures what the trainer measures. On a shared 2-core machine a
single run swings by several percent, so the spread is reported with the median.

Per batch: what the hooks add to one batch, measured directly on a loader that costs
next to nothing (an in-memory dataset, no workers): --batches batches plain and probed,
alternating. Divided by each workload's step time, it is the probe's share of a step.
Per backward pass: the same for a loop with no loader and no optimizer, whose steps
the probe counts at autograd's backward (a scalar's backward, which costs next to
nothing itself).

Figures go to bench/results/probe.json.

    make bench              # or: .venv/bin/python bench/bench_probe.py --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The built-in workloads: an image, a text and an audio model, each with its data kind.
WORKLOADS = {
    "resnet8-jpeg": ["--arch", "resnet", "--depth", "8", "--batch", "32"],
    "transformer-text": ["--arch", "transformer", "--batch", "32", "--dataset-size", "2048"],
    "m5-audio": ["--arch", "m5", "--batch", "32"],
}


def run(workload: str, data: Path, out: Path, iterations: int, probed: bool) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "profiler.train", *WORKLOADS[workload], "--workers", "1",
            "--data", str(data / workload), "--generate-data", "--output", str(out),
            "--max-iterations", str(iterations), "--warmup", "3"]
    if probed:
        argv = [sys.executable, "-m", "slurm_synergy.probe", "--mode", "watch",
                "--out", str(out / "probe.json"), "--", *argv]
    subprocess.run(argv, check=True, capture_output=True, cwd=ROOT)
    trainer = json.loads((out / "summary.json").read_text())["samples_per_s"]
    probe = None
    if probed:
        probe = json.loads((out / "probe.json").read_text())["measurement"]["samples_per_s"]
    return {"trainer": trainer, "probe": probe}


# Iterates a loader whose batches cost next to nothing: the time per batch is the
# DataLoader's own, plus the probe's hooks when it runs under the probe.
PER_BATCH = """
import sys, time, torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.zeros(256, 4)), batch_size=1)
n, t0 = 0, time.perf_counter()
while n < int(sys.argv[1]):
    for batch in loader:
        n += 1
print((time.perf_counter() - t0) / n * 1e6)
"""


# Steps of a loop without loader or optimizer: one backward pass each.
PER_BACKWARD = """
import sys, time, torch
w = torch.zeros(4, requires_grad=True)
n, t0 = 0, time.perf_counter()
while n < int(sys.argv[1]):
    w.sum().backward()
    n += 1
print((time.perf_counter() - t0) / n * 1e6)
"""


def per_step_us(folder: Path, name: str, text: str, steps: int, probed: bool) -> float:
    """Microseconds per step of the script `text`, plain or under the probe's watch mode."""
    script = folder / f"{name}.py"
    script.write_text(text)
    argv = [sys.executable, str(script), str(steps)]
    if probed:
        argv = [sys.executable, "-m", "slurm_synergy.probe", "--mode", "watch",
                "--out", str(folder / f"{name}.json"), "--", *argv]
    done = subprocess.run(argv, check=True, capture_output=True, text=True, cwd=ROOT)
    return float(done.stdout.split()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--iterations", type=int, default=30)
    p.add_argument("--batches", type=int, default=50000)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "probe.json")
    args = p.parse_args()
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        per_step: dict[str, dict] = {}
        for name, text in (("per_batch", PER_BATCH), ("per_backward", PER_BACKWARD)):
            plain_us, probed_us = [], []
            for r in range(args.rounds):
                for with_probe in ((False, True) if r % 2 == 0 else (True, False)):
                    (probed_us if with_probe else plain_us).append(
                        per_step_us(Path(tmp), name, text, args.batches, with_probe))
            added = statistics.median(b - a for a, b in zip(plain_us, probed_us))
            per_step[name] = {"plain": plain_us, "probed": probed_us, "hooks_median": added}
            print(f"{name.replace('_', ' ')}: {statistics.median(plain_us):.1f} us plain, "
                  f"{statistics.median(probed_us):.1f} us probed: the hooks add "
                  f"{added:.1f} us", flush=True)
        hook_us = per_step["per_batch"]["hooks_median"]
        data = Path(tmp) / "data"
        for workload in WORKLOADS:        # generate the data (and warm the cache) first
            run(workload, data, Path(tmp) / "warm", 5, probed=False)
        for workload in WORKLOADS:
            plain, probed, own = [], [], []
            for r in range(args.rounds):
                order = (False, True) if r % 2 == 0 else (True, False)
                for with_probe in order:
                    got = run(workload, data, Path(tmp) / f"{workload}-{r}-{with_probe}",
                              args.iterations, with_probe)
                    (probed if with_probe else plain).append(got["trainer"])
                    if with_probe:
                        own.append(got["probe"] / got["trainer"])
            ratios = [b / a for a, b in zip(plain, probed)]
            # The workload's step, from its plain runs: batch over samples/s.
            step_us = 32 / statistics.median(plain) * 1e6
            results[workload] = {
                "step_us": round(step_us), "hook_share_of_step": hook_us / step_us,
                "plain_samples_per_s": plain, "probed_samples_per_s": probed,
                "ratio_per_round": [round(x, 4) for x in ratios],
                "ratio_median": round(statistics.median(ratios), 4),
                "ratio_of_medians": round(statistics.median(probed) / statistics.median(plain), 4),
                "probe_over_trainer_median": round(statistics.median(own), 4),
            }
            print(f"{workload}: probed/plain median {results[workload]['ratio_median']:.3f} "
                  f"(rounds {min(ratios):.3f}..{max(ratios):.3f}); plain "
                  f"{statistics.median(plain):.1f} samples/s; the probe's own figure "
                  f"{results[workload]['probe_over_trainer_median']:.3f} of the trainer's; "
                  f"the hooks are {hook_us / step_us:.4%} of its step", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "cpus": os.cpu_count(), "rounds": args.rounds,
        "iterations": args.iterations,
        "per_batch_us": per_step["per_batch"], "per_backward_us": per_step["per_backward"],
        "workloads": results}, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
