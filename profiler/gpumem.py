"""Peak GPU memory of one training step of a built-in workload, estimated without a GPU.

The model, its optimizer and a batch are built under PyTorch's fake tensors (shapes and
sizes, no data), and two training steps run under its memory tracker, which counts every
tensor's storage as CUDA's caching allocator would round it (parameters, gradients,
optimizer state, activations, temporaries). Two steps, because SGD's momentum buffers
appear at the first. It takes seconds on a CPU and allocates nothing of the batch, so a
batch that would need 40 GB on a GPU is estimated on a laptop.

Beside it, `analytic_mib` counts the same step another way (parameters, gradients and
momentum, the batch, and what autograd saves for the backward pass), an independent
figure to hold the estimate against.

    python -m profiler.gpumem [trainer options] [--batches 16,32,64] [--check] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from typing import Sequence

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker

from profiler.models import DATA_KINDS, VOCAB_SIZE, build_model
from profiler.train import cross_entropy, parse_args, sample_length

MIB = 2 ** 20
CLASSES = 10        # the data generator's; it sizes the last layer only


@dataclass(frozen=True)
class Estimate:
    batch: int
    peak_mib: float                 # the tracker's peak over a training step
    parts_mib: dict[str, float]     # what was live at the peak, by kind
    analytic_mib: float | None      # the independent count, where asked for (--check)
    seconds: float                  # what the estimate cost


def _batch(kind: str, length: int, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of the data kind, as the built-in loaders give it."""
    if kind == "jpeg":
        return torch.empty(batch, 3, length, length), torch.zeros(batch, dtype=torch.long)
    if kind == "text":
        return (torch.zeros(batch, length, dtype=torch.long),
                torch.zeros(batch, length, dtype=torch.long))
    return torch.empty(batch, 1, length), torch.zeros(batch, dtype=torch.long)


def _fake_model(mode: FakeTensorMode, arch: str, depth: int | None, kind: str) -> nn.Module:
    """The model with its parameters and buffers made fake. Built real first (the
    built-in models are small; their activations are what grows with the batch): a model
    that deep-copies its layers as it is built (the Transformer) cannot be built inside
    a fake mode."""
    model = build_model(arch, depth, VOCAB_SIZE if kind == "text" else CLASSES)
    for module in model.modules():
        for name, p in module._parameters.items():
            if p is not None:
                module._parameters[name] = nn.Parameter(mode.from_tensor(p),
                                                        requires_grad=p.requires_grad)
        for name, b in module._buffers.items():
            if b is not None:
                module._buffers[name] = mode.from_tensor(b)
    return model


def _step(model: nn.Module, optimizer: torch.optim.Optimizer, inputs: torch.Tensor,
          targets: torch.Tensor) -> None:
    loss = cross_entropy(model(inputs), targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()


def _optimizer(model: nn.Module) -> torch.optim.Optimizer:
    # The trainer's optimizer: SGD with momentum keeps one buffer per parameter.
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)


def tracked_mib(arch: str, depth: int | None, kind: str, length: int,
                batch: int) -> tuple[float, dict[str, float]]:
    """The peak of a training step (MiB) by PyTorch's memory tracker on fake tensors, and its
    parts (parameters, gradients, activations, ...) in MiB."""
    mode = FakeTensorMode()
    model = _fake_model(mode, arch, depth, kind)
    with mode:
        optimizer = _optimizer(model)
        tracker = MemTracker()
        tracker.track_external(model, optimizer)
        with tracker:
            for _ in range(2):
                inputs, targets = _batch(kind, length, batch)
                _step(model, optimizer, inputs, targets)
                tracker.reset_mod_stats()
        peak = tracker.get_tracker_snapshot("peak")
    snap = next(iter(peak.values()))
    parts = {str(getattr(k, "value", k)): v / MIB for k, v in snap.items()}
    total = parts.pop("Total")
    return total, {k: round(v, 3) for k, v in parts.items() if v}


def analytic_mib(arch: str, depth: int | None, kind: str, length: int, batch: int) -> float:
    """Parameters, gradients and momentum (each the parameters' size), the batch, and
    every tensor autograd keeps for the backward pass (counted once per storage, the
    parameters left out), on fake tensors: a count that does not use the tracker."""
    mode = FakeTensorMode()
    model = _fake_model(mode, arch, depth, kind)
    params = {p.untyped_storage()._cdata: p.untyped_storage().nbytes()
              for p in model.parameters()}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        """Count a tensor autograd saves, once per storage, parameters left out; returns it as is."""
        storage = t.untyped_storage()
        if storage._cdata not in params:
            kept[storage._cdata] = storage.nbytes()
        return t
    with mode:
        inputs, targets = _batch(kind, length, batch)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            cross_entropy(model(inputs), targets)
        data = inputs.numel() * inputs.element_size() + targets.numel() * targets.element_size()
    return (3 * sum(params.values()) + data + sum(kept.values())) / MIB


def estimate(argv: Sequence[str], batch: int | None = None, check: bool = False) -> Estimate:
    """The peak of one training step of the built-in trainer run with `argv` (its own
    options), at `batch` (default: the argv's); with `check`, the independent count too
    (it doubles the cost, so jobs go without it)."""
    args = parse_args(list(argv))
    kind = DATA_KINDS[args.arch]
    length = sample_length(args, kind)
    b = batch or args.batch
    t0 = time.perf_counter()
    peak, parts = tracked_mib(args.arch, args.depth, kind, length, b)
    seconds = time.perf_counter() - t0
    counted = analytic_mib(args.arch, args.depth, kind, length, b) if check else None
    return Estimate(b, round(peak, 3), parts,
                    None if counted is None else round(counted, 3), round(seconds, 3))


def main(argv: Sequence[str] | None = None) -> int:
    """Print the step's peak at each batch size asked for (--json: one object each); returns 0."""
    # No abbreviations: the trainer's own --batch must not be read as --batches.
    p = argparse.ArgumentParser(prog="python -m profiler.gpumem", allow_abbrev=False,
                                description=__doc__.split(
        "\n\n")[0], epilog="Other options are the built-in trainer's (python -m profiler.train "
        "--help); --data is not read.")
    p.add_argument("--batches", help="batch sizes to estimate, comma-separated (default: "
                   "the trainer's -b, half and twice it)")
    p.add_argument("--json", action="store_true", help="one JSON object per batch size")
    p.add_argument("--check", action="store_true", help="also count the step another way "
                   "(parameters, gradients, momentum, batch, autograd's saved tensors)")
    ours, rest = p.parse_known_args(argv)
    if "--data" not in rest:
        rest += ["--data", "unused"]
    base = parse_args(rest).batch
    try:
        batches = ([int(b) for b in ours.batches.split(",")] if ours.batches
                   else [max(1, base // 2), base, base * 2])
    except ValueError:
        p.error(f"--batches {ours.batches!r}: give batch sizes like 16,32,64")
    if any(b < 1 for b in batches):
        p.error("--batches: batch sizes are at least 1")
    for b in batches:
        e = estimate(rest, b, ours.check)
        if ours.json:
            print(json.dumps(asdict(e)))
        else:
            check = (f" (counted {e.analytic_mib:.1f}, ratio {e.peak_mib / e.analytic_mib:.2f})"
                     if e.analytic_mib else "")
            print(f"batch {b}: peak {e.peak_mib:.1f} MiB{check} in {e.seconds:.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
