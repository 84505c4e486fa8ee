"""Benchmark the node's GPU sampler: how much it slows a training loop, and what one
sample costs, side by side in one run.

The sampler is started exactly as the node prolog starts it (a detached
`python -m slurm_synergy.hooks sample` process) at the site policy's period (1 s unless
--period). A matmul training loop runs for --seconds per round, rounds alternating
without and with the sampler, so drift on a shared machine hits both alike. On a GPU
node the loop runs on the GPU and the sampler reads it through NVML; without a GPU the
loop runs on every CPU core and the sampler reads a stand-in pynvml (tests/fakes/nvml),
so the figure is the sampler's own cost, not NVML's. Figures go to
bench/results/sampler.json.

    make bench              # or: .venv/bin/python bench/bench_sampler.py --rounds 3
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
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from slurm_synergy.gpu import open_backend  # noqa: E402
from slurm_synergy.hooks.sampling import read_totals  # noqa: E402

FAKE_NVML = ROOT / "tests" / "fakes" / "nvml"


def train(seconds: float, device: str) -> float:
    """Iterations per second of a matmul step with a backward pass."""
    torch.manual_seed(0)
    n = 4096 if device == "cuda" else 384
    w = torch.randn(n, n, device=device, requires_grad=True)
    x = torch.randn(n, n, device=device)
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        (x @ w).relu().sum().backward()
        w.grad = None
        steps += 1
        if device == "cuda" and steps % 20 == 0:
            torch.cuda.synchronize()
    if device == "cuda":
        torch.cuda.synchronize()
    return steps / (time.perf_counter() - t0)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class SamplerProcess:
    def __init__(self, env: dict[str, str], run_dir: Path, uuids: list[str]) -> None:
        self.env, self.run_dir, self.uuids = env, run_dir, uuids

    def __enter__(self) -> "SamplerProcess":
        """Started and past its first sample: Python's start-up (once per job) is left
        out, so the round sees the steady cost a long job pays."""
        totals = self.run_dir / "1.bench.samples.json"
        totals.unlink(missing_ok=True)
        (self.run_dir / "1.bench.prolog.json").write_text("{}")   # the sampler runs while it exists
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "slurm_synergy.hooks", "sample", "--job", "1",
             "--gpus", ",".join(self.uuids)], env=self.env, start_new_session=True)
        while not totals.exists():
            time.sleep(0.01)
        self.cpu0, self.samples0 = cpu_seconds(self.proc.pid), self._samples()
        return self

    def _samples(self) -> int:
        return sum(t.samples for t in read_totals(self.run_dir / "1.bench.samples.json").values())

    def __exit__(self, *exc: object) -> None:
        cpu = cpu_seconds(self.proc.pid) - self.cpu0
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.samples = self._samples() - self.samples0
        self.cpu_per_sample_s = cpu / max(self.samples, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="rounds per setting")
    parser.add_argument("--seconds", type=float, default=10.0, help="training per round")
    parser.add_argument("--period", type=float, default=1.0, help="sampling period, s")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "sampler.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-sampler-"))
    policy = work / "policy.toml"
    policy.write_text(f"gpu_sample_period_s = {args.period}\n")
    env = {**os.environ, "SLURMD_NODENAME": "bench", "SYNERGY_POLICY": str(policy),
           "SYNERGY_HOOK_RUN": str(work),
           "SYNERGY_HOOK_LOG": str(work / "hooks.log")}
    backend = open_backend()
    if backend.gpus and torch.cuda.is_available():
        device, what = "cuda", f"NVML, {backend.gpus[0].info.name}"
        uuids = [backend.gpus[0].info.uuid]
    else:
        device, what = "cpu", "stand-in pynvml (no GPU on this machine)"
        state = work / "nvml.json"
        state.write_text(json.dumps({"gpus": [{
            "uuid": "GPU-bench", "pci": "00000000:17:00.0", "name": "stand-in", "minor": 0,
            "limit_mw": 300000, "min_mw": 100000, "max_mw": 400000, "default_mw": 300000,
            "energy_mj": 0, "power_mw": 200000, "util": 90, "mem_used_mb": 1000}]}))
        env.update(PYTHONPATH=str(FAKE_NVML), FAKE_NVML_STATE=str(state))
        uuids = ["GPU-bench"]
        torch.set_num_threads(os.cpu_count() or 1)
    train(3.0, device)                                   # warm-up
    rates: dict[str, list[float]] = {"without": [], "with": []}
    for n in range(args.rounds):
        rates["without"].append(train(args.seconds, device))
        with SamplerProcess(env, work, uuids) as sampler:
            rates["with"].append(train(args.seconds, device))
        print(f"round {n + 1}: {rates['without'][-1]:.1f} it/s without, "
              f"{rates['with'][-1]:.1f} with the sampler ({sampler.samples} samples)",
              file=sys.stderr)
    # One sample's CPU cost, at a fast period so that the clock's 10 ms ticks resolve it.
    fast = work / "fast.toml"
    fast.write_text("gpu_sample_period_s = 0.05\n")
    with SamplerProcess({**env, "SYNERGY_POLICY": str(fast)}, work, uuids) as sampler:
        time.sleep(10)
    per_sample_s = sampler.cpu_per_sample_s
    plain, sampled = statistics.median(rates["without"]), statistics.median(rates["with"])
    result = {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "cpus": os.cpu_count(), "device": device, "readings": what,
        "period_s": args.period, "rounds": args.rounds, "seconds_per_round": args.seconds,
        "iterations_per_s": {k: [round(v, 2) for v in vs] for k, vs in rates.items()},
        "median_without": round(plain, 2), "median_with": round(sampled, 2),
        "slowdown_pct": round(100 * (1 - sampled / plain), 2), "goal_pct": 0.5,
        # How far rounds of one setting disagree: a slowdown smaller than this is noise.
        "spread_without_pct": round(100 * statistics.pstdev(rates["without"]) / plain, 1),
        "sampler_cpu_ms_per_sample": round(1000 * per_sample_s, 3),
        "sampler_cpu_share_of_one_core_pct": round(100 * per_sample_s / args.period, 3),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"sampler every {args.period:g} s ({what}): {result['slowdown_pct']}% slowdown "
          f"(goal <= 0.5%; rounds spread {result['spread_without_pct']}%), "
          f"{result['sampler_cpu_ms_per_sample']} ms CPU per sample = "
          f"{result['sampler_cpu_share_of_one_core_pct']}% of one core; {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
