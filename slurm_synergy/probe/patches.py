"""Inside one probed process: the calls put into PyTorch and DALI as the script imports
them, each feeding this process's Recorder (recorder.py).

Installed at interpreter start by the probe's sitecustomize, before the script runs, and
without importing torch or DALI: the patches go in when the script imports them. Patched:
`_BaseDataLoaderIter.__next__` (every PyTorch DataLoader, map-style or iterable),
`DataLoader.__init__` (the worker count), DALI's PyTorch iterators' `__next__` and the
thread count its Pipeline hands its backend, every optimizer's step (PyTorch's global
step hook), which counts the steps of a script that slices its own batches, and autograd's
backward pass, which counts those of a script that also updates its weights by hand.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.abc
import importlib.machinery
import inspect
import os
import sys
import time
import weakref
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from slurm_synergy.probe import task
from slurm_synergy.probe.records import ENV_CONFIG, ENV_DIR, ProbeConfig
from slurm_synergy.probe.recorder import Recorder, data_root

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
        """`func` called with its arguments changed."""
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
        """Note the loader's key, its dataset and workers; set the decision's workers."""
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
        """Count one optimizer step."""
        if RECORDER is not None:
            RECORDER.optimizer_step()

    register(before_step)


def _patch_autograd(module: ModuleType) -> None:
    # Tensor.backward calls torch.autograd.backward through the module, so one wrapper
    # sees both (Lightning, accelerate and Trainer all end in loss.backward()).
    # Reentrant activation checkpointing runs a backward inside the backward, on
    # autograd's own threads where the device is a GPU: only one outside any counts.
    graph_task = getattr(sys.modules.get("torch._C"), "_current_graph_task_id", None)
    original = module.backward

    def backward(*args: Any, **kwargs: Any) -> Any:
        """Count one backward pass (the outermost), then run it."""
        if RECORDER is not None and (graph_task is None or graph_task() == -1):
            RECORDER.backward_pass()
        return original(*args, **kwargs)

    backward.__wrapped__ = original  # type: ignore[attr-defined]
    module.backward = backward  # type: ignore[attr-defined]


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
    "torch.autograd": _patch_autograd,
    "nvidia.dali.pipeline": _patch_dali_pipeline,
    "nvidia.dali.plugin.pytorch": _patch_dali_pytorch,
}


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then our patch on the fresh module."""

    def __init__(self, loader: Any, patch: Callable[[ModuleType], None]) -> None:
        self.loader, self.patch = loader, patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        """The real loader's module."""
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        """Run the module, then patch it."""
        self.loader.exec_module(module)
        self.patch(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Patches a module right after it is first imported, whoever imports it."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        """The spec of a module we patch, its loader wrapped; None for every other module."""
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
        """Record the script's failure, then report it as Python would."""
        recorder.failed(exc)
        previous(kind, exc, tb)

    sys.excepthook = excepthook
    atexit.register(recorder.at_exit)
