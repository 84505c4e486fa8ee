"""The built-in training workload: train a model for a while and record where time goes.

Run as `python -m profiler.train ...`, as jobs and the profiler do; like the rest of
the trainer (models, data, datagen, record) it needs nothing else of slurm-synergy.
Options follow torchloader's pretrain.py. Every iteration is timed in four parts, as
torchloader keeps them: waiting for the loader, copying to the device, compute (forward,
backward, step) and the total, plus the process's CPU time. They go to iterations.csv and
a summary.json in --output. (The profiler measures it like any other script, through
the script probe, which also runs its input pipeline and its step apart.)

Exit status 2, with one line on stderr, for bad arguments or a bad data folder.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, NoReturn, Sequence

import numpy as np
import torch
from torch import nn

from profiler.data import (SAMPLE_UNITS, AnyDataset, TextWindows, make_dali_loader,
                           open_dataset, torch_loader)
from profiler.datagen import ensure_dataset
from profiler.models import (DATA_KINDS, M5_MIN_SAMPLES, MAX_SEQ_LEN, MODELS, VOCAB_SIZE,
                             build_model, check_model, model_name)
from profiler.record import (IterationStats, iterations_csv, peak_gpu_mem_mb, peak_rss_mb,
                             summarise, write_whole)

PROG = "train"
LOADERS = ("pytorch", "dali")
MAX_GENERATED_CLASSES = 10


class UsageError(Exception):
    """Bad arguments or a bad data folder: reported in one line, exit status 2."""


class CannotRun(Exception):
    """The environment cannot run what was asked (DALI missing, say): exit status 1."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """Exit with status 2 and one line naming the bad option."""
        # One line instead of argparse's usage block: easier to spot in a Slurm log.
        self.exit(2, f"{PROG}: error: {message} (see --help)\n")


# The least and most each numeric option takes, checked once parsing is done so that a bad
# value is one line naming its option; the rates and lengths must be above 0.
AT_LEAST = {"--depth": 1, "--batch": 1, "--workers": 0, "--max-iterations": 1, "--epochs": 1,
            "--dataset-size": 1, "--image-size": 8, "--crop": 8, "--seq-len": 1,
            "--audio-crop": M5_MIN_SAMPLES, "--port": 1, "--warmup": 0}
AT_MOST = {"--seq-len": MAX_SEQ_LEN, "--port": 65535}
ABOVE_ZERO = ("--clip-seconds", "--lr")


def out_of_range(args: argparse.Namespace) -> str | None:
    """The first numeric option outside its bounds, in one line naming it; None when all fit."""
    for option in (*AT_LEAST, *ABOVE_ZERO):
        value = getattr(args, option[2:].replace("-", "_"))
        if value is None:
            continue
        if option in ABOVE_ZERO and not value > 0:
            return f"argument {option}: {value:g} is not above 0"
        if value < AT_LEAST.get(option, value):
            return f"argument {option}: {value} is below the minimum, {AT_LEAST[option]}"
        if value > AT_MOST.get(option, value):
            return f"argument {option}: {value} is above the maximum, {AT_MOST[option]}"
    return None


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The trainer's options; exits with status 2 and one line on a bad one."""
    p = _Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    add = p.add_argument
    add("-a", "--arch", default="resnet", choices=MODELS, help="model (default %(default)s)")
    add("--depth", type=int, help="resnet depth (default 18)")
    add("-b", "--batch", type=int, default=32,
        help="batch size (default %(default)s)")
    add("-j", "--workers", type=int, default=2,
        help="loader workers: DataLoader processes or DALI threads (default %(default)s)")
    add("--max-iterations", type=int,
        help="stop after this many iterations (wins over --epochs)")
    add("--epochs", type=int,
        help="epochs to run (1 if neither this nor --max-iterations is given)")
    add("--data", type=Path, required=True,
        help="data folder: DIR/<class>/<image>.jpg for resnet, mobilenet, alexnet; "
             "DIR/corpus.txt for transformer, lstm; DIR/<class>/<clip>.wav for m5")
    add("--generate-data", action="store_true",
        help="write a synthetic dataset of the model's kind at --data if it is missing")
    add("--dataset-size", type=int, default=512,
        help="samples to generate: images (jpeg), sequences of --seq-len + 1 bytes "
             "(text), clips (audio) (default %(default)s)")
    add("--image-size", type=int, default=96,
        help="jpeg: side of generated images, px (default %(default)s)")
    add("--crop", type=int, default=64,
        help="jpeg: training crop, px (default %(default)s)")
    add("--seq-len", type=int, default=128,
        help=f"text: bytes per training sequence, at most {MAX_SEQ_LEN} "
             "(default %(default)s)")
    add("--clip-seconds", type=float, default=1.0,
        help="audio: length of generated clips, s, at 8 kHz (default %(default)s)")
    add("--audio-crop", type=int, default=7200,
        help="audio: waveform samples per training clip, cut at a random offset "
             "(default %(default)s: 0.9 s at 8 kHz)")
    add("--loader", choices=LOADERS, default="pytorch",
        help="input pipeline; dali reads JPEGs only (default %(default)s)")
    add("--lr", type=float, default=0.1,
        help="SGD learning rate (default %(default)s)")
    add("--output", type=Path, default=Path("."),
        help="folder for iterations.csv and summary.json (default: the current folder)")
    add("--port", type=int,
        help="sets MASTER_PORT (torchloader compatibility; one process uses none)")
    add("--seed", type=int, default=0,
        help="seed for weights, order, augmentation (default %(default)s)")
    add("--warmup", type=int, default=2,
        help="first iterations left out of the throughput (default %(default)s)")
    args = p.parse_args(argv)
    problem = out_of_range(args)
    if problem:
        p.error(problem)
    return args


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, which Slurm's cgroup sets)."""
    # The affinity mask is what Slurm's cgroup/cpuset leaves this job, unlike cpu_count().
    return len(os.sched_getaffinity(0))


def sample_length(args: argparse.Namespace, kind: str) -> int:
    """The per-sample size option of the data kind."""
    return {"jpeg": args.crop, "text": args.seq_len, "audio": args.audio_crop}[kind]


def prepare_data(args: argparse.Namespace, kind: str) -> tuple[Path, AnyDataset]:
    """The data folder and its dataset; UsageError if it cannot be used."""
    data: Path = args.data.expanduser().absolute()
    try:
        if args.generate_data:
            # The dataset's own seed stays fixed: jobs with different --seed values
            # share one generated folder.
            ensure_dataset(kind, data, args.dataset_size, image_size=args.image_size,
                           seq_len=args.seq_len, clip_seconds=args.clip_seconds,
                           classes=min(MAX_GENERATED_CLASSES, args.dataset_size))
        elif not data.exists():
            raise UsageError(f"data folder {data} does not exist "
                             "(--generate-data writes a synthetic dataset there)")
        dataset = open_dataset(kind, data, sample_length(args, kind))
    except (ValueError, OSError) as e:
        raise UsageError(str(e)) from e
    if len(dataset) < args.batch:
        raise UsageError(f"data folder {data} holds {len(dataset)} {SAMPLE_UNITS[kind]}, "
                         f"fewer than one batch of {args.batch}")
    return data, dataset


def num_classes(dataset: AnyDataset) -> int:
    """The model's output classes: the vocabulary for text, else the dataset's classes."""
    # A language model's classes are the next byte's values.
    return VOCAB_SIZE if isinstance(dataset, TextWindows) else len(dataset.classes)


def choose_device(workers: int) -> tuple[torch.device, int, int, int]:
    """Device, GPUs used, usable CPUs and torch threads; workers 0 when no loader runs."""
    cpus = usable_cpus()
    if torch.cuda.is_available():
        return torch.device("cuda"), torch.cuda.device_count(), cpus, torch.get_num_threads()
    # Leave one core per loader worker so compute and decoding do not fight.
    threads = max(1, cpus - workers)
    torch.set_num_threads(threads)
    return torch.device("cpu"), 0, cpus, threads


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's generators with `seed`."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def cross_entropy(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy per label, for a classifier's or a language model's logits alike."""
    # Classifiers give (batch, classes) logits for (batch,) labels, language models
    # (batch, seq, vocab) for (batch, seq) next bytes: flattening all but the logits'
    # last axis gives the mean loss per label or per position alike.
    return nn.functional.cross_entropy(output.flatten(0, -2), target.flatten())


def run_iterations(model: nn.Module, loader: Iterable[Any], device: torch.device,
                   lr: float, max_iterations: int | None, epochs: int) -> list[IterationStats]:
    """Train; return one record per iteration."""
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
            cpu0, t0 = time.process_time(), time.perf_counter()
            try:
                inputs, targets = next(batches)
            except StopIteration:
                break
            t1 = time.perf_counter()
            inputs = inputs.to(device, non_blocking=True)
            targets = targets.to(device, non_blocking=True)
            sync()
            t2 = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            loss = cross_entropy(model(inputs), targets)
            loss.backward()
            optimizer.step()
            loss_value = loss.item()     # also waits for the step on a GPU
            sync()
            t3 = time.perf_counter()
            stats.append(IterationStats(len(stats) + 1, epoch, t1 - t0, t2 - t1, t3 - t2,
                                        t3 - t0, time.process_time() - cpu0, loss_value))
        if len(stats) == before:
            raise RuntimeError("the loader produced no batch in a whole epoch")
        epoch += 1
    return stats


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def make_input(args: argparse.Namespace, data: Path, dataset: AnyDataset,
               device: torch.device) -> Iterable[Any]:
    """What run_iterations iterates: the PyTorch or the DALI loader."""
    if args.loader == "dali":
        try:
            return make_dali_loader(data, args.batch, args.workers, args.crop,
                                    "cuda:0" if device.type == "cuda" else "cpu", args.seed)
        except RuntimeError as e:
            raise CannotRun(str(e)) from e
    return torch_loader(dataset, args.batch, args.workers, args.seed)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Train as `args` say and write iterations.csv and summary.json to --output; returns the
    summary. UsageError or CannotRun where it cannot run."""
    started, wall0 = _now(), time.perf_counter()
    if args.port is not None:
        os.environ["MASTER_PORT"] = str(args.port)
    kind = DATA_KINDS[args.arch]
    try:
        check_model(args.arch, args.depth)     # before any time goes into data
    except ValueError as e:
        raise UsageError(str(e)) from e
    if args.loader == "dali" and kind != "jpeg":
        raise UsageError(f"the DALI loader reads JPEGs only; {args.arch} reads {kind} "
                         "(use --loader pytorch)")
    output: Path = args.output.expanduser().absolute()
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create output folder {output}: {e.strerror}") from e
    data, dataset = prepare_data(args, kind)
    classes = num_classes(dataset)
    seed_everything(args.seed)      # before the model, so --seed fixes its weights
    workers = args.workers
    device, gpus, cpus, threads = choose_device(workers)
    name = model_name(args.arch, args.depth)
    model = build_model(args.arch, args.depth, classes).to(device)
    if gpus > 1:
        model = nn.DataParallel(model)
    loader = make_input(args, data, dataset, device)
    if gpus:
        where = f"{gpus} GPU(s)"
    elif workers:
        where = f"cpu, {threads} torch threads = max(1, {cpus} usable cpus - {workers} workers)"
    else:
        where = f"cpu, {threads} torch threads = all {cpus} usable cpus"
    length = (f"{args.max_iterations} iterations" if args.max_iterations
              else f"{args.epochs or 1} epoch(s)")
    shape = list(dataset[0][0].shape)
    print(f"{PROG}: {name} b={args.batch} j={args.workers} loader={args.loader} "
          f"on {where}; data {data} ({len(dataset)} "
          f"{SAMPLE_UNITS[kind]}, {classes} classes), input {'x'.join(map(str, shape))}, "
          f"{length}", flush=True)

    train0 = time.perf_counter()
    stats = run_iterations(model, loader, device, args.lr, args.max_iterations,
                           args.epochs or 1)
    train_s = time.perf_counter() - train0
    # Ends the loader's workers, so that their peak memory counts in RUSAGE_CHILDREN.
    del loader
    dataset_bytes = sum(path.stat().st_size for path in dataset.files)
    summary: dict[str, Any] = {
        "arch": args.arch, "depth": args.depth, "model": name, "batch": args.batch,
        "workers": args.workers, "loader": args.loader,
        "device": device.type, "gpus": gpus,
        "device_name": torch.cuda.get_device_name(0) if gpus else "cpu",
        "data": str(data), "data_kind": kind,
        "dataset_images": len(dataset),     # the older name of dataset_samples
        "dataset_samples": len(dataset), "dataset_bytes": dataset_bytes,
        "sample_bytes": dataset_bytes / len(dataset), "sample_shape": shape,
        "num_classes": classes, "crop": args.crop, "lr": args.lr, "seed": args.seed,
        "iterations": len(stats), "epochs": stats[-1].epoch + 1, "warmup": args.warmup,
        **summarise(stats, args.warmup, args.batch),
        "cpus": cpus, "torch_threads": threads,
        "peak_rss_mb": peak_rss_mb(), "peak_gpu_mem_mb": peak_gpu_mem_mb(gpus),
        "started": started, "finished": _now(),
        "train_s": train_s, "wall_s": time.perf_counter() - wall0,
    }
    write_whole(output / "iterations.csv", iterations_csv(stats))
    write_whole(output / "summary.json", json.dumps(summary, indent=2) + "\n")
    print(f"{PROG}: {name} b={args.batch} j={args.workers} {device.type}: {len(stats)} "
          f"iterations, {summary['samples_per_s']:.1f} samples/s, "
          f"data stall {summary['data_stall_fraction']:.0%}", flush=True)
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    """Run the trainer on `argv`; returns 0, 2 on bad arguments or data, 1 when it cannot run."""
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
