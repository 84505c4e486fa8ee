"""The built-in training workload: train a model for a while and record where time goes.

Run as `python profiler/train.py ...` or `python -m profiler.train ...`. Options follow
torchloader's pretrain.py. Every iteration is timed in four parts, as torchloader
keeps them: waiting for the loader, copying to the device, compute (forward, backward,
step) and the total. They go to iterations.csv and a summary.json in --output.

Exit status 2, with one line on stderr, for bad arguments or a bad data folder.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:
    # Run as a file: Python put profiler/ itself first on the path, where data.py and
    # models.py would shadow any top-level modules of those names. Put the repository
    # root there instead so the package imports as a package.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import argparse
import csv
import io
import json
import os
import random
import tempfile
import time
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, NoReturn, Sequence

import numpy as np
import torch
from torch import nn

from profiler.data import list_images, make_dali_loader, make_loader
from profiler.datagen import ensure_image_dataset
from profiler.models import MODELS, build_model, model_name

PROG = "train"
LOADERS = ("pytorch", "dali")
MAX_GENERATED_CLASSES = 10


class UsageError(Exception):
    """Bad arguments or a bad data folder: reported in one line, exit status 2."""


class CannotRun(Exception):
    """The environment cannot run what was asked (DALI missing, say): exit status 1."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line instead of argparse's usage block: easier to spot in a Slurm log.
        self.exit(2, f"{PROG}: error: {message} (see --help)\n")


def _int_at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below the minimum, {low}")
        return value
    return parse


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not above 0")
    return value


def _port(text: str) -> int:
    value = _int_at_least(1)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port (1..65535)")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = _Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    add = p.add_argument
    add("-a", "--arch", default="resnet", choices=MODELS, help="model (default %(default)s)")
    add("--depth", type=_int_at_least(1), help="resnet depth (default 18)")
    add("-b", "--batch", type=_int_at_least(1), default=32,
        help="batch size (default %(default)s)")
    add("-j", "--workers", type=_int_at_least(0), default=2,
        help="loader workers: DataLoader processes or DALI threads (default %(default)s)")
    add("--max-iterations", type=_int_at_least(1),
        help="stop after this many iterations (wins over --epochs)")
    add("--epochs", type=_int_at_least(1),
        help="epochs to run (1 if neither this nor --max-iterations is given)")
    add("--data", type=Path, required=True, help="image folder: DIR/<class>/<img>")
    add("--generate-data", action="store_true",
        help="write a synthetic JPEG dataset at --data if it is missing")
    add("--dataset-size", type=_int_at_least(1), default=512,
        help="images to generate (default %(default)s)")
    add("--image-size", type=_int_at_least(8), default=96,
        help="side of generated images, px (default %(default)s)")
    add("--crop", type=_int_at_least(8), default=64,
        help="training crop, px (default %(default)s)")
    add("--loader", choices=LOADERS, default="pytorch",
        help="input pipeline (default %(default)s)")
    add("--lr", type=_positive_float, default=0.1,
        help="SGD learning rate (default %(default)s)")
    add("--output", type=Path, default=Path("."),
        help="folder for iterations.csv and summary.json (default: the current folder)")
    add("--port", type=_port,
        help="sets MASTER_PORT (torchloader compatibility; one process uses none)")
    add("--seed", type=int, default=0,
        help="seed for weights, order, augmentation (default %(default)s)")
    add("--warmup", type=_int_at_least(0), default=2,
        help="first iterations left out of the throughput (default %(default)s)")
    return p.parse_args(argv)


@dataclass
class IterationStats:
    iteration: int
    epoch: int
    data_s: float       # blocked waiting for the loader
    h2d_s: float        # host-to-device copy
    compute_s: float    # forward + backward + optimizer step
    total_s: float
    loss: float


def usable_cpus() -> int:
    # The affinity mask is what Slurm's cgroup/cpuset leaves this job, unlike cpu_count().
    return len(os.sched_getaffinity(0))


def prepare_data(args: argparse.Namespace) -> tuple[Path, int, int]:
    """The data folder, its image and class counts; UsageError if it cannot be used."""
    data: Path = args.data.expanduser().absolute()
    try:
        if args.generate_data:
            classes = min(MAX_GENERATED_CLASSES, args.dataset_size)
            # The dataset's own seed stays fixed: jobs with different --seed values share
            # one generated folder.
            ensure_image_dataset(data, args.dataset_size, args.image_size, classes)
        elif not data.exists():
            raise UsageError(f"data folder {data} does not exist "
                             "(--generate-data writes a synthetic dataset there)")
        names, samples = list_images(data)
    except (ValueError, OSError) as e:
        raise UsageError(str(e)) from e
    if len(samples) < args.batch:
        raise UsageError(f"data folder {data} holds {len(samples)} images, fewer than one "
                         f"batch of {args.batch}")
    return data, len(samples), len(names)


def choose_device(workers: int) -> tuple[torch.device, int, int, int]:
    """Device, GPUs used, usable CPUs and torch threads."""
    cpus = usable_cpus()
    if torch.cuda.is_available():
        return torch.device("cuda"), torch.cuda.device_count(), cpus, torch.get_num_threads()
    # Leave one core per loader worker so compute and decoding do not fight.
    threads = max(1, cpus - workers)
    torch.set_num_threads(threads)
    return torch.device("cpu"), 0, cpus, threads


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def run_iterations(model: nn.Module, loader: Iterable[Any], device: torch.device, lr: float,
                   max_iterations: int | None, epochs: int) -> list[IterationStats]:
    """Train; return one record per iteration."""
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)
    cuda = device.type == "cuda"
    # CUDA runs asynchronously: without a sync each section would show only the time
    # to queue its kernels, and the real cost would land in whichever section syncs.
    sync: Callable[[], None] = torch.cuda.synchronize if cuda else (lambda: None)
    model.train()
    stats: list[IterationStats] = []
    epoch = 0
    while (len(stats) < max_iterations) if max_iterations else (epoch < epochs):
        batches = iter(loader)
        before = len(stats)
        while max_iterations is None or len(stats) < max_iterations:
            sync()
            t0 = time.perf_counter()
            try:
                images, labels = next(batches)
            except StopIteration:
                break
            t1 = time.perf_counter()
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            sync()
            t2 = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            loss = criterion(model(images), labels)
            loss.backward()
            optimizer.step()
            loss_value = loss.item()     # also waits for the step on a GPU
            sync()
            t3 = time.perf_counter()
            stats.append(IterationStats(len(stats) + 1, epoch, t1 - t0, t2 - t1, t3 - t2,
                                        t3 - t0, loss_value))
        if len(stats) == before:
            raise RuntimeError("the loader produced no batch in a whole epoch")
        epoch += 1
    return stats


def summarise(stats: list[IterationStats], warmup: int, batch: int) -> dict[str, Any]:
    """Throughput and mean timings over the iterations after the warmup (over all of
    them when the run is no longer than the warmup, so short runs still report)."""
    measured = stats[warmup:] or stats
    total = sum(s.total_s for s in measured)
    data = sum(s.data_s for s in measured)
    n = len(measured)
    return {
        "measured_iterations": n,
        "samples_per_s": n * batch / total if total > 0 else 0.0,
        "mean_data_s": data / n,
        "mean_h2d_s": sum(s.h2d_s for s in measured) / n,
        "mean_compute_s": sum(s.compute_s for s in measured) / n,
        "mean_total_s": total / n,
        "data_stall_fraction": data / total if total > 0 else 0.0,
        "final_loss": stats[-1].loss,
    }


def write_atomic(path: Path, text: str) -> None:
    """Readers (the profiler polling a running job) see the old file or the new one."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)    # mkstemp makes it private
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def iterations_csv(stats: list[IterationStats]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([f.name for f in fields(IterationStats)])
    for s in stats:
        row = asdict(s)
        writer.writerow([f"{v:.6f}" if isinstance(v, float) else v for v in row.values()])
    return out.getvalue()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def run(args: argparse.Namespace) -> dict[str, Any]:
    started, wall0 = _now(), time.perf_counter()
    if args.port is not None:
        os.environ["MASTER_PORT"] = str(args.port)
    output: Path = args.output.expanduser().absolute()
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create output folder {output}: {e.strerror}") from e
    data, images, classes = prepare_data(args)
    try:
        model = build_model(args.arch, args.depth, classes)
    except ValueError as e:
        raise UsageError(str(e)) from e
    seed_everything(args.seed)
    device, gpus, cpus, threads = choose_device(args.workers)
    name = model_name(args.arch, args.depth)
    if args.loader == "dali":
        try:
            loader: Iterable[Any] = make_dali_loader(
                data, args.batch, args.workers, args.crop,
                "cuda:0" if device.type == "cuda" else "cpu", args.seed)
        except RuntimeError as e:
            raise CannotRun(str(e)) from e
    else:
        loader = make_loader(data, args.batch, args.workers, args.crop, args.seed)
    model = model.to(device)
    if gpus > 1:
        model = nn.DataParallel(model)
    where = f"{gpus} GPU(s)" if gpus else (f"cpu, {threads} torch threads "
                                           f"= max(1, {cpus} usable cpus - {args.workers} workers)")
    length = (f"{args.max_iterations} iterations" if args.max_iterations
              else f"{args.epochs or 1} epoch(s)")
    print(f"{PROG}: {name} b={args.batch} j={args.workers} loader={args.loader} on {where}; "
          f"data {data} ({images} images, {classes} classes), crop {args.crop}, {length}",
          flush=True)

    train0 = time.perf_counter()
    stats = run_iterations(model, loader, device, args.lr, args.max_iterations,
                           args.epochs or 1)
    train_s = time.perf_counter() - train0
    summary: dict[str, Any] = {
        "arch": args.arch, "depth": args.depth, "model": name, "batch": args.batch,
        "workers": args.workers, "loader": args.loader, "device": device.type, "gpus": gpus,
        "device_name": torch.cuda.get_device_name(0) if gpus else "cpu",
        "data": str(data), "dataset_images": images, "num_classes": classes,
        "crop": args.crop, "lr": args.lr, "seed": args.seed,
        "iterations": len(stats), "epochs": stats[-1].epoch + 1, "warmup": args.warmup,
        **summarise(stats, args.warmup, args.batch),
        "cpus": cpus, "torch_threads": threads,
        "started": started, "finished": _now(),
        "train_s": train_s, "wall_s": time.perf_counter() - wall0,
    }
    write_atomic(output / "iterations.csv", iterations_csv(stats))
    write_atomic(output / "summary.json", json.dumps(summary, indent=2) + "\n")
    print(f"{PROG}: {name} b={args.batch} j={args.workers} {device.type}: {len(stats)} "
          f"iterations, {summary['samples_per_s']:.1f} samples/s, "
          f"data stall {summary['data_stall_fraction']:.0%}", flush=True)
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        run(args)
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except CannotRun as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
