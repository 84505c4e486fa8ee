"""How a built-in workload's memory moves over a whole run, against its first seconds.

Runs each workload of jobs_csv/profile_suite.csv as the in-run bench's jobs do (same
iterations, about 90 s at 2 cores), alone, with no probe and no Slurm, and reads its
process tree's own memory (the footprint the profiles use, probe/supervise.py) ten times
a second to its end. Per run: the peak in the first FIRST_S seconds after its first
batch (about what an offline profile sees), the peak over the whole run but its last
ENDING_S (when its processes are torn down, which can read far more than they hold),
when it came, the peak of that last second apart, and the memory the first and the
whole would decide (the engine's noise allowance and headroom, rounded up as --mem is).
Rounds interleave the workloads. Writes bench/results/peaks.{md,json}.

    .venv/bin/python bench/bench_peaks.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from bench_inrun import ITERATIONS, SUITE  # noqa: E402
from slurm_synergy.model.engine import MEM_STEP_MB  # noqa: E402
from slurm_synergy.model.policy import Policy  # noqa: E402
from slurm_synergy.probe.tree import ProcessTree  # noqa: E402

LOOK_S = 0.1
FIRST_S = 10.0      # an offline profile's first run: its warm-up, measured steps, 3 s more
ENDING_S = 1.0      # the run's last second: its processes end
CGROUP_V1 = Path("/sys/fs/cgroup/memory")


def command(row: dict[str, str], data: Path, out: Path, iterations: int) -> list[str]:
    """The row's training command, as the generated job script runs it."""
    argv = [sys.executable, "-m", "profiler.train", "--arch", row["arch"],
            "-b", row["batch"], "-j", row["workers"], "--max-iterations", str(iterations),
            "--data", str(data / row["name"]), "--generate-data", "--output", str(out)]
    if row["depth"]:
        argv += ["--depth", row["depth"]]
    return argv + shlex.split(row["args"])


def first_batch_s(out: Path, seconds: float) -> float:
    """About when the run took its first batch: its length less its iterations' (from
    its iterations.csv; the trainer writes no clock time)."""
    with (out / "iterations.csv").open() as f:
        trained = sum(float(r["total_s"]) for r in csv.DictReader(f))
    return max(0.0, seconds - trained)


def timeline(argv: list[str]) -> list[tuple[float, float, float | None]]:
    """(seconds since start, the tree's own memory, the anonymous memory its memory
    cgroup is charged), MB, every LOOK_S to its end. The charge is the kernel's own count,
    beside which the reads of the processes can be checked; None without cgroup v1's
    memory controller to give the run a group of its own."""
    group = new_group()

    def enter() -> None:
        if group is not None:
            (group / "cgroup.procs").write_text(str(os.getpid()))
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, preexec_fn=enter)
    t0 = time.monotonic()
    reads: list[tuple[float, float, float | None]] = []
    while proc.poll() is None:
        look = ProcessTree(proc.pid)        # a tree of its own: this look's, not the peak
        look.look(proportional=True)
        reads.append((time.monotonic() - t0, look.memory().footprint_mb,
                      charged_mb(group) if group else None))
        time.sleep(LOOK_S)
    rc = proc.wait()
    if group is not None:
        group.rmdir()
    if rc != 0:
        raise SystemExit(f"{shlex.join(argv)} failed with status {rc}")
    return reads


def new_group() -> Path | None:
    """A cgroup v1 memory group of the bench's own; None where it cannot make one."""
    group = CGROUP_V1 / f"synergy-bench-peaks-{os.getpid()}"
    try:
        group.mkdir()
    except OSError:
        return None
    return group


def charged_mb(group: Path) -> float:
    """The anonymous memory a cgroup v1 memory group is charged, MB."""
    for line in (group / "memory.stat").read_text().splitlines():
        name, _, value = line.partition(" ")
        if name == "total_rss":
            return int(value) / 2**20
    raise SystemExit(f"{group}/memory.stat has no total_rss")


def decided_mb(peak_mb: float, policy: Policy) -> int:
    """The --mem the engine would set for this peak alone (engine.decide's floor)."""
    need = peak_mb * (1 + policy.min_mem_spread) * (1 + policy.mem_headroom)
    return max(policy.min_mem_mb, -(-int(need) // MEM_STEP_MB) * MEM_STEP_MB)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = p.parse_args()
    rows = list(csv.DictReader(SUITE.open()))
    work = args.out / "peaks-run"
    policy = Policy()
    for row in rows:        # the datasets first, outside the timelines
        subprocess.run(command(row, work / "data", work / "gen", 1), cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)
    runs: dict[str, list[dict[str, float]]] = {r["name"]: [] for r in rows}
    for rnd in range(args.rounds):
        for row in rows:
            out = work / "out" / row["name"]
            reads = timeline(command(row, work / "data", out, ITERATIONS[row["name"]]))
            start = first_batch_s(out, reads[-1][0])
            first = max(mb for t, mb, _ in reads if t <= start + FIRST_S)
            end = reads[-1][0] - ENDING_S
            whole, at = max((mb, t) for t, mb, _ in reads if t <= end)
            steady = [mb for t, mb, _ in reads if start < t <= end]
            _, ending_mb, charged = max((r for r in reads if r[0] > end), key=lambda r: r[1])
            run = {"first_mb": first, "whole_mb": whole, "peak_at_s": at - start,
                   "ending_mb": ending_mb,
                   "charged_max_mb": max((c for _, _, c in reads if c is not None), default=-1),
                   "charged_at_ending_peak_mb": -1 if charged is None else charged,
                   "median_mb": statistics.median(steady), "seconds": reads[-1][0],
                   "first_mem": decided_mb(first, policy), "whole_mem": decided_mb(whole, policy)}
            runs[row["name"]].append(run)
            print(f"round {rnd + 1} {row['name']}: first {first:.0f} MB, whole {whole:.0f} MB "
                  f"at {at - start:.0f}s, last second {run['ending_mb']:.0f} (charged then "
                  f"{run['charged_at_ending_peak_mb']:.0f}), median {run['median_mb']:.0f}, "
                  f"cgroup's anonymous at most {run['charged_max_mb']:.0f}", flush=True)
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    (args.out / "peaks.json").write_text(json.dumps({"when": when, "runs": runs}, indent=1))

    def each(name: str, key: str, fmt: str = "{:.0f}") -> str:
        return " / ".join(fmt.format(r[key]) for r in runs[name])
    lines = [f"Memory over whole runs, {args.rounds} rounds ({when}; `bench/bench_peaks.py`), "
             f"the tree's own memory read every {LOOK_S:g} s; first = the first "
             f"{FIRST_S:g} s after the first batch; whole = all but the last "
             f"{ENDING_S:g} s, as the run ends:", "",
             "| workload | first, MB | whole run, MB | peak at, s | median, MB "
             "| last second, MB | cgroup charged then, MB | cgroup's anonymous peak, MB "
             "| --mem from first | --mem from whole |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        n = row["name"]
        lines.append(f"| {n} | {each(n, 'first_mb')} | {each(n, 'whole_mb')} | "
                     f"{each(n, 'peak_at_s')} | {each(n, 'median_mb')} | "
                     f"{each(n, 'ending_mb')} | {each(n, 'charged_at_ending_peak_mb')} | "
                     f"{each(n, 'charged_max_mb')} | "
                     f"{each(n, 'first_mem', '{}M')} | {each(n, 'whole_mem', '{}M')} |")
    (args.out / "peaks.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
