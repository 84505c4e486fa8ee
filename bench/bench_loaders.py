"""Benchmark the DALI CPU pipeline against the PyTorch DataLoader, side by side in one run.

Both loaders of profiler/data.py read the same synthetic JPEGs and do the same work
(decode, random resized crop, flip, normalise). Each measurement runs in its own child
process pinned to k cores with k workers (PyTorch) or k threads (DALI), so the figure
that compares is images per second per core. Runs are interleaved and repeated so that
noise from neighbours on a shared machine hits both loaders alike; medians are reported.
Figures go to bench/results/loaders.json.

    .venv/bin/python bench/bench_loaders.py            # --help for the knobs
"""

from __future__ import annotations

# Only the standard library at the top: a measuring child pins itself to its cores
# before torch or DALI load, so every thread and worker they start inherits the pinning
# and torch sizes its own thread pool to it.
import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LOADERS = ("pytorch", "dali")
MAX_CORES = 4


def tree_cpu_seconds() -> float:
    """CPU seconds used so far by this process (all its threads: DALI's) and its live
    children (PyTorch's workers)."""
    me = os.getpid()
    tick = os.sysconf("SC_CLK_TCK")
    total = sum(os.times()[:2])
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                # Split after the command name, which may hold spaces: then field 1 is
                # the parent's pid, fields 11 and 12 the user and system clock ticks.
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue    # gone since the scan listed it
        if int(fields[1]) == me:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def measure(loader: str, cores: list[int], data: Path, batch: int, crop: int,
            warmup: int, batches: int) -> dict:
    """Run in the child: time `batches` batches after `warmup` discarded ones."""
    os.sched_setaffinity(0, cores)
    # Imported only now, after pinning: see the note on the imports above.
    from profiler.data import make_dali_loader, make_loader

    workers = len(cores)
    if loader == "pytorch":
        source = make_loader(data, batch, workers, crop)
    else:
        source = make_dali_loader(data, batch, workers, crop, device="cpu")

    def endless():
        # A timed run may span several epochs; the epoch turnovers are part of the cost.
        while True:
            yield from source

    stream = endless()
    # Warm-up absorbs starting workers or threads and filling the prefetch queues.
    for _ in range(warmup):
        images, _ = next(stream)
    shape = list(images.shape)
    start, cpu_start = time.perf_counter(), tree_cpu_seconds()
    for _ in range(batches):
        next(stream)
    seconds = time.perf_counter() - start
    # CPU time is the work itself, so, unlike wall time, it hardly moves when
    # neighbours take cores from us on a shared machine.
    cpu_seconds = tree_cpu_seconds() - cpu_start
    rate = batches * batch / seconds
    return {"loader": loader, "cores": workers, "seconds": round(seconds, 3),
            "cpu_seconds": round(cpu_seconds, 2), "images_per_s": round(rate, 1),
            "images_per_s_per_core": round(rate / workers, 1),
            "images_per_cpu_s": round(batches * batch / cpu_seconds, 1),
            "batch_shape": shape}


def run_child(args: argparse.Namespace, loader: str, cores: list[int], data: Path) -> dict:
    """Start one measuring child and return its figures; exit with its error if it fails."""
    command = [sys.executable, __file__, "--child", loader,
               "--child-cores", ",".join(map(str, cores)), "--data", str(data),
               "--batch", str(args.batch), "--crop", str(args.crop),
               "--warmup", str(args.warmup), "--batches", str(args.batches)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        sys.exit(f"bench_loaders: error: the {loader} run on {len(cores)} core(s) failed: "
                 f"{lines[-1]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=None,
                        help="ImageFolder of JPEGs; made there if missing (default: a "
                             "synthetic set under bench/results/)")
    parser.add_argument("--num-images", type=int, default=1024)
    parser.add_argument("--image-size", type=int, default=256)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--crop", type=int, default=224, help="as in ImageNet training")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=3, help="batches discarded per run")
    parser.add_argument("--batches", type=int, default=32, help="batches timed per run")
    parser.add_argument("--repeats", type=int, default=2, help="runs per point; median kept")
    parser.add_argument("--max-cores", type=int, default=MAX_CORES)
    parser.add_argument("--out", type=Path,
                        default=ROOT / "bench" / "results" / "loaders.json")
    # The measuring child's own switches, not meant for users.
    parser.add_argument("--child", choices=LOADERS, help=argparse.SUPPRESS)
    parser.add_argument("--child-cores", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        cores = [int(c) for c in args.child_cores.split(",")]
        print(json.dumps(measure(args.child, cores, args.data, args.batch, args.crop,
                                 args.warmup, args.batches)))
        return 0

    # Checked first, so a machine without DALI fails in a second, not after the data set.
    try:
        import nvidia.dali
    except ImportError as e:
        sys.exit(f"bench_loaders: error: NVIDIA DALI cannot be imported ({e}); install "
                 f"nvidia-dali-cuda120 into this environment")
    if min(args.batch, args.batches, args.repeats, args.max_cores, args.warmup) < 1:
        sys.exit("bench_loaders: error: --batch, --batches, --repeats, --max-cores and "
                 "--warmup must be at least 1")

    from profiler.datagen import ensure_image_dataset
    # Named by its settings, so that other settings get their own set instead of a clash.
    data = args.data or ROOT / "bench" / "results" / (
        f"jpegs-{args.num_images}x{args.image_size}px-{args.classes}c")
    try:
        data = ensure_image_dataset(data, args.num_images, args.image_size, args.classes)
    except (ValueError, OSError) as e:
        sys.exit(f"bench_loaders: error: {e}")

    usable = sorted(os.sched_getaffinity(0))
    counts = range(1, min(args.max_cores, len(usable)) + 1)
    runs: dict[str, dict[int, list[dict]]] = {name: {k: [] for k in counts} for name in LOADERS}
    shapes = set()
    load_at_start = os.getloadavg()
    started = time.perf_counter()
    for repeat in range(args.repeats):
        for k in counts:
            # Alternate which loader goes first, so neither always follows the other.
            order = LOADERS if repeat % 2 == 0 else LOADERS[::-1]
            for loader in order:
                fig = run_child(args, loader, usable[:k], data)
                shapes.add(tuple(fig.pop("batch_shape")))
                runs[loader][k].append(fig)
                print(f"repeat {repeat + 1}/{args.repeats}  {loader:<7} k={k}  "
                      f"{fig['images_per_s']:8.1f} images/s  "
                      f"{fig['images_per_cpu_s']:8.1f} images/cpu-s", file=sys.stderr)

    if len(shapes) != 1:
        sys.exit(f"bench_loaders: error: the loaders' batches differ in shape "
                 f"({sorted(shapes)}), so their rates do not compare")

    figures = []
    for k in counts:
        row: dict = {"cores": k}
        for loader in LOADERS:
            rate = statistics.median(r["images_per_s"] for r in runs[loader][k])
            per_cpu_s = statistics.median(r["images_per_cpu_s"] for r in runs[loader][k])
            row[loader] = {"images_per_s": round(rate, 1),
                           "images_per_s_per_core": round(rate / k, 1),
                           "images_per_cpu_s": round(per_cpu_s, 1),
                           "runs": runs[loader][k]}
        row["dali_over_pytorch"] = round(
            row["dali"]["images_per_s"] / row["pytorch"]["images_per_s"], 2)
        row["dali_over_pytorch_cpu"] = round(
            row["dali"]["images_per_cpu_s"] / row["pytorch"]["images_per_cpu_s"], 2)
        figures.append(row)

    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"host": platform.node(), "cpu": cpu_model(), "cpus": os.cpu_count(),
                    "usable_cpus": len(usable), "loadavg_at_start": load_at_start,
                    "loadavg_at_end": os.getloadavg(),
                    "python": platform.python_version(),
                    "torch": importlib.metadata.version("torch"),
                    "dali": nvidia.dali.__version__},
        "parameters": {"data": str(data), "num_images": args.num_images,
                       "image_size": args.image_size, "classes": args.classes,
                       "crop": args.crop, "batch": args.batch, "warmup": args.warmup,
                       "batches": args.batches, "repeats": args.repeats,
                       "batch_shape": list(shapes.pop())},
        "seconds": round(time.perf_counter() - started, 1),
        "figures": figures,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")

    # Wall-clock rates are what a training job sees; rates per CPU-second are the
    # steadier measure of how much work each loader spends per image.
    print(f"{'':5}  {'pytorch':^26}  {'dali':^26}  {'dali/pytorch':^12}")
    print(f"{'cores':>5}" + f"  {'img/s':>7} {'per core':>8} {'/cpu-s':>8}" * 2
          + f"  {'wall':>5} {'cpu':>6}")
    for row in figures:
        cells = "".join(f"  {row[name]['images_per_s']:7.1f} "
                        f"{row[name]['images_per_s_per_core']:8.1f} "
                        f"{row[name]['images_per_cpu_s']:8.1f}" for name in LOADERS)
        print(f"{row['cores']:>5}{cells}  {row['dali_over_pytorch']:5.2f} "
              f"{row['dali_over_pytorch_cpu']:6.2f}")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
