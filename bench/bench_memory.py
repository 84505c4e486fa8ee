"""The memory half of the throughput model checked against real runs: an image workload
whose dataset the page cache cannot hold under the job's memory limit.

Profiles resnet8 on a JPEG dataset of --images images (512 px) with enough memory to
cache it, then trains the same workload as Slurm jobs of 2 cores with the profile's
memory and with less: the footprint plus a quarter of the dataset, and the memory the
page cache cannot take back plus half of it, where task/cgroup's limit takes the page
cache with it. The page cache is dropped before each
job; the first epoch is the warm-up, the later ones are measured (the cache then holds
what it can). Each job's samples/s is compared with the model's prediction for that
memory (slurm_synergy/model/throughput.py); figures to bench/results/memory.json.

A local disk reads faster than the pipeline eats, so no memory size would matter: with
--storage-mb-s (cgroup v1's blkio controller, reads of the dataset's disk throttled) every
job, the profiling one included, moves itself into a throttled blkio group first, and a
miss in the page cache costs what it would on slow shared storage. Jobs run as root on
the local cluster, which is what lets them move.

    .venv/bin/python bench/bench_memory.py [--images 1024] [--rounds 2] [--storage-mb-s 4]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from slurm_synergy.cluster.localbox import LocalCluster
from slurm_synergy.jobs import wait
from slurm_synergy.model.profile import FetchRates
from slurm_synergy.model.throughput import cached_fraction, predict
from slurm_synergy.profiles import ProfileStore, user_folder
from slurm_synergy.slurm import Slurm

ROOT = Path(__file__).resolve().parent.parent
BATCH = 32
TRAINER = ["--arch", "resnet", "--depth", "8", "--batch", str(BATCH), "--crop", "32"]


BLKIO = Path("/sys/fs/cgroup/blkio/synergy-bench-memory")


def throttle(data: Path, mb_s: float) -> str:
    """A blkio group reading the dataset's disk at `mb_s`; the line a job runs to join it."""
    dev = os.stat(data).st_dev
    BLKIO.mkdir(exist_ok=True)
    (BLKIO / "blkio.throttle.read_bps_device").write_text(
        f"{os.major(dev)}:{os.minor(dev)} {int(mb_s * 2**20)}\n")
    return f"echo $$ > {shlex.quote(str(BLKIO / 'cgroup.procs'))}\n"


def sbatch(slurm: Slurm, folder: Path, name: str, mem_mb: int, command: list[str],
           env: dict[str, str], join: str = "", minutes: int = 30) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / f"{name}.sh"
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    script.write_text("#!/bin/bash\nset -e\n" + join + exports
                      + " ".join(map(shlex.quote, command)) + "\n")
    return slurm.sbatch(script, [f"--job-name={name}", "--cpus-per-task=2", f"--mem={mem_mb}M",
                                 f"--time={minutes}", f"--output={folder}/{name}.log",
                                 f"--chdir={folder}"])


def drop_page_cache() -> None:
    # Root only: what makes the first epoch of every run read from storage alike.
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("1\n")


def implied_hit_rate(fetch: FetchRates, measured: float) -> float | None:
    """The page-cache hit rate x at which the model's F(x) equals a measured rate, where
    fetching binds (DS-Analyzer's F(x) solved for x); None where the rate is over F(1)."""
    cache, storage = (fetch.cache_mb_s / fetch.sample_mb, fetch.storage_mb_s / fetch.sample_mb)
    if measured >= cache or storage >= cache:
        return None
    x = (1 / measured - 1 / storage) / (1 / cache - 1 / storage)
    return round(min(1.0, max(0.0, x)), 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1024)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2, help="runs of each memory size")
    parser.add_argument("--job-minutes", type=int, default=3,
                        help="time limit of each training job: one that thrashes (its own "
                        "code paged out and read back) ends TIMEOUT and is recorded so")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--storage-mb-s", type=float, default=4.0,
                        help="throttle reads of the dataset's disk to this, in MB/s "
                        "(default %(default)s, a slow shared file system; 0: as it is)")
    args = parser.parse_args()
    cluster = LocalCluster(sync_every_s=0)
    cluster.up(log=lambda line: print(line, file=sys.stderr))
    if "not confined" in "\n".join(cluster.status()[1]):
        print("jobs are not confined by cgroups here: a memory limit would not take the "
              "page cache with it, so there is nothing to check", file=sys.stderr)
        return 1
    slurm = Slurm()
    work = args.results / "memory-run"
    data = work / f"data-{args.images}"     # a dataset per size: datagen refuses a mismatch
    py = sys.executable
    subprocess.run([py, "-m", "profiler.datagen", str(data), "--num-samples", str(args.images),
                    "--image-size", "512"], check=True)
    try:
        join = throttle(data, args.storage_mb_s) if args.storage_mb_s else ""
    except OSError as e:
        print(f"cannot throttle storage with cgroup v1's blkio controller ({BLKIO}: "
              f"{e.strerror}); run as root on a cgroup v1 host, or pass --storage-mb-s 0",
              file=sys.stderr)
        return 1
    (work / "store").mkdir(parents=True, exist_ok=True)
    store = ProfileStore(user_folder(work / "store"))
    env = {"SYNERGY_PROFILES": str(work / "store"), "SYNERGY_DECISIONS": str(work / "t.tbl")}
    fp = "00000000000be7c4"
    job = sbatch(slurm, work / "profile", "mem-profile", 3072,
                 [py, "-m", "profiler.offline_profiler", "--fingerprint", fp, "--force",
                  "--job-name", "resnet8-memory", "builtin:train", *TRAINER, "--data",
                  str(data)], env, join)
    rec, = wait(slurm, [job], timeout_s=1800)
    if rec.state != "COMPLETED" or not store.has(fp):
        print(f"profiling job {job} ended {rec.state}; log: {work / 'profile'}", file=sys.stderr)
        return 1
    profile = store.load(fp)
    model = profile.model
    if model.fetch is None:
        print(f"the profile has no memory model: {profile.notes}", file=sys.stderr)
        return 1
    footprint, resident, dataset = model.footprint_mb, model.resident_mb, model.fetch.dataset_mb
    # The whole footprint (process tree's RSS) plus a quarter of the dataset: where the
    # model's cache room, before it counted only what the cache cannot take back, said a
    # quarter would be cached. The unreclaimable memory plus half the dataset: where it
    # says so now (below the decisions' floor, which keeps the whole footprint).
    sizes = {"profile's memory": profile.allocation.mem_mb,
             "footprint + 1/4 dataset": int(footprint + dataset / 4),
             "unreclaimable + 1/2 dataset": int(resident + dataset / 2)}
    iters = args.images // BATCH
    runs = []
    for r in range(args.rounds):
        for label, mem in sizes.items():       # interleaved: each size once per round
            drop_page_cache()
            out = work / f"run{r + 1}-{mem}M"
            job = sbatch(slurm, out, f"mem-{mem}", mem,
                         [py, "-m", "profiler.train", *TRAINER, "--data", str(data),
                          "--workers", "1", "--epochs", str(args.epochs),
                          "--warmup", str(iters), "--output", str(out)], {}, join,
                         minutes=args.job_minutes)
            rec, = wait(slurm, [job], timeout_s=1800)
            summary = json.loads((out / "summary.json").read_text()) \
                if (out / "summary.json").exists() else None
            predicted = predict(model, 2, mem)
            if rec.state != "COMPLETED" or summary is None:
                print(f"job {job} ({label}) ended {rec.state}; log in {out}", file=sys.stderr)
                runs.append({"round": r + 1, "memory": label, "mem_mb": mem,
                             "ended": rec.state, "predicted": round(predicted, 2)})
                continue
            measured = summary["samples_per_s"]
            runs.append({"round": r + 1, "memory": label, "mem_mb": mem,
                         "measured": round(measured, 2), "predicted": round(predicted, 2),
                         "error": round(abs(predicted - measured) / measured, 4),
                         "data_stall": round(summary["data_stall_fraction"], 4),
                         "cached_model": round(cached_fraction(model.fetch, resident, mem), 3),
                         "cached_implied": implied_hit_rate(model.fetch, measured)})
            print(f"{label} ({mem} MB): measured {measured:.1f}, predicted {predicted:.1f} "
                  f"samples/s", file=sys.stderr)
    report = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "host": os.uname().nodename, "images": args.images, "epochs": args.epochs,
              "dataset_mb": round(dataset, 1), "footprint_mb": round(footprint, 1),
              "unreclaimable_mb": None if model.anon_mb is None else round(model.anon_mb, 1),
              "cache_mb_s": round(model.fetch.cache_mb_s, 1),
              "storage_mb_s": round(model.fetch.storage_mb_s, 1),
              "profile": {str(p.cores): round(p.samples_per_s, 2) for p in profile.train_points()},
              "storage_throttle_mb_s": args.storage_mb_s or None, "runs": runs}
    if args.storage_mb_s:
        BLKIO.rmdir()
    (args.results / "memory.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
