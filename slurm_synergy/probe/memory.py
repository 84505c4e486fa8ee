"""Memory mode: the peak memory of the script's own training step, from PyTorch's memory
tracker (torch.distributed._tools.mem_tracker), without knowing the script.

The tracker starts when the warm-up ends, so the optimizer already holds its state, and
is handed every module and optimizer the process has made by then (found through the
garbage collector: the script does not say which is its model). It stops when the
measured steps end. Imported only in memory mode, by the probed process, where torch is
loaded already.
"""

from __future__ import annotations

import gc
import warnings
from typing import Any


def start() -> Any:
    """Start PyTorch's memory tracker over every module and optimizer the process holds now;
    returns the tracker, for `stop`."""
    import torch
    from torch.distributed._tools.mem_tracker import MemTracker

    stateful = (torch.nn.Module, torch.optim.Optimizer)
    found = []
    with warnings.catch_warnings():     # deprecated module attributes warn when looked at
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            try:
                if isinstance(obj, stateful):
                    found.append(obj)
            except Exception:   # a proxy whose __class__ raises is none of these
                continue
    tracker = MemTracker()
    tracker.track_external(*found)
    tracker.__enter__()
    return tracker


def stop(tracker: Any) -> tuple[float, str]:
    """The steps' peak in MiB and the device it was on: the busiest GPU, else the CPU."""
    tracker.__exit__(None, None, None)
    peaks = {str(dev): parts.get("Total", 0) for dev, parts in
             tracker.get_tracker_snapshot("peak").items()}
    gpus = {d: b for d, b in peaks.items() if not d.startswith("cpu")}
    device = max(gpus or peaks, key=lambda d: (gpus or peaks)[d], default="cpu")
    return peaks.get(device, 0) / 2**20, device
