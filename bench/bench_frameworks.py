"""What the probe costs each framework's training loop (tests/corpus: Lightning,
accelerate, Hugging Face's Trainer, a hand-stepped LSTM), in task mode as a plain batch
script's job runs them: the probe on the path, its supervisor beside the run, watching.

Each script is timed at two step counts, plain and probed, alternating which goes first
each round so drift hits both alike; the time of one step is the slope between the two
counts, so the interpreter's start-up and the framework's set-up (which the probe's
start-up adds to: bench_task.py) cancel out. Figures, with each round's, go to
bench/results/frameworks.json.

    make bench              # or: .venv/bin/python bench/bench_frameworks.py --rounds 3
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

from bench_task import task_env  # noqa: E402

CORPUS = ROOT / "tests" / "corpus"
# Each script, its two step counts and the arguments after the count (one loader worker;
# a time cap far past any run here).
STYLES = {
    "lightning": ("lightning_style.py", (150, 450), ["1", "3600"]),
    "accelerate": ("accelerate_style.py", (300, 900), ["1", "3600"]),
    "hf_trainer": ("hf_trainer_style.py", (150, 450), ["1", "3600"]),
    "hand_updates": ("hand_updates.py", (1500, 4500), ["0"]),
}


def run_s(script: Path, steps: int, rest: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one run of `steps` steps."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, str(script), str(steps), *rest], env=env, check=True,
                   capture_output=True, cwd=script.parent, timeout=900)
    return time.perf_counter() - t0


def per_step_ms(script: Path, counts: tuple[int, int], rest: list[str],
                env: dict[str, str]) -> float:
    """One step's time, the slope between the two counts (ms)."""
    short, long = (run_s(script, n, rest, env) for n in counts)
    return (long - short) / (counts[1] - counts[0]) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "frameworks.json")
    args = ap.parse_args()
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-frameworks-") as tmp:
        plain = {k: v for k, v in os.environ.items()
                 if not k.startswith(("SLURM_", "SYNERGY_"))}
        probed = dict(task_env(Path(tmp) / "home"), SYNERGY_PROFILES="",
                      TMPDIR=tempfile.mkdtemp(prefix="s", dir="/tmp"))
        probed = {k: v for k, v in probed.items() if not k.startswith("SLURM_")}
        for name, (file, counts, rest) in STYLES.items():
            rounds = []
            for r in range(args.rounds):
                order = [("plain", plain), ("probed", probed)]
                if r % 2:
                    order.reverse()
                got = {label: per_step_ms(CORPUS / file, counts, rest, env)
                       for label, env in order}
                got["ratio"] = got["probed"] / got["plain"]
                rounds.append(got)
                print(f"{name} round {r + 1}: plain {got['plain']:.3f} ms/step, probed "
                      f"{got['probed']:.3f} ms/step ({got['ratio'] - 1:+.1%})", flush=True)
            ratios = [x["ratio"] for x in rounds]
            results[name] = {
                "script": f"tests/corpus/{file}", "steps": counts,
                "plain_ms_per_step": statistics.median(x["plain"] for x in rounds),
                "probed_ms_per_step": statistics.median(x["probed"] for x in rounds),
                "ratio_median": statistics.median(ratios),
                "ratio_range": [min(ratios), max(ratios)], "rounds": rounds}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.node()}: {os.cpu_count()} CPUs",
        "command": "bench/bench_frameworks.py --rounds " + str(args.rounds),
        "styles": results}, indent=1) + "\n")
    for name, r in results.items():
        print(f"{name}: probed/plain per step {r['ratio_median']:.3f} (rounds "
              f"{r['ratio_range'][0]:.3f}-{r['ratio_range'][1]:.3f}), plain "
              f"{r['plain_ms_per_step']:.3f} ms")
    print(f"figures: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
