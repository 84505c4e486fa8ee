"""Inside one probed process: count and time what the script's data loaders yield.

Installed at interpreter start by the probe's sitecustomize, before the script runs, and
without importing torch or DALI: the hooks go in when the script imports them. Hooked:
`_BaseDataLoaderIter.__next__` (every PyTorch DataLoader, map-style or iterable),
`DataLoader.__init__` (the worker count), DALI's PyTorch iterators' `__next__` and the
thread count its Pipeline hands its backend, and every optimizer's step (PyTorch's global
step hook), which counts the steps of a script that slices its own batches.

A step is the time from one request for a batch to the next, so it holds the wait on the
loader and the rest of the step (forward, backward, optimizer, logging); without a
loader, from one optimizer step to the next. On CUDA the
probe synchronises before it reads the clock, or the wait would absorb queued kernels.

Long because the hooks for PyTorch's and DALI's loaders share one process-wide state (the
counters, the stop decision, the record written at exit) that must not be split across
modules imported at interpreter start.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.abc
import importlib.machinery
import inspect
import json
import os
import resource
import sys
import threading
import time
import traceback
import weakref
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from slurm_synergy.probe import task
from slurm_synergy.probe.records import (CONTROL_NAME, ENV_CONFIG, ENV_DIR, ProbeConfig,
                                         ProcessRecord)

CONTROL_POLL_S = 0.1    # how often a controlled process looks at its orders, at most
OPTIMIZER = "optimizer"  # the loader kind of a script whose steps are its optimizer's

DATA_ROOT_ATTRS = ("root", "data_dir", "root_dir", "data_root", "data_path", "folder",
                   "directory", "path")


class ProbeStop(SystemExit):
    """The measurement is complete: ends the script as a clean exit (SystemExit passes
    through the script's `except Exception`)."""

    def __init__(self) -> None:
        super().__init__(0)


def batch_size(batch: Any, depth: int = 0) -> int | None:
    """Samples in a batch: the leading dimension of its first tensor, however nested
    (a tensor, a tuple (inputs, labels), a dict, DALI's list of dicts)."""
    try:
        shape = getattr(batch, "shape", None)
    except Exception:       # a user's type with a property that raises
        return None
    if shape is not None and not isinstance(batch, (str, bytes)):
        return int(shape[0]) if len(shape) > 0 else None
    if depth > 4:
        return None
    values = (list(batch.values()) if isinstance(batch, dict)
              else batch if isinstance(batch, (list, tuple)) else [])
    for value in values[:8]:
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
        self.other_wait = 0.0   # waits outside the primary's __next__ in the current step
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
        if self.done or self.cfg.mode not in ("watch", "train"):
            return
        if self.rec.loaders and self.rec.loaders != [OPTIMIZER]:
            return          # a loader's batches count the steps
        if not self.rec.loaders:
            self.rec.loaders.append(OPTIMIZER)
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
        if not self.done and self.rec.state != "failed":
            self.write("ended")

    def failed(self, exc: BaseException) -> None:
        if isinstance(exc, SystemExit) and exc.code in (0, None):
            return
        self.rec.error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        self.write("failed")

    def saw_dataset(self, length: int | None, root: str) -> None:
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


RECORDER: Recorder | None = None


def _hook_next(cls: Any, kind: str) -> None:
    original = cls.__next__

    def __next__(self: Any) -> Any:
        assert RECORDER is not None
        return RECORDER.next_batch(self, original, kind)

    cls.__next__ = __next__


def _with_arguments(func: Callable[..., Any],
                    change: Callable[[inspect.BoundArguments], None]) -> Callable[..., Any]:
    """`func` with its arguments changed by `change`, however they were passed."""
    signature = inspect.signature(func)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return func(*args, **kwargs)    # let the call fail as it would have
        change(bound)
        return func(*bound.args, **bound.kwargs)

    wrapper.__wrapped__ = func  # type: ignore[attr-defined]
    return wrapper


def loader_key(args: dict[str, Any], caller: Any) -> str:
    """A DataLoader's role in the script: the line that made it, its dataset's type, its
    batch size and whether it shuffles. A training loader made anew each epoch keeps its
    key; a validation loader, made elsewhere or without shuffling, has its own."""
    sampler = args.get("sampler")
    shuffles = bool(args.get("shuffle")) or type(sampler).__name__ == "RandomSampler"
    return (f"{caller.f_code.co_filename}:{caller.f_lineno}:"
            f"{type(args.get('dataset')).__qualname__}:{args.get('batch_size', 1)}:{shuffles}")


def _patch_torch(module: ModuleType) -> None:
    rec = RECORDER
    assert rec is not None
    loader_cls, base_iter = module.DataLoader, module._BaseDataLoaderIter
    _hook_next(base_iter, "DataLoader")

    def change(bound: inspect.BoundArguments) -> None:
        args = bound.arguments
        dataset = args.get("dataset")
        with contextlib.suppress(Exception):    # a loader without a key is known by its id
            args["self"]._synergy_key = loader_key(args, sys._getframe(2))
        try:
            length = len(dataset)  # type: ignore[arg-type]
        except Exception:       # an IterableDataset has no length, or refuses to say
            length = None
        rec.saw_dataset(length, data_root(dataset))
        # An iterable dataset's workers each run the whole iterator unless it splits the
        # stream itself: another count would change what the script trains on.
        iterable = isinstance(dataset, getattr(module, "IterableDataset", ()))
        if rec.cfg.workers is not None and not iterable:
            args["num_workers"] = rec.cfg.workers
            if rec.cfg.workers == 0:    # options DataLoader refuses without workers
                for name in ("prefetch_factor", "multiprocessing_context"):
                    args.pop(name, None)
                args["persistent_workers"] = False
        workers = args.get("num_workers", 0)
        if isinstance(workers, int):
            rec.rec.loader_workers = max(rec.rec.loader_workers or 0, workers)

    loader_cls.__init__ = _with_arguments(loader_cls.__init__, change)
    original_iter = loader_cls.__iter__

    def __iter__(self: Any) -> Any:
        t0 = time.perf_counter()
        it = original_iter(self)
        rec.other_wait += time.perf_counter() - t0     # starting workers: waiting on data
        # The loader's identity, and a way back to it for loader mode's next epoch. Weak: a
        # loader with persistent workers holds its iterator, and a cycle would keep both
        # past the script's end, where multiprocessing terminates the workers instead of
        # the loader shutting them down (each leaving its /tmp/pymp-* folder).
        it._synergy_loader_id = getattr(self, "_synergy_key", id(self))
        it._synergy_loader = weakref.ref(self)
        return it

    loader_cls.__iter__ = __iter__


def _patch_optim(module: ModuleType) -> None:
    register = getattr(module, "register_optimizer_step_pre_hook", None)
    if register is None:        # torch before 2.0: manual batching goes uncounted
        return

    def before_step(optimizer: Any, args: Any, kwargs: Any) -> None:
        if RECORDER is not None:
            RECORDER.optimizer_step()

    register(before_step)


def _patch_dali_pipeline(module: ModuleType) -> None:
    rec = RECORDER
    assert rec is not None
    if rec.cfg.workers is None:
        return

    # Not through __init__: pipeline_def reads its argument list with getfullargspec,
    # which a wrapper would hide. The thread count is read when the backend is made.
    original = getattr(module.Pipeline, "_get_params", None)
    if original is None:
        return

    def _get_params(self: Any) -> Any:
        self._num_threads = max(1, rec.cfg.workers or 0)    # DALI needs one thread
        return original(self)

    module.Pipeline._get_params = _get_params


def _patch_dali_pytorch(module: ModuleType) -> None:
    for name in ("DALIGenericIterator", "DALIRaggedIterator"):
        cls = getattr(module, name, None)
        if cls is not None and "__next__" in vars(cls):
            _hook_next(cls, "DALI")
    base = getattr(module, "DALIGenericIterator", None)
    if base is not None:
        original_init = base.__init__

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            # DALI takes a first batch inside __init__: not one of the script's.
            self._synergy_init = True
            try:
                original_init(self, *args, **kwargs)
            finally:
                self._synergy_init = False
            size = getattr(self, "size", None)
            if RECORDER is not None and isinstance(size, int) and size > 0:
                RECORDER.saw_dataset(size, "")

        base.__init__ = __init__


PATCHES: dict[str, Callable[[ModuleType], None]] = {
    "torch.utils.data.dataloader": _patch_torch,
    "torch.optim.optimizer": _patch_optim,
    "nvidia.dali.pipeline": _patch_dali_pipeline,
    "nvidia.dali.plugin.pytorch": _patch_dali_pytorch,
}


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then our patch on the fresh module."""

    def __init__(self, loader: Any, patch: Callable[[ModuleType], None]) -> None:
        self.loader, self.patch = loader, patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        self.patch(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Patches a module right after it is first imported, whoever imports it."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        patch = PATCHES.get(name)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader, patch)
                return spec
        return None


def install() -> None:
    """Start probing this process, if the probe's environment asks for it (a supervisor
    started it, or the TaskProlog reached its task: probe/task.py)."""
    global RECORDER
    task.anchor()
    folder, config = os.environ.get(ENV_DIR), os.environ.get(ENV_CONFIG)
    if not folder or not config or RECORDER is not None:
        return
    try:
        RECORDER = Recorder(ProbeConfig.from_env(config), Path(folder))
    except (OSError, ValueError, TypeError) as e:
        print(f"slurm-synergy probe: not probing this process: {e}", file=sys.stderr)
        return
    recorder = RECORDER
    for name, patch in PATCHES.items():
        if name in sys.modules:
            patch(sys.modules[name])
    sys.meta_path.insert(0, _AfterImport())
    previous = sys.excepthook

    def excepthook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        recorder.failed(exc)
        previous(kind, exc, tb)

    sys.excepthook = excepthook
    atexit.register(recorder.at_exit)
