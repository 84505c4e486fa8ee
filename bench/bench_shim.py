"""Benchmark the job_submit shim's cost: submissions per second through slurmctld with
the shim and without it, side by side in one run.

slurmctld is restarted between rounds with JobSubmitPlugins=lua on and off; rounds
alternate (off, on, off, on, ...) so that drift on a shared machine hits both alike.
Every job carries the fingerprint of a workload the table decides, so the shim does its
whole work (header read, lookup, rewrite, log) on each one; the table holds 1,000
decisions. Jobs are submitted held and cancelled, so nothing runs. Then, with the shim
on, the same jobs and plain ones meet hostile tables (a FIFO, a directory, noise, 17 MB,
a GPU type or partition this cluster lacks, 65,536-core nodes, a body changed under its
header): slurmctld's slowest submit RPC for each, against the 1 s the issue allows.
Figures go to bench/results/shim.json.

    make bench                     # or: .venv/bin/python bench/bench_shim.py --jobs 200
"""

from __future__ import annotations

import argparse
import json
import os
import re
import platform
import statistics
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_synergy.cluster.localbox import LocalCluster  # noqa: E402
from slurm_synergy.model.engine import Decision, NodeShape  # noqa: E402
from slurm_synergy.model.policy import Policy  # noqa: E402
from slurm_synergy.decisions.table import TABLE_NAME, render, sync, write  # noqa: E402

FP = "0123456789abcdef"
ME = os.geteuid()      # the bench submits as this user; the table sizes its jobs


def bench_table(path: Path, entries: int) -> None:
    ds = [Decision(fp, "bench", 1, 512, 1, "", 1, 0, 1.0, 1.0, 1, 2000, ())
          for fp in [FP] + [f"{i:016x}" for i in range(1, entries)]]
    write(path, render([(ME, d) for d in ds], Policy(), NodeShape(2, 8000, 4)))


def rpc_usec(box: LocalCluster, ids: list[str]) -> list[int]:
    """slurmctld's own time for each submission RPC, from its log (job_submit included)."""
    wanted = set(ids)
    text = (box.state / "log" / "slurmctld.log").read_text(errors="replace")
    return [int(m.group(2)) for m in re.finditer(
        r"_slurm_rpc_submit_batch_job: JobId=(\d+) .*?usec=(\d+)", text)
        if m.group(1) in wanted]


def round_rate(box: LocalCluster, jobs: int, out: Path) -> tuple[float, list[str]]:
    """Submissions per second for `jobs` sequential sbatch calls (held, then cancelled),
    and the job ids."""
    script = out / "noop.sh"
    script.write_text("#!/bin/sh\ntrue\n")
    ids = []
    t0 = time.perf_counter()
    for _ in range(jobs):
        ids.append(box.slurm.sbatch(script, [
            "--hold", "--cpus-per-task=2", "--mem=1000M", "--gres=gpu:1",
            f"--comment=synergy:fp={FP}", f"--output={out}/bench-%j.out"]))
    rate = jobs / (time.perf_counter() - t0)
    for start in range(0, len(ids), 200):
        box.slurm.cancel(ids[start:start + 200])
    return rate, ids


def hostile(path: Path, kind: str) -> None:
    """Put one kind of hostile table at the shim's path."""
    if path.is_dir():
        path.rmdir()
    elif path.exists() or path.is_symlink():
        path.unlink()
    ok = Decision(FP, "bench", 1, 512, 1, "", 1, 0, 1.0, 1.0, 1, 2000, ())
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "noise":
        path.write_bytes(os.urandom(1 << 20))
    elif kind == "17 MB":
        path.write_text(render([(ME, ok)], Policy(), NodeShape(2, 8000, 4)) + "#" * (17 << 20))
    elif kind == "missing GPU type":
        write(path, render([(ME, replace(ok, gpu_type="h100"))], Policy(),
                           NodeShape(2, 8000, 4, ("a100",))))
    elif kind == "other partition":
        write(path, render([(ME, ok)], Policy(), NodeShape(2, 8000, 4), partition="elsewhere"))
    elif kind == "65,536-core nodes":
        write(path, render([(ME, replace(ok, cpus=65536))], Policy(), NodeShape(65536, 8000, 4)))
    elif kind == "body changed under its header":
        text = render([(ME, ok)], Policy(), NodeShape(2, 8000, 4))
        path.write_text(text.replace(f"{FP} 1 512", f"{FP} 2 512"))


HOSTILE = ("fifo", "directory", "noise", "17 MB", "missing GPU type", "other partition",
           "65,536-core nodes", "body changed under its header")


def hostile_rpc_usec(box: LocalCluster, jobs: int, out: Path) -> dict[str, int]:
    """slurmctld's slowest submit RPC per hostile table, over our jobs and plain ones."""
    script = out / "noop.sh"
    slowest = {}
    for kind in HOSTILE:
        hostile(box.etc / TABLE_NAME, kind)
        ids = []
        for n in range(jobs):
            mark = [f"--comment=synergy:fp={FP}"] if n % 2 == 0 else []
            ids.append(box.slurm.sbatch(script, ["--hold", "--cpus-per-task=2",
                                                 f"--output={out}/bench-%j.out", *mark]))
        box.slurm.cancel(ids)
        slowest[kind] = max(rpc_usec(box, ids))
        print(f"{kind}: slowest submit RPC {slowest[kind]} us", file=sys.stderr)
    hostile(box.etc / TABLE_NAME, "directory")
    (box.etc / TABLE_NAME).rmdir()
    return slowest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=150, help="submissions per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per setting")
    parser.add_argument("--entries", type=int, default=1000, help="decisions in the table")
    parser.add_argument("--hostile-jobs", type=int, default=20,
                        help="submissions per hostile table (half ours, half plain)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "shim.json")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    logs = args.out.parent / "shim-jobs"
    logs.mkdir(exist_ok=True)
    rates: dict[str, list[float]] = {"without": [], "with": []}
    usec: dict[str, list[int]] = {"without": [], "with": []}
    quiet = lambda line: None  # noqa: E731
    try:
        for n in range(args.rounds):
            for setting in ("without", "with"):
                box = LocalCluster(job_submit=setting == "with")
                box.up(log=quiet)
                bench_table(box.etc / TABLE_NAME, args.entries)
                round_rate(box, 10, logs)           # warm up the restarted slurmctld
                rate, ids = round_rate(box, args.jobs, logs)
                rates[setting].append(rate)
                usec[setting] += rpc_usec(box, ids)
                print(f"round {n + 1} {setting:>7} shim: {rates[setting][-1]:.1f} "
                      "submissions/s", file=sys.stderr)
        slowest = hostile_rpc_usec(box, args.hostile_jobs, logs)
    finally:
        box = LocalCluster()
        box.up(log=quiet)
        print(sync(slurm=box.slurm, path=box.etc / TABLE_NAME), file=sys.stderr)
    plain, shim = statistics.median(rates["without"]), statistics.median(rates["with"])
    result = {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "cpus": os.cpu_count(),
        "jobs_per_round": args.jobs, "rounds": args.rounds, "table_entries": args.entries,
        "submissions_per_s": {k: [round(v, 1) for v in vs] for k, vs in rates.items()},
        "median_without": round(plain, 1), "median_with": round(shim, 1),
        "ratio_with_over_without": round(shim / plain, 3), "goal": 0.95,
        "slurmctld_rpc_usec_median": {k: statistics.median(v) for k, v in usec.items() if v},
        "slurmctld_rpc_usec_p90": {k: sorted(v)[int(0.9 * len(v))] for k, v in usec.items()
                                   if v},
        "hostile_tables_slowest_rpc_usec": slowest, "hostile_goal_usec": 1_000_000,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    rpc = result["slurmctld_rpc_usec_median"]
    print(f"shim: {shim:.1f} submissions/s, plain: {plain:.1f}; ratio {shim / plain:.3f} "
          f"(goal >= 0.95); slurmctld's submit RPC, median: {rpc.get('with')} us with the "
          f"shim, {rpc.get('without')} us without; slowest submit RPC on a hostile table "
          f"{max(slowest.values())} us (goal < 1 s); {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
