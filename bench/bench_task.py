"""What the probe costs a plain batch script's job (task mode: the TaskProlog puts it on
every task's path), side by side in one run, alternating so drift hits both alike.

- The TaskProlog's own time per task, in ms (fork and exec included, as slurmstepd pays
  it): for a job the plugin did not key and that has no decision (it prints only the
  unset of SYNERGY_WORKERS), for one whose prolog left it a decision's workers, and for
  a keyed one.
- A Python process's start-up, in ms, plain and with the probe on its path (every Python
  process of a keyed job pays this, whether it trains or not).
- Per batch, in us: what the hooks add to one batch of a loader that costs next to
  nothing, plain and in task mode (its processes look for the supervisor's orders).
- End to end: the built-in trainer's own samples/s (its summary.json), plain and in task
  mode with its supervisor beside it (watching, its memory followed), the ratio per round.

Figures go to bench/results/task.json.

    make bench              # or: .venv/bin/python bench/bench_task.py --rounds 5
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
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from bench_probe import PER_BATCH, WORKLOADS  # noqa: E402
from slurm_synergy.hooks import taskenv  # noqa: E402
from slurm_synergy.hooks.install import task_prolog_text  # noqa: E402
from slurm_synergy.probe.records import BOOT  # noqa: E402

FP = "00000000000be7c1"


def task_env(home: Path) -> dict[str, str]:
    """A keyed job's task once the TaskProlog ran (a store of its own: watched only)."""
    return dict(os.environ, PYTHONPATH=str(BOOT), SYNERGY_TASK_PYTHON=sys.executable,
                SYNERGY_FINGERPRINT=FP, SYNERGY_PLAIN=FP, SYNERGY_HOME=str(home))


def timed_ms(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return (time.perf_counter() - t0) * 1e3


def prolog_ms(folder: Path, runs: int) -> dict[str, list[float]]:
    script = folder / "task_prolog"
    script.write_text(task_prolog_text(folder / "run", Path(sys.executable)))
    script.chmod(0o755)
    decided = taskenv.path(folder / "run", "7")
    decided.parent.mkdir(parents=True)
    decided.write_text(taskenv.lines("decision=c2,m768,g1,w3"))
    path = {"PATH": os.environ["PATH"]}
    out: dict[str, list[float]] = {"untouched": [], "decided": [], "keyed": []}
    for _ in range(runs):
        out["untouched"].append(timed_ms([str(script)], {**path, "SLURM_JOB_ID": "6"}))
        out["decided"].append(timed_ms([str(script)], {**path, "SLURM_JOB_ID": "7"}))
        out["keyed"].append(timed_ms([str(script)], {**path, "SLURM_JOB_ID": "6",
                                                      "SYNERGY_FINGERPRINT": FP,
                                                      "SYNERGY_PLAIN": FP}))
    return out


def startup_ms(folder: Path, runs: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"plain": [], "task": []}
    env = task_env(folder / "home")
    for r in range(runs):
        for mode in (("plain", "task") if r % 2 == 0 else ("task", "plain")):
            out[mode].append(timed_ms([sys.executable, "-c", "pass"],
                                      env if mode == "task" else dict(os.environ)))
    return out


def per_batch_us(folder: Path, batches: int, task: bool) -> float:
    script = folder / "per_batch.py"
    script.write_text(PER_BATCH)
    done = subprocess.run([sys.executable, str(script), str(batches)],
                          env=task_env(folder / "home") if task else dict(os.environ),
                          check=True, capture_output=True, text=True, cwd=ROOT)
    return float(done.stdout.split()[-1])


def trainer(workload: str, data: Path, out: Path, iterations: int, task: bool) -> float:
    out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "profiler.train", *WORKLOADS[workload], "--workers", "1",
            "--data", str(data / workload), "--generate-data", "--output", str(out),
            "--max-iterations", str(iterations), "--warmup", "3"]
    subprocess.run(argv, check=True, capture_output=True, cwd=ROOT,
                   env=task_env(out / "home") if task else dict(os.environ))
    return float(json.loads((out / "summary.json").read_text())["samples_per_s"])


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--iterations", type=int, default=60)
    p.add_argument("--batches", type=int, default=50000)
    p.add_argument("--prolog-runs", type=int, default=200)
    p.add_argument("--prolog-only", action="store_true",
                   help="time the TaskProlog alone (seconds, not the training rounds)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "task.json")
    args = p.parse_args()
    figures: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        prolog = prolog_ms(folder, args.prolog_runs)
        figures["task_prolog_ms"] = prolog
        print(f"TaskProlog per task: untouched {spread(prolog['untouched'])} ms, decided "
              f"{spread(prolog['decided'])} ms, keyed {spread(prolog['keyed'])} ms", flush=True)
        if args.prolog_only:
            figures["parts"] = "the TaskProlog alone"
        else:
            start = startup_ms(folder, args.prolog_runs // 4)
            figures["python_startup_ms"] = start
            print(f"python -c pass: plain {spread(start['plain'])} ms, with the probe "
                  f"{spread(start['task'])} ms", flush=True)
            plain_us: list[float] = []
            task_us: list[float] = []
            for r in range(args.rounds):
                for task in ((False, True) if r % 2 == 0 else (True, False)):
                    (task_us if task else plain_us).append(per_batch_us(folder, args.batches, task))
            hook_us = statistics.median(b - a for a, b in zip(plain_us, task_us))
            figures["per_batch_us"] = {"plain": plain_us, "task": task_us, "hooks_median": hook_us}
            print(f"per batch: {statistics.median(plain_us):.1f} us plain, "
                  f"{statistics.median(task_us):.1f} us in task mode: the hooks add "
                  f"{hook_us:.1f} us", flush=True)
            data = folder / "data"
            for workload in WORKLOADS:          # the data made (and the cache warm) first
                trainer(workload, data, folder / "warm", 5, task=False)
            figures["workloads"] = {}
            for workload in WORKLOADS:
                plain, task_mode = [], []
                for r in range(args.rounds):
                    for task in ((False, True) if r % 2 == 0 else (True, False)):
                        got = trainer(workload, data, folder / f"{workload}-{r}-{task}",
                                      args.iterations, task)
                        (task_mode if task else plain).append(got)
                ratios = [b / a for a, b in zip(plain, task_mode)]
                step_us = 32 / statistics.median(plain) * 1e6
                figures["workloads"][workload] = {
                    "plain_samples_per_s": plain, "task_samples_per_s": task_mode,
                    "ratio_per_round": [round(x, 4) for x in ratios],
                    "ratio_median": round(statistics.median(ratios), 4),
                    "hook_share_of_step": hook_us / step_us}
                print(f"{workload}: task/plain median {statistics.median(ratios):.3f} (rounds "
                      f"{min(ratios):.3f}..{max(ratios):.3f}); the hooks are "
                      f"{hook_us / step_us:.4%} of its step", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "cpus": os.cpu_count(), "rounds": args.rounds,
        "iterations": args.iterations, **figures}, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
