"""What right-sizing does to a queue on real Slurm: the local cluster, two ordinary users.

A lab's queue as two users submit it: --jobs jobs (16) of two workloads each user wrote
as a plain sbatch script, a CPU-hungry image model (ResNet on 512 px JPEGs) and a
CPU-light language model (a Transformer), in the order --order gives them (alternating,
as a queue run by hand on 2026-11-29; or sweeps, each user's jobs of one workload
together), each asking what users ask (2 cores, 3G, a GPU, 20 minutes), all at once (or
--interval seconds apart), to the gpu partition: node1 alone, its 2 real cores (the
other nodes idle, so the figures are this machine's). Three flows, interleaved over
--rounds (each round in another order), each from an empty profile store; with
--history kept (the default) every flow runs the same scripts from the same folders, so
sacct's record of earlier flows' runs is the timemin flow's history from its first job
(a lab's queue that ran before), with --history fresh each flow has folders of its own
and its workloads start with no history:

  asked    the plugin off: every job opted out (--comment=synergy:off), as asked
  synergy  the plugin on from the first job, time limits off (policy time_min = false):
           each user's first job of a workload is measured while it trains, its decision
           right-sizes that user's jobs of the workload still queued (in place) and every
           later one (the shim, from the table the cluster's sync timer compiles);
           nothing known in advance
  timemin  as synergy, with time limits on (the shipped policy): once a user's job of a
           workload has completed, the timer sets --time-min on that user's pending jobs
           of it, and puts a lowered limit back to --time before it would end a job

Per flow and round, from sacct: makespan, mean and median JCT, mean wait, core-seconds
and MB-seconds allocated against used (TotalCPU and MaxRSS, from the jobs' cgroups),
the most jobs that ran at once, failures (none allowed: a TIMEOUT is one), the
core-seconds right-sizing freed and how many of them another job used, the jobs given a
time_min and those that ran past it; and beside them the Slurm queue model's
prediction (slurm_synergy/simulate/slurmqueue.py: priority order, the main scheduler and
backfill as slurm.conf sets them), handed the queue as submitted, each workload's
measured run times and the decisions. The in-run sweep's windows are 2 s (the policy's
sweep_window_s; 5 s by default), as a site sets them for jobs this short. Needs root
and the local cluster (make cluster); run it from a clone of its own with nothing else
running. Writes DIR/cluster.json and DIR/cluster.md.

    .venv/bin/python bench/bench_cluster.py [--rounds 3] [--jobs 16] [--order sweeps]
                                            [--history fresh] [--interval S] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from slurm_synergy import paths  # noqa: E402
from slurm_synergy.cluster.localbox import PARTITION, LocalCluster  # noqa: E402
from slurm_synergy.cluster.users import ensure_user, reachable  # noqa: E402
from slurm_synergy.jobs import wait  # noqa: E402
from slurm_synergy.model.comment import OPT_OUT, decision, marks, time_min  # noqa: E402
from slurm_synergy.model.units import duration_s, gpu_count, mem_mb  # noqa: E402
from slurm_synergy.simulate.slurmqueue import (Node, QueueJob, Size, figures,  # noqa: E402
                                               run_queue)
from slurm_synergy.slurm import Slurm  # noqa: E402
from tenant import cluster_as_found  # noqa: E402

USERS = ("synergy-bench-a", "synergy-bench-b")
ACCOUNT = "synergy-bench"
PYTHON = str(ROOT / ".venv" / "bin" / "python")
ASK = {"cpus": 2, "mem": "3G", "time_min": 20}
# Each workload's script body: the built-in trainer, called as any script is.
WORKLOADS = {
    "image": "--arch resnet --depth 8 --batch 32 --workers 1 --max-iterations 160 "
             "--image-size 512 --crop 32 --dataset-size 256 --data {data}/image",
    "text": "--arch transformer --batch 32 --workers 1 --max-iterations 60 "
            "--dataset-size 2048 --data {data}/text",
}
SCRIPT = """#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --cpus-per-task={cpus}
#SBATCH --mem={mem}
#SBATCH --gres=gpu:1
#SBATCH --time={time_min}
#SBATCH --partition={partition}
#SBATCH --output={folder}/%x-%j.out
{python} -m profiler.train {args}
"""
FIELDS = ("JobIDRaw", "User", "JobName", "State", "Submit", "Start", "End", "ElapsedRaw",
          "AllocCPUS", "ReqMem", "TotalCPU", "Timelimit", "Comment")
FLOWS = ("asked", "synergy", "timemin")


@dataclass(frozen=True)
class Job:
    """One job of a flow, read back from sacct."""

    job_id: int
    user: str
    workload: str
    state: str
    submit_s: float
    start_s: float
    end_s: float
    cpus: int
    mem_mb: float
    cpu_used_s: float
    rss_mb: float
    limit_s: float
    asked_cpus: int
    asked_mem_mb: float
    measured: bool
    decided: bool
    time_min_s: float = 0.0      # the --time-min the timer set (0: none)
    predicted_s: float = 0.0     # the run it was set from

    @property
    def elapsed_s(self) -> float:
        return self.end_s - self.start_s


def make_data(work: Path) -> Path:
    """The datasets, shared, made once by root, so that no job's time includes writing one."""
    data = work / "data"
    for args in WORKLOADS.values():
        subprocess.run([PYTHON, "-m", "profiler.train", *args.format(data=data).split(),
                        "--generate-data", "--max-iterations", "1", "--output",
                        str(work / "gen")], check=True, capture_output=True)
    for path in [data, *data.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return data


def user_folders(work: Path, data: Path, tag: str = "") -> dict[str, Path]:
    """The users' folders (theirs, 0700) with their two scripts. A script's folder is part
    of its workload key: folders of another tag are other workloads, with no history."""
    folders = {}
    for user in USERS:
        folder = work / f"{user}{tag}"
        folder.mkdir()
        for workload, args in WORKLOADS.items():
            (folder / f"{workload}.sh").write_text(SCRIPT.format(
                name=workload, folder=folder, python=PYTHON, partition=PARTITION,
                args=args.format(data=data), **ASK))
        give(user, folder)
        folders[user] = folder
    return folders


def give(user: str, folder: Path) -> None:
    """The folder and everything in it made the user's, the folder theirs alone (0700)."""
    account = pwd.getpwnam(user)
    for path in [folder, *folder.rglob("*")]:
        os.chown(path, account.pw_uid, account.pw_gid)
    folder.chmod(0o700)


def as_user(user: str, argv: list[str], folder: Path, store: Path,
            policy: Path) -> subprocess.CompletedProcess:
    """One command run as the user from their folder, with the bench's store and policy."""
    env = {"PATH": f"{Path(PYTHON).parent}:/usr/bin:/bin",
           "SLURM_CONF": str(paths.local_slurm_conf()), "HOME": str(folder),
           "SYNERGY_HOME": str(folder / ".slurm-synergy"),
           "SYNERGY_PROFILES": str(store), "SYNERGY_POLICY": str(policy)}
    return subprocess.run([shutil.which("runuser") or "/usr/sbin/runuser", "-u", user, "--",
                           *argv], capture_output=True, text=True, env=env, cwd=folder)


def bench_policy(work: Path, flow: str) -> Path:
    """The site's policy with 2 s sweep windows; time limits only in the timemin flow."""
    text = (paths.ETC / "policy.toml").read_text()
    for knob, value in (("sweep_window_s", "2.0"),
                        ("time_min", "true" if flow == "timemin" else "false")):
        text, n = re.subn(rf"(?m)^{knob} = .*$", f"{knob} = {value}", text)
        assert n == 1, f"etc/policy.toml has no {knob} line"
    policy = work / f"policy-{flow}.toml"
    policy.write_text(text)
    policy.chmod(0o644)
    return policy


def fresh_cluster(store: Path, policy: Path) -> None:
    """The cluster's timers restarted on an empty store (and the table compiled from it)."""
    os.environ["SYNERGY_PROFILES"] = str(store)
    os.environ["SYNERGY_POLICY"] = str(policy)
    LocalCluster(sync_every_s=0).up(log=lambda line: None)
    LocalCluster().up(log=lambda line: None)


def queue_order(order: str, n: int) -> list[tuple[str, str]]:
    """(user, workload) of each job in submission order. alternating: the workloads take
    turns, each user two jobs at a time (the issue's hand-run queue); sweeps: each user
    submits a sweep of one workload at a time, in four blocks (a's images, b's texts,
    a's texts, b's images)."""
    names = list(WORKLOADS)
    if order == "alternating":
        return [(USERS[(i // 2) % 2], names[i % 2]) for i in range(n)]
    blocks = [(USERS[0], names[0]), (USERS[1], names[1]), (USERS[0], names[1]),
              (USERS[1], names[0])]
    return [blocks[min(i * 4 // n, 3)] for i in range(n)]


def submit(flow: str, plan: list[tuple[str, str]], interval_s: float,
           folders: dict[str, Path], store: Path, policy: Path) -> dict[str, str]:
    """The plan's jobs, in its order, as their users; job id -> workload."""
    ids = {}
    for i, (user, workload) in enumerate(plan):
        folder = folders[user]
        extra = [f"--comment={OPT_OUT}"] if flow == "asked" else []
        done = as_user(user, ["sbatch", "--parsable", *extra, str(folder / f"{workload}.sh")],
                       folder, store, policy)
        done.check_returncode()
        ids[done.stdout.strip().split(";")[0]] = workload
        if interval_s and i < len(plan) - 1:
            time.sleep(interval_s)
    return ids


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def read_jobs(slurm: Slurm, ids: dict[str, str]) -> list[Job]:
    """Every job of a flow with its batch step's peak memory, from sacct."""
    rows = slurm.sacct(list(ids), FIELDS + ("MaxRSS",), allocations_only=False)
    rss: dict[str, float] = {}
    for row in rows:
        job_id = row["JobIDRaw"].split(".")[0]
        rss[job_id] = max(rss.get(job_id, 0.0), mem_mb(row["MaxRSS"]) or 0.0)
    jobs = []
    for row in rows:
        jid = row["JobIDRaw"]
        if jid not in ids:
            continue
        asked = marks(row["Comment"]).get("asked", "")
        got = re.match(r"c(\d+),m(\d+)", asked)
        mem = mem_mb(row["ReqMem"]) or 0.0
        jobs.append(Job(
            job_id=int(jid), user=row["User"], workload=ids[jid], state=row["State"],
            submit_s=_epoch(row["Submit"]), start_s=_epoch(row["Start"]),
            end_s=_epoch(row["End"]), cpus=int(row["AllocCPUS"]), mem_mb=mem,
            cpu_used_s=duration_s(row["TotalCPU"]) or 0.0, rss_mb=rss.get(jid, 0.0),
            limit_s=(duration_s(row["Timelimit"]) or 0.0),
            asked_cpus=int(got.group(1)) if got else int(row["AllocCPUS"]),
            asked_mem_mb=float(got.group(2)) if got else mem,
            measured=marks(row["Comment"]).get("measured") == "run",
            decided=decision(row["Comment"]) is not None,
            time_min_s=60.0 * (time_min(row["Comment"]) or (0, 0, 0))[0],
            predicted_s=float((time_min(row["Comment"]) or (0, 0, 0))[1])))
    return sorted(jobs, key=lambda j: j.job_id)


def freed(jobs: list[Job], cores: int) -> tuple[float, float]:
    """Core-seconds right-sizing freed (asked minus held, while a job ran) and how many of
    them another job used: at each moment, the cores held beyond what the node could
    have held had every running job held what it asked."""
    edges = sorted({t for j in jobs for t in (j.start_s, j.end_s)})
    total = used = 0.0
    for a, b in zip(edges, edges[1:]):
        on = [j for j in jobs if j.start_s <= a and j.end_s >= b]
        free_now = sum(j.asked_cpus - j.cpus for j in on)
        held = sum(j.cpus for j in on)
        total += free_now * (b - a)
        used += max(0, min(free_now, held + free_now - cores)) * (b - a)
    return total, used


def most_at_once(jobs: list[Job]) -> int:
    return max((sum(1 for k in jobs if k.start_s <= j.start_s < k.end_s) for j in jobs),
               default=0)


def measured_figures(jobs: list[Job], cores: int) -> dict:
    jct = [j.end_s - j.submit_s for j in jobs]
    free_s, free_used_s = freed(jobs, cores)
    return {
        "jobs": len(jobs),
        "failed": [f"{j.job_id} {j.state}" for j in jobs if j.state != "COMPLETED"],
        "makespan_s": max(j.end_s for j in jobs) - min(j.submit_s for j in jobs),
        "mean_jct_s": statistics.mean(jct), "median_jct_s": statistics.median(jct),
        "mean_wait_s": statistics.mean(j.start_s - j.submit_s for j in jobs),
        "core_s_allocated": sum(j.cpus * j.elapsed_s for j in jobs),
        "core_s_used": sum(j.cpu_used_s for j in jobs),
        "mb_s_allocated": sum(j.mem_mb * j.elapsed_s for j in jobs),
        "mb_s_used": sum(j.rss_mb * j.elapsed_s for j in jobs),
        "most_at_once": most_at_once(jobs),
        "freed_core_s": free_s, "freed_core_s_used": free_used_s,
        "measured": sum(j.measured for j in jobs), "right_sized": sum(j.decided for j in jobs),
        "time_min_set": sum(j.time_min_s > 0 for j in jobs),
        "ran_past_time_min": sum(0 < j.time_min_s < j.elapsed_s for j in jobs),
        # Predicted over actual run, for each job given a time_min.
        "predicted_over_actual": [round(j.predicted_s / j.elapsed_s, 3) for j in jobs
                                  if j.predicted_s and j.elapsed_s],
    }


def _median(values: list[float], fallback: float) -> float:
    return statistics.median(values) if values else fallback


def queue_of(jobs: list[Job], asked_run_s: dict[str, float]) -> list[QueueJob]:
    """These jobs as the queue model takes them: their submissions, limits and decisions
    (each user's own), and each workload's measured run times: measuring, as asked (this
    flow's, else the asked flow's) and at each decided size."""
    first = min(j.submit_s for j in jobs)
    queue = []
    for j in jobs:
        same = [k for k in jobs if k.workload == j.workload]
        ask = Size(j.asked_cpus, int(j.asked_mem_mb),
                   _median([k.elapsed_s for k in same if not k.measured and not k.decided],
                           asked_run_s[j.workload]))
        mine = [k for k in same if k.decided and k.user == j.user] or \
            [k for k in same if k.decided]
        decided = None
        if mine:
            cpus, mem = mine[0].cpus, int(mine[0].mem_mb)
            decided = Size(cpus, mem, _median(
                [k.elapsed_s for k in same if k.decided and k.cpus == cpus], 0.0))
        measuring = _median([k.elapsed_s for k in same if k.measured], ask.run_s)
        queue.append(QueueJob(j.job_id, f"{j.user}/{j.workload}", j.submit_s - first,
                              j.limit_s, ask, decided, measuring, j.user))
    return queue


def predicted(jobs: list[Job], node: Node, asked_run_s: dict[str, float]) -> dict:
    """The queue model's figures for the queue these jobs were (queue_of)."""
    f = figures(run_queue(queue_of(jobs, asked_run_s), node))
    return {"makespan_s": f.makespan_s, "mean_jct_s": f.mean_jct_s,
            "mean_wait_s": f.mean_wait_s}


def ratio_line(runs: list[dict], key: str, source: str = "",
               flow: str = "synergy") -> tuple[float, float, float]:
    """asked over `flow` per round: (median, min, max)."""
    ratios = []
    for r in runs:
        a, s = r["asked"], r[flow]
        if source:
            a, s = a[source], s[source]
        ratios.append(a[key] / s[key])
    return statistics.median(ratios), min(ratios), max(ratios)


@contextmanager
def bench_cluster(users: Sequence[str], name: str) -> Iterator[tuple[Slurm, Path]]:
    """The local cluster with its timer stopped (a bench restarts it per flow), these
    ordinary users (made where missing) and a work folder under /var/tmp, the checkout
    reachable by them; afterwards the cluster as it was found (down, or up with its timers
    on or off, which run with the environment as it was: `up` restarts a timer started
    with a bench's store and policy), the folder and the users made removed."""
    if os.geteuid() != 0:
        raise SystemExit(f"{name} makes users and submits as them: run it as root")
    with cluster_as_found():
        slurm = Slurm()
        made = [u for u in users if ensure_user(slurm, u, ACCOUNT)]
        work = Path(tempfile.mkdtemp(prefix=f"synergy-{name}-", dir="/var/tmp"))
        work.chmod(0o755)
        saved = {k: os.environ.get(k) for k in ("SYNERGY_PROFILES", "SYNERGY_POLICY")}
        try:
            with reachable(ROOT):
                yield slurm, work
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            shutil.rmtree(work, ignore_errors=True)
            for user in made:
                slurm.remove_user(user)
                subprocess.run(["userdel", user], check=False)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--jobs", type=int, default=16)
    p.add_argument("--order", choices=("alternating", "sweeps"), default="alternating",
                   help="the queue's shape (see queue_order)")
    p.add_argument("--history", choices=("kept", "fresh"), default="kept",
                   help="kept: every flow runs the same scripts from the same folders, so "
                   "sacct's history of earlier flows' runs predicts a flow's run times "
                   "(a lab's queue that ran before); fresh: each flow its own folders, "
                   "so its workloads start with no history")
    p.add_argument("--interval", type=float, default=0.0,
                   help="seconds between submissions (default: all at once)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = p.parse_args()
    runs: list[dict] = []
    with bench_cluster(USERS, "bench-cluster") as (slurm, work):
        (n1,) = slurm.nodes(PARTITION)
        node = Node(cpus=n1.cpus, mem_mb=n1.mem_mb, gpus=gpu_count(n1.gres))
        data = make_data(work)
        shared = user_folders(work, data)
        policies = {flow: bench_policy(work, flow) for flow in FLOWS}
        for r in range(args.rounds):
            order = FLOWS[r % 3:] + FLOWS[:r % 3]
            done: dict[str, list[Job]] = {}
            for flow in order:
                store = work / f"store-{r}-{flow}"
                store.mkdir()
                store.chmod(0o1777)
                fresh_cluster(store, policies[flow])
                folders = shared if args.history == "kept" else \
                    user_folders(work, data, f"-{r}-{flow}")
                ids = submit(flow, queue_order(args.order, args.jobs), args.interval,
                             folders, store, policies[flow])
                wait(slurm, list(ids), timeout_s=7200)
                done[flow] = read_jobs(slurm, ids)
                print(f"round {r + 1} {flow}: jobs {min(ids, key=int)}-{max(ids, key=int)}",
                      file=sys.stderr)
            asked_run_s = {w: _median([j.elapsed_s for j in done["asked"]
                                       if j.workload == w], 0.0) for w in WORKLOADS}
            one: dict = {"round": r + 1}
            for flow, jobs in done.items():
                # The queue model has no time_min: the timemin flow is measured alone.
                one[flow] = {**measured_figures(jobs, node.cpus),
                             "predicted": None if flow == "timemin"
                             else predicted(jobs, node, asked_run_s),
                             "per_job": [asdict(j) for j in jobs]}
            runs.append(one)
            print(json.dumps({f: {k: v for k, v in one[f].items() if k != "per_job"}
                              for f in FLOWS}), file=sys.stderr)
            write(args, runs)        # each round's figures kept as it ends
    write(args, runs)
    return 1 if any(run[f]["failed"] for run in runs for f in FLOWS) else 0


def write(args: argparse.Namespace, runs: list[dict]) -> None:
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {key: dict(zip(("median", "min", "max"), ratio_line(runs, key)))
               for key in ("mean_jct_s", "makespan_s", "mean_wait_s")}
    summary.update({f"predicted_{key}": dict(zip(("median", "min", "max"),
                                                 ratio_line(runs, key, "predicted")))
                    for key in ("mean_jct_s", "makespan_s")})
    with_time = {key: dict(zip(("median", "min", "max"),
                               ratio_line(runs, key, flow="timemin")))
                 for key in ("mean_jct_s", "makespan_s", "mean_wait_s")}
    (args.out / "cluster.json").write_text(json.dumps(
        {"at": when, "jobs": args.jobs, "order": args.order, "interval_s": args.interval,
         "history": args.history,
         "ask": ASK,
         "workloads": WORKLOADS, "rounds": runs, "asked_over_synergy": summary,
         "asked_over_timemin": with_time},
        indent=1) + "\n")
    cmd = f"bench/bench_cluster.py --rounds {args.rounds} --jobs {args.jobs} " \
        f"--order {args.order} --history {args.history}" \
        + (f" --interval {args.interval:g}" if args.interval else "")
    lines = [f"A queue of {args.jobs} jobs ({args.order}) on the local cluster's node1 "
             "(2 cores), two users, "
             f"{args.rounds} round(s), flows interleaved ({when}; `{cmd}`).", "",
             "| round | flow | makespan s | mean JCT s | median JCT s | mean wait s | "
             "core-s alloc/used | MB-s alloc/used | at once | freed core-s (used) | "
             "predicted makespan / mean JCT s | time_min set (ran past) | failed |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        for flow in FLOWS:
            f = run[flow]
            lines.append(
                f"| {run['round']} | {flow} | {f['makespan_s']:.0f} | {f['mean_jct_s']:.0f} | "
                f"{f['median_jct_s']:.0f} | {f['mean_wait_s']:.0f} | "
                f"{f['core_s_allocated']:.0f}/{f['core_s_used']:.0f} | "
                f"{f['mb_s_allocated'] / 1e3:.0f}k/{f['mb_s_used'] / 1e3:.0f}k | "
                f"{f['most_at_once']} | {f['freed_core_s']:.0f} ({f['freed_core_s_used']:.0f}) | "
                + (f"{f['predicted']['makespan_s']:.0f} / {f['predicted']['mean_jct_s']:.0f} | "
                   if f["predicted"] else "- | ")
                + f"{f['time_min_set']} ({f['ran_past_time_min']}) | {len(f['failed'])} |")
    lines += ["", "As asked over right-sized alone (synergy; median of rounds, min-max):", ""]
    for key, label in (("mean_jct_s", "mean JCT"), ("makespan_s", "makespan"),
                       ("mean_wait_s", "mean wait")):
        m = summary[key]
        lines.append(f"- {label}: {m['median']:.2f}x ({m['min']:.2f}-{m['max']:.2f})"
                     + (f"; predicted {summary['predicted_' + key]['median']:.2f}x "
                        f"({summary['predicted_' + key]['min']:.2f}-"
                        f"{summary['predicted_' + key]['max']:.2f})"
                        if "predicted_" + key in summary else ""))
    ratios = sorted(x for run in runs for x in run["timemin"]["predicted_over_actual"])
    if ratios:
        lines += ["", f"Predicted over actual run of the {len(ratios)} jobs given a "
                  f"time_min: median {statistics.median(ratios):.2f}, "
                  f"min {ratios[0]:.2f}, max {ratios[-1]:.2f}; under 1 (ran longer "
                  f"than predicted): {sum(x < 1 for x in ratios)}."]
    lines += ["", "As asked over right-sized with time_min (timemin):", ""]
    for key, label in (("mean_jct_s", "mean JCT"), ("makespan_s", "makespan"),
                       ("mean_wait_s", "mean wait")):
        m = with_time[key]
        lines.append(f"- {label}: {m['median']:.2f}x ({m['min']:.2f}-{m['max']:.2f})")
    (args.out / "cluster.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
