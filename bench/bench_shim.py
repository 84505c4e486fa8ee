"""Benchmark the job_submit shim's cost, side by side in one run: submissions per second
through slurmctld with the shim and without it; the slowest submission on a hostile
table; the shim's reload of a table at its cap; and a submission whose argv is hostile.

slurmctld is restarted between rounds with JobSubmitPlugins=lua on and off; rounds
alternate (off, on, off, on, ...) so that drift on a shared machine hits both alike.
Every job carries the fingerprint of a workload the table decides, so the shim does its
whole work (header read, lookup, rewrite, log) on each one; the table holds 1,000
decisions. Jobs are submitted held and cancelled, so nothing runs. Each submission is
timed by its client (sbatch, or tests/clients/submit_argv.c through libslurm): slurmctld
logs usec= for a submission, but its timer starts after job_submit has run (Slurm's
_slurm_rpc_submit_batch_job restarts it once it holds its locks), so that figure cannot
show the shim's cost and is kept only beside it. Then, with the shim on:
- hostile tables (a FIFO, a directory, noise, 17 MB, a GPU type or partition this cluster
  lacks, 65,536-core nodes, a body changed under its header): the slowest submission;
- the shim alone, under lua5.1 (the harness of its unit tests), on a table at its cap:
  the first job after the table changed (the reload) and the next ones (a lookup);
- hostile argv (960 KB through sbatch, 32 MiB through libslurm, as one argument and as
  256): the client's time, with this shim, without one and (--against) with another
  checkout's shim and table; and the shim alone under lua5.1.
Figures go to bench/results/shim.json.

    make bench     # or: .venv/bin/python bench/bench_shim.py [--against /older/checkout]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_synergy.cluster.localbox import LocalCluster  # noqa: E402
from slurm_synergy.decisions.sync import sync  # noqa: E402
from slurm_synergy.decisions.table import (MAX_ENTRIES, TABLE_NAME, Owned, render,  # noqa: E402
                                           write)
from slurm_synergy.model.engine import Decision, NodeShape  # noqa: E402
from slurm_synergy.model.policy import Policy  # noqa: E402

FP = "0123456789abcdef"
ME = os.geteuid()      # the bench submits as this user; the table sizes its jobs
HARNESS = ROOT / "tests" / "unit" / "lua" / "harness.lua"
CLIENT = ROOT / "tests" / "clients" / "submit_argv.c"
HARNESS_UID = 1000     # the harness submits every job as this uid
OK = Decision(FP, "bench", 1, 512, 1, "", 1, 0, 1.0, 1.0, 1, 2000, ())


def bench_table(path: Path, entries: int) -> None:
    ds = [replace(OK, fingerprint=fp) for fp in [FP] + [f"{i:016x}" for i in range(1, entries)]]
    write(path, render([Owned(ME, d) for d in ds], Policy(), NodeShape(2, 8000, 4)))


def rpc_usec(box: LocalCluster, ids: list[str]) -> list[int]:
    """slurmctld's usec= for each submission (its locked part: job_submit not counted)."""
    wanted = set(ids)
    text = (box.state / "log" / "slurmctld.log").read_text(errors="replace")
    return [int(m.group(2)) for m in re.finditer(
        r"_slurm_rpc_submit_batch_job: JobId=(\d+) .*?usec=(\d+)", text)
        if m.group(1) in wanted]


def timed_sbatch(box: LocalCluster, script: Path, options: list[str]) -> tuple[str, float]:
    """One held submission; its id and the client's seconds."""
    t0 = time.perf_counter()
    job = box.slurm.sbatch(script, ["--hold", *options])
    return job, time.perf_counter() - t0


def round_rate(box: LocalCluster, jobs: int, out: Path) -> tuple[float, list[str], list[float]]:
    """Submissions per second for `jobs` sequential sbatch calls (held, then cancelled),
    the job ids and each call's seconds."""
    script = out / "noop.sh"
    script.write_text("#!/bin/sh\ntrue\n")
    ids, each = [], []
    t0 = time.perf_counter()
    for _ in range(jobs):
        job, took = timed_sbatch(box, script, [
            "--cpus-per-task=2", "--mem=1000M", "--gres=gpu:1", f"--comment=synergy:fp={FP}",
            f"--output={out}/bench-%j.out"])
        ids.append(job)
        each.append(took)
    rate = jobs / (time.perf_counter() - t0)
    for start in range(0, len(ids), 200):
        box.slurm.cancel(ids[start:start + 200])
    return rate, ids, each


def hostile(path: Path, kind: str) -> None:
    """Put one kind of hostile table at the shim's path."""
    if path.is_dir():
        path.rmdir()
    elif path.exists() or path.is_symlink():
        path.unlink()
    one = [Owned(ME, OK)]
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "noise":
        path.write_bytes(os.urandom(1 << 20))
    elif kind == "17 MB":
        path.write_text(render(one, Policy(), NodeShape(2, 8000, 4)) + "#" * (17 << 20))
    elif kind == "missing GPU type":
        write(path, render([Owned(ME, replace(OK, gpu_type="h100"))], Policy(),
                           NodeShape(2, 8000, 4, ("a100",))))
    elif kind == "other partition":
        write(path, render(one, Policy(), NodeShape(2, 8000, 4), partition="elsewhere"))
    elif kind == "65,536-core nodes":
        write(path, render([Owned(ME, replace(OK, cpus=65536))], Policy(),
                           NodeShape(65536, 8000, 4)))
    elif kind == "body changed under its header":
        text = render(one, Policy(), NodeShape(2, 8000, 4))
        path.write_text(text.replace(f"{FP} 1 512", f"{FP} 2 512"))


PARTS = ("rate", "hostile", "cap", "argv")
HOSTILE = ("fifo", "directory", "noise", "17 MB", "missing GPU type", "other partition",
           "65,536-core nodes", "body changed under its header")


def hostile_tables(box: LocalCluster, jobs: int, out: Path) -> dict[str, dict[str, float]]:
    """The slowest submission per hostile table, over our jobs and plain ones: the
    client's seconds, and slurmctld's usec= beside them."""
    script = out / "noop.sh"
    slowest = {}
    for kind in HOSTILE:
        hostile(box.etc / TABLE_NAME, kind)
        ids, each = [], []
        for n in range(jobs):
            mark = [f"--comment=synergy:fp={FP}"] if n % 2 == 0 else []
            job, took = timed_sbatch(box, script, ["--cpus-per-task=2",
                                                   f"--output={out}/bench-%j.out", *mark])
            ids.append(job)
            each.append(took)
        box.slurm.cancel(ids)
        slowest[kind] = {"client_s": round(max(each), 4), "usec": max(rpc_usec(box, ids))}
        print(f"{kind}: slowest submission {slowest[kind]}", file=sys.stderr)
    hostile(box.etc / TABLE_NAME, "directory")
    (box.etc / TABLE_NAME).rmdir()
    return slowest


# --- the shim alone, under lua5.1 ------------------------------------------------------

def escaped(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def shim_seconds(shim: Path, table: str, jobs: list[dict[str, str]], work: Path) -> list[float]:
    """The CPU seconds `shim` takes on each of `jobs` (harness.lua, lua5.1), `table` at
    its path."""
    shutil.copy(shim, work / "job_submit.lua")
    path = work / TABLE_NAME
    if not path.exists() or path.read_text() != table:
        path.write_text(table)
        # A table written within the last second is read again at each job (a second
        # write in the same second would keep its times): let it settle, as a site's does.
        time.sleep(1.1)
    spec = work / "jobs.txt"
    spec.write_text("\n\n".join("\n".join(f"{k}={escaped(v)}" for k, v in job.items())
                                for job in jobs))
    ran = subprocess.run(["lua5.1", str(HARNESS), str(work / "job_submit.lua"), str(spec)],
                         capture_output=True, text=True, env={**os.environ, "HARNESS_TIMES": "1"},
                         timeout=600)
    if ran.returncode:
        raise SystemExit(f"harness failed: {ran.stderr[-2000:]}")
    return [float(line.split()[2]) for line in ran.stdout.splitlines() if line.startswith("TIME ")]


def table_at_cap(tree: Path, entries: int) -> str:
    """A table of `entries` lines (the harness's uid among them) rendered by `tree`'s own
    code: this checkout's format 4, or an older one's."""
    code = (
        "import sys\n"
        "from slurm_synergy.model.engine import Decision, NodeShape\n"
        "from slurm_synergy.model.policy import Policy\n"
        "import slurm_synergy.decisions.table as t\n"
        "n = int(sys.argv[1])\n"
        "d = [Decision(f'{i:016x}', 'bench', 2, 1024, 1, '', 1, 0, 1.0, 1.0, 1, 2000, ())\n"
        "     for i in range(100)]\n"
        "uids = [1000 + u for u in range(n // 100)]\n"
        "pairs = [(u, x) for u in uids for x in d]\n"
        "owned = [t.Owned(u, x) for u, x in pairs] if t.FORMAT >= 4 else pairs\n"
        "sys.stdout.write(t.render(owned, Policy(), NodeShape(16, 64000, 4)))\n")
    # Run from / : a Python started in a checkout imports that checkout's package first.
    ran = subprocess.run([sys.executable, "-c", code, str(entries)], capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(tree)}, timeout=600,
                         cwd="/")
    if ran.returncode:
        raise SystemExit(f"rendering a table with {tree} failed: {ran.stderr[-2000:]}")
    return ran.stdout


def reload_at_cap(trees: dict[str, Path], work: Path, rounds: int) -> dict:
    """The first job after the table changed (the reload and a lookup), and the next
    ones, on a table at this checkout's cap, under each tree's shim."""
    job = {"name": "j", "comment": f"synergy:fp={f'{42:016x}'}", "cpus_per_task": "2",
           "min_cpus": "2", "pn_min_cpus": "2", "pn_min_memory": "3072"}
    entries = MAX_ENTRIES          # of lines of this size, well within MAX_BYTES
    out: dict = {"entries": entries}
    for label, tree in trees.items():
        text = table_at_cap(tree, entries)
        firsts, nexts = [], []
        for _ in range(rounds):
            secs = shim_seconds(tree / "etc" / "job_submit.lua", text, [job] * 4, work)
            firsts.append(secs[0])
            nexts += secs[1:]
        out[label] = {"table_bytes": len(text), "reload_s": _spread(firsts),
                      "lookup_s": _spread(nexts)}
        print(f"reload at the cap, {label}: {out[label]}", file=sys.stderr)
    return out


# Each argv: its bytes in all, in how many arguments, and through which client (sbatch
# caps its own command line at 1 MiB; libslurm's caller sends what it likes).
ARGV = {"plain, sbatch": (0, 0, "sbatch"), "960 KB in 8 arguments, sbatch": (960 << 10, 8, "sbatch"),
        "plain, libslurm": (0, 0, "libslurm"),
        "32 MiB in 1 argument, libslurm": (32 << 20, 1, "libslurm"),
        "32 MiB in 256 arguments, libslurm": (32 << 20, 256, "libslurm")}
SCRIPT = "#!/bin/bash\npython3 train.py\n"


def argv_shim_seconds(trees: dict[str, Path], work: Path, rounds: int) -> dict:
    """The shim alone on a plain batch job of each argv, after a first job has loaded
    the table."""
    script = work / "argv.sh"
    script.write_text(SCRIPT)
    base = {"name": "argv", "script_from": str(script), "work_dir": "/home/u",
            "env.PATH": "/usr/bin", "num_tasks": "4294967294"}
    out: dict = {}
    for label, tree in trees.items():
        table = table_at_cap(tree, 1000)
        out[label] = {}
        for kind, (size, parts, _) in ARGV.items():
            argv = {"argv.0": str(script)}
            for i in range(parts):
                argv[f"argv.{i + 1}"] = "a" * (size // parts + (i < size % parts))
            times = [shim_seconds(tree / "etc" / "job_submit.lua", table,
                                  [base, dict(base, **argv)], work)[1] for _ in range(rounds)]
            out[label][kind] = _spread(times)
            print(f"argv {kind}, {label} shim alone: {out[label][kind]}", file=sys.stderr)
    return out


# --- hostile argv through slurmctld --------------------------------------------------

def client(work: Path) -> Path:
    exe = work / "submit_argv"
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(CLIENT), "-lslurm"], check=True)
    return exe


def argv_submit(box: LocalCluster, exe: Path, work: Path, kind: str) -> tuple[str, float]:
    """One held submission of a plain batch job with this argv; its id and seconds."""
    script = work / "argv.sh"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    size, parts, how = ARGV[kind]
    if how == "sbatch":
        args = ["a" * (size // parts)] * parts if parts else []
        t0 = time.perf_counter()
        job = subprocess.run(["sbatch", "--parsable", "--hold", "--time=1",
                              "--output=/dev/null", str(script), *args], capture_output=True,
                             text=True, env=box.slurm.env(), check=True).stdout.strip()
        return job, time.perf_counter() - t0
    ran = subprocess.run([str(exe), str(script), str(work), "gpu", str(size), str(parts), "1"],
                         capture_output=True, text=True, env=box.slurm.env(), check=True)
    job, seconds = ran.stdout.split()
    return job, float(seconds)


def argv_through_slurmctld(box: LocalCluster, trees: dict[str, Path], work: Path,
                           into: dict[str, dict[str, list[float]]]) -> None:
    """Each argv's submission (seconds, added to `into`) with each tree's shim and table
    in place, one after the other; this checkout's put back."""
    exe = client(work)
    for label, tree in trees.items():
        install_shim(box, tree)
        # slurmctld loads a changed script, and the shim a table written in the last
        # second, at the next submission: that one is not timed.
        time.sleep(1.1)
        box.slurm.cancel([argv_submit(box, exe, work, "plain, sbatch")[0]])
        for kind in ARGV:
            job, seconds = argv_submit(box, exe, work, kind)
            box.slurm.cancel([job])
            into.setdefault(f"{label} shim", {}).setdefault(kind, []).append(seconds)
    install_shim(box, ROOT)


def argv_without_shim(box: LocalCluster, work: Path,
                      into: dict[str, dict[str, list[float]]]) -> None:
    exe = client(work)
    box.slurm.cancel([argv_submit(box, exe, work, "plain, sbatch")[0]])     # warm up
    for kind in ARGV:
        job, seconds = argv_submit(box, exe, work, kind)
        box.slurm.cancel([job])
        into.setdefault("no shim", {}).setdefault(kind, []).append(seconds)


def install_shim(box: LocalCluster, tree: Path) -> None:
    """`tree`'s shim beside slurm.conf and a table its own sync compiled (empty store)."""
    shutil.copy(tree / "etc" / "job_submit.lua", box.etc / "job_submit.lua")
    env = {**box.slurm.env(), "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, "-m", "slurm_synergy.cli", "plugin", "sync", "--table",
                    str(box.etc / TABLE_NAME)], env=env, check=True, capture_output=True,
                   cwd="/")


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 5), "min": round(min(values), 5),
            "max": round(max(values), 5), "n": len(values)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=150, help="submissions per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per setting")
    parser.add_argument("--entries", type=int, default=1000, help="decisions in the table")
    parser.add_argument("--hostile-jobs", type=int, default=20,
                        help="submissions per hostile table (half ours, half plain)")
    parser.add_argument("--against", type=Path, help="another checkout: its shim beside this")
    parser.add_argument("--parts", nargs="*", default=list(PARTS), choices=PARTS,
                        help="what to measure (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "shim.json")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    logs = args.out.parent / "shim-jobs"
    logs.mkdir(exist_ok=True)
    trees = {"this": ROOT}
    if args.against:
        trees["against"] = args.against.resolve()
    work = Path(tempfile.mkdtemp(prefix="synergy-bench-shim-", dir="/var/tmp"))
    rates: dict[str, list[float]] = {"without": [], "with": []}
    client_s: dict[str, list[float]] = {"without": [], "with": []}
    usec: dict[str, list[int]] = {"without": [], "with": []}
    argv: dict[str, dict[str, list[float]]] = {}
    result: dict = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "host": platform.node(), "cpus": os.cpu_count(),
                    "trees": {k: str(v) for k, v in trees.items()}, "rounds": args.rounds}
    quiet = lambda line: None  # noqa: E731
    try:
        if "cap" in args.parts:
            result.update(reload_at_cap=reload_at_cap(trees, work, args.rounds),
                          reload_goal_s=0.1)
        if "argv" in args.parts:
            result["argv_shim_alone_s"] = argv_shim_seconds(trees, work, args.rounds)
        for n in range(args.rounds if {"rate", "argv"} & set(args.parts) else 0):
            for setting in ("without", "with"):
                box = LocalCluster(job_submit=setting == "with", sync_every_s=0)
                box.up(log=quiet)
                if "rate" in args.parts:
                    bench_table(box.etc / TABLE_NAME, args.entries)
                    round_rate(box, 10, logs)           # warm up the restarted slurmctld
                    rate, ids, each = round_rate(box, args.jobs, logs)
                    rates[setting].append(rate)
                    client_s[setting] += each
                    usec[setting] += rpc_usec(box, ids)
                    print(f"round {n + 1} {setting:>7} shim: {rates[setting][-1]:.1f} "
                          "submissions/s", file=sys.stderr)
                if "argv" in args.parts:
                    if setting == "without":
                        argv_without_shim(box, work, argv)
                    else:
                        argv_through_slurmctld(box, trees, work, argv)
        if "hostile" in args.parts:
            box = LocalCluster(sync_every_s=0)
            box.up(log=quiet)
            result.update(hostile_tables_slowest=hostile_tables(box, args.hostile_jobs, logs),
                          hostile_goal_s=1.0)
    finally:
        box = LocalCluster(sync_every_s=0)
        box.up(log=quiet)
        install_shim(box, ROOT)
        print(sync(slurm=box.slurm, path=box.etc / TABLE_NAME), file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
    if "rate" in args.parts:
        plain, shim = statistics.median(rates["without"]), statistics.median(rates["with"])
        result.update(
            jobs_per_round=args.jobs, table_entries=args.entries,
            submissions_per_s={k: [round(v, 1) for v in vs] for k, vs in rates.items()},
            median_without=round(plain, 1), median_with=round(shim, 1),
            ratio_with_over_without=round(shim / plain, 3), goal=0.95,
            client_submit_s={k: _spread(v) for k, v in client_s.items()},
            slurmctld_usec_not_counting_job_submit={k: statistics.median(v)
                                                    for k, v in usec.items() if v})
    if argv:
        result.update(argv_client_s={how: {k: _spread(v) for k, v in by.items()}
                                     for how, by in argv.items()},
                      argv_goal_s_over_plain=0.010)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k in (
        "median_without", "median_with", "ratio_with_over_without", "reload_at_cap",
        "argv_client_s")}, indent=1))
    print(f"figures in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
