"""Inside one probed process: the measurement of what the script's data loaders yield,
and when to stop it (patches.py puts the calls into PyTorch and DALI that feed it).

A step is the time from one request for a batch to the next, so it holds the wait on the
loader and the rest of the step (forward, backward, optimizer, logging); without a
loader, from one optimizer step to the next; without an optimizer either (weights updated
by hand), from one backward pass to the next, which every training loop runs. On CUDA the
probe synchronises before it reads the clock, or the wait would absorb queued kernels.

The state is one per process (patches.RECORDER): the counters, the stop decision and the
record written at exit are shared by every loader the script makes.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from itertools import islice
from pathlib import Path
from typing import Any, Callable

from slurm_synergy.probe import task
from slurm_synergy.probe.records import (BACKWARD, CONTROL_NAME, OPTIMIZER, ProbeConfig,
                                         ProcessRecord)

CONTROL_POLL_S = 0.1    # how often a controlled process looks at its orders, at most

DATA_ROOT_ATTRS = ("root", "data_dir", "root_dir", "data_root", "data_path", "folder",
                   "directory", "path")


class ProbeStop(SystemExit):
    """The measurement is complete: ends the script as a clean exit (SystemExit passes
    through the script's `except Exception`)."""

    def __init__(self) -> None:
        super().__init__(0)


def batch_size(batch: Any, depth: int = 0) -> int | None:
    """Samples in a batch: the leading dimension of its first tensor, however nested
    (a tensor, a tuple (inputs, labels), a dict, DALI's list of dicts, any mapping:
    Hugging Face collators yield a BatchEncoding, a UserDict)."""
    try:
        shape = getattr(batch, "shape", None)
    except Exception:       # a user's type with a property that raises
        return None
    if shape is not None and not isinstance(batch, (str, bytes)):
        return int(shape[0]) if len(shape) > 0 else None
    if depth > 4:
        return None
    try:
        values = (list(islice(batch.values(), 8)) if isinstance(batch, Mapping)
                  else batch[:8] if isinstance(batch, (list, tuple)) else [])
    except Exception:       # a user's mapping whose values() raises
        return None
    for value in values:
        n = batch_size(value, depth + 1)
        if n is not None:
            return n
    return None


def data_root(dataset: Any) -> str:
    """A folder the dataset says it reads (ImageFolder's root and the like), if any."""
    try:
        for obj in (dataset, getattr(dataset, "dataset", None)):   # Subset wraps one
            for attr in DATA_ROOT_ATTRS:
                value = getattr(obj, attr, None)
                if isinstance(value, (str, os.PathLike)) and os.path.isdir(value):
                    return str(Path(value).resolve())
    except Exception:       # a dataset whose __getattr__ raises: it names no folder
        pass
    return ""


class Recorder:
    """This process's measurement, and the decisions of when to stop.

    Steps are counted on one loader: the one that has yielded most so far (the first on
    a tie). zip(a, b) is then one step per pair, and a validation loader's batches are
    time spent in the run (waiting on data), not training steps. A DataLoader is known by
    where it was made and how (loader_key), so a script that makes its loader anew each
    epoch keeps counting on it.
    """

    def __init__(self, config: ProbeConfig, folder: Path) -> None:
        self.cfg = config
        self.folder = folder
        rank = os.environ.get("RANK", os.environ.get("SLURM_PROCID", ""))
        self.rec = ProcessRecord(pid=os.getpid(), rank=int(rank) if rank.isdigit() else None,
                                 argv=list(sys.argv), workers_set=config.workers,
                                 cpus=len(os.sched_getaffinity(0)))
        self.t_start = time.perf_counter()
        self.window_t = self.window_cpu = 0.0
        self.pending: tuple[float, int | None] | None = None   # (wait, samples) of a batch
        self.replay: Any = None
        self.last_write = 0.0
        self.interval = config.interval_s
        self.last_poll = 0.0
        self.control_stamp: tuple[int, int] | None = None
        self.own_threads: int | None = None     # torch's threads before any order
        self.done = False
        self.stop_at: float | None = None   # peak_s: when the measured script is ended
        self.counts: dict[int, int] = {}    # batches per loader, by id
        self.primary: int | None = None     # the loader steps are counted on
        self.boundary_t = 0.0   # the last step boundary (perf_counter)
        self.other_wait = 0.0   # waits outside the primary's __next__ in the current step
        self.backwards = 0      # backward passes before the steps' signal was chosen
        self.tracker: Any = None    # memory mode: PyTorch's memory tracker, while measuring
        self.rec.write(folder)

    # --- the clock ---------------------------------------------------------------------

    def _sync(self) -> None:
        if not self.cfg.sync_cuda or self.cfg.mode == "watch":
            return
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    def _step_boundary(self) -> float:
        """A batch is asked for: the previous step has ended. May end the script."""
        self._sync()
        now = time.perf_counter()
        if self.pending is not None:
            wait, samples = self.pending
            self.pending = None
            r = self.rec
            r.longest_step_s = max(r.longest_step_s, now - self.boundary_t)
            r.total_steps += 1
            r.total_samples += samples if samples is not None else 1
            r.total_wait_s += wait + self.other_wait
            r.clock = time.monotonic()
            if self.rec.batches > self.cfg.warmup:
                r = self.rec
                r.steps += 1
                r.samples += samples if samples is not None else 1
                r.batch_size_known &= samples is not None
                r.wait_s += wait + self.other_wait
                r.seconds = now - self.window_t
                r.cpu_s = time.process_time() - self.window_cpu
        self.boundary_t = now
        self.other_wait = 0.0
        if self.tracker is not None:
            self.tracker.reset_mod_stats()  # per-module stats hold one step; the peak, all
        if self.rec.batches == self.cfg.warmup and self.rec.steps == 0:
            if self.cfg.mode == "memory" and self.tracker is None:
                from slurm_synergy.probe import memory
                self.tracker = memory.start()
            self.window_t, self.window_cpu = now, time.process_time()
        if self.cfg.mode == "watch":
            if self.cfg.controlled and now - self.last_poll >= CONTROL_POLL_S:
                self._follow(now)
            if now - self.last_write >= self.interval:
                self.write("iterating")
        elif self.rec.steps >= self.cfg.iterations:
            self.finish()
        return now

    def _follow(self, now: float) -> None:
        """Take the supervisor's latest orders, once each, at a step boundary: the step
        that starts here is the first under them, and the record written at once says
        so (its `window` and `clock`)."""
        self.last_poll = now
        path = self.folder / CONTROL_NAME
        try:
            st = os.stat(path)
        except OSError:
            return
        stamp = (st.st_ino, st.st_mtime_ns)     # written whole: each order a new inode
        if stamp == self.control_stamp:
            return
        try:
            order = json.loads(path.read_text(encoding="utf-8"))
            window, cores, of = int(order["window"]), order.get("cores"), order.get("of")
            self.interval = float(order.get("record_s") or self.cfg.interval_s)
        except (OSError, ValueError, KeyError, TypeError):
            return                  # being replaced, or not ours: the next poll reads it
        self.control_stamp = stamp
        self._threads(cores, of)
        self.rec.window = window
        self.rec.longest_step_s = 0.0
        self.write("iterating")

    def _threads(self, cores: Any, of: Any) -> None:
        """torch's intra-op threads in proportion to the cores of the window (`cores` of
        the `of` the run has), the process's own count when no window is open: a job
        given k cores by Slurm starts with threads for k."""
        torch = sys.modules.get("torch")
        if torch is None:
            return
        if self.own_threads is None:
            self.own_threads = torch.get_num_threads()
        want = self.own_threads
        if isinstance(cores, int) and isinstance(of, int) and 0 < cores < of:
            want = max(1, round(self.own_threads * cores / of))
        if torch.get_num_threads() != want:
            torch.set_num_threads(want)
        self.rec.threads = want

    def _took(self, wait: float, batch: Any) -> None:
        first = self.rec.batches == 0
        self.rec.batches += 1
        self.pending = (wait, batch_size(batch))
        if first:
            self.rec.first_batch_s = round(time.perf_counter() - self.t_start, 3)
            self.write("iterating")
            task.start_supervisor()     # task mode: the tree's first batch starts it

    # --- the hooked __next__ -----------------------------------------------------------

    def _primary(self, it: Any) -> bool:
        key = getattr(it, "_synergy_loader_id", id(it))
        count = self.counts.setdefault(key, 0)
        if self.primary is None or count > self.counts.get(self.primary, 0):
            self.primary = key
        self.counts[key] = count + 1
        return key == self.primary

    def next_batch(self, it: Any, original: Callable[[Any], Any], kind: str) -> Any:
        """The loader's next batch, timed and counted; ends the script once the measurement is complete."""
        if self.done:
            if self.stop_at is not None and time.perf_counter() >= self.stop_at and \
                    threading.current_thread() is threading.main_thread():
                raise ProbeStop()
            return original(it)     # measured already (its memory still watched)
        if getattr(it, "_synergy_init", False):
            return original(it)     # DALI filling its first batch
        if kind not in self.rec.loaders:
            self.rec.loaders.append(kind)
        if not self._primary(it):
            t0 = time.perf_counter()
            try:
                return original(it)
            finally:
                self.other_wait += time.perf_counter() - t0
        if self.cfg.mode == "loader":
            self._drain(it, original)
        if self.cfg.mode == "compute" and self.replay is not None:
            self._step_boundary()
            self._took(0.0, self.replay)
            return self.replay
        t0 = self._step_boundary()
        if self.done:
            return original(it)     # the last measured step ended here; the rest uncounted
        batch = original(it)
        self._took(time.perf_counter() - t0, batch)
        if self.cfg.mode == "compute":
            self.replay = batch
        return batch

    def optimizer_step(self) -> None:
        """An optimizer is about to step. In a script that takes no batch from a loader
        (it slices its own tensors), that is its step boundary; a batch's size is not
        known then, so its samples are its steps."""
        self._hand_step(OPTIMIZER)

    def backward_pass(self) -> None:
        """Autograd's backward pass is about to run. In a script that takes no batch from
        a loader and steps no optimizer (it updates its weights by hand), that is its
        step boundary. The first pass only waits: an optimizer that steps after it is
        the better signal (one per update, where backward may run per micro-batch)."""
        if not self.rec.loaders:
            self.backwards += 1
            if self.backwards < 2:
                return
        self._hand_step(BACKWARD)

    def _hand_step(self, kind: str) -> None:
        """A step boundary signalled by `kind` (OPTIMIZER, BACKWARD), in watch, train and
        memory modes (the input-only and compute-only ones need a loader's batches), where
        no loader's batches nor another signal already count the steps."""
        if self.done or self.cfg.mode not in ("watch", "train", "memory"):
            return
        if self.rec.loaders and self.rec.loaders != [kind]:
            return
        if not self.rec.loaders:
            self.rec.loaders.append(kind)
        self._step_boundary()
        if not self.done:
            self._took(0.0, None)

    def _drain(self, it: Any, original: Callable[[Any], Any]) -> None:
        """Loader mode: take warm-up + N batches as fast as the loader gives them, without
        the script's step, then end the script."""
        while True:
            t0 = self._step_boundary()
            try:
                batch = original(it)
            except StopIteration:       # a short epoch: start the next one
                it = _next_epoch(it)
                continue
            self._took(time.perf_counter() - t0, batch)

    # --- records -----------------------------------------------------------------------

    def write(self, state: str) -> None:
        """Write this process's record (`state`: iterating, measured, ended, failed) where the
        supervisor reads it."""
        self.rec.state = state
        self.rec.peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        torch = sys.modules.get("torch")
        if torch is not None:
            if self.rec.threads is None:
                self.rec.threads = torch.get_num_threads()
            if torch.cuda.is_initialized():
                self.rec.peak_gpu_mem_mb = torch.cuda.max_memory_allocated() / 2**20
        self.last_write = time.perf_counter()
        try:
            self.rec.write(self.folder)
        except OSError:
            pass    # a full disk must not break the user's training

    def finish(self) -> None:
        """The measurement is complete: end the script. Only the main thread can end it
        cleanly; a loader read from another thread just stops counting, and the
        supervisor ends the process once every record says measured."""
        self.done = True
        if self.tracker is not None:
            from slurm_synergy.probe import memory
            self.rec.step_peak_mib, self.rec.step_peak_device = memory.stop(self.tracker)
            self.tracker = None
        self.write("measured")
        if self.cfg.peak_s > 0:
            self.stop_at = time.perf_counter() + self.cfg.peak_s
        elif threading.current_thread() is threading.main_thread():
            raise ProbeStop()

    def at_exit(self) -> None:
        """Write the last record as the interpreter exits."""
        if not self.done and self.rec.state != "failed":
            self.write("ended")

    def failed(self, exc: BaseException) -> None:
        """Record that the script raised `exc`."""
        if isinstance(exc, SystemExit) and exc.code in (0, None):
            return
        self.rec.error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        self.write("failed")

    def saw_dataset(self, length: int | None, root: str) -> None:
        """Note a loader's dataset: its length and the folder it reads, where known."""
        if length:
            self.rec.dataset_len = max(self.rec.dataset_len or 0, length)
        if root and not self.rec.data_root:
            self.rec.data_root = root


def _next_epoch(it: Any) -> Any:
    ref = getattr(it, "_synergy_loader", None)
    loader = ref() if ref is not None else None
    if loader is not None:
        return iter(loader)
    if hasattr(it, "reset"):        # DALI without auto_reset
        it.reset()
        return it
    raise RuntimeError("the loader ended and cannot be restarted for more batches")
