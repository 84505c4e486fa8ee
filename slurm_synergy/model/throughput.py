"""The throughput model: samples/s of a workload at any (cores, memory), from its profile.

A job is as fast as its slowest stage (DS-Analyzer: speed = min(F, P, G)):

    speed(k, m, W) = min( F(x(m)),           fetch: page cache and storage
                          k / (p + h),       all CPU work shares the k cores
                          min(W, k) / p,     W loader workers prepare the input
                          G )                the device, when it is fed

p and h are CPU-seconds per sample of the input pipeline and of the training process;
G is the device's rate (on a CPU-only node the device is the cores left to the trainer,
t / h with t = k - W threads). F(x) = 1 / (x/C + (1-x)/S) with x the fraction of the
dataset the page cache holds: the job's memory beyond what the cache cannot take back
(its anonymous and shared memory, as its cgroup charges them), over the dataset's size;
C and S are the cache and storage read rates in samples/s.

Where the loader's worker and the trainer outnumber the cores (one core, one worker)
they take turns on it and evict each other's caches, which the components, each on a
core of its own, cannot see: there k / (p + h) becomes k / s, with s the CPU-seconds a
sample of the two on one shared core (the one-core pair, measure/offline/session.py), where
the profile measured it.

Not modelled: the loader's refill at each epoch's start (a new worker and its first
batch, which nothing hides): much of the time of a job whose epoch is a few batches
(alexnet on 2 cores waited 9% of its steps with 8 batches an epoch, 1.5% with 64) and
nothing of a real dataset's thousands. Nor the same sharing at larger counts, for a
script that keeps PyTorch's default threads beside its workers.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

from slurm_synergy.model.profile import (FetchRates, Point, PointError, ThroughputModel,
                                         highest_known, started_anew)


def workers_for(cores: int, procs: int = 1) -> int:
    """Loader workers per training process for k cores: each of the job's processes
    (torchrun ranks) gets an equal share of the cores, one of which stays with it."""
    return max(1, cores // procs - 1)


def cached_fraction(fetch: FetchRates, footprint_mb: float, mem_mb: float) -> float:
    """DS-Analyzer's x: the share of the dataset the page cache holds with `mem_mb` MB
    for a job whose own footprint is `footprint_mb` MB."""
    if fetch.dataset_mb <= 0:
        return 1.0
    return min(1.0, max(0.0, (mem_mb - footprint_mb) / fetch.dataset_mb))


def fetch_rate(fetch: FetchRates, x: float) -> float:
    """DS-Analyzer's F(x) in samples/s."""
    cache = fetch.cache_mb_s / fetch.sample_mb
    storage = fetch.storage_mb_s / fetch.sample_mb
    if storage <= 0 or cache <= 0:
        return math.inf
    return 1.0 / (x / cache + (1.0 - x) / storage)


def predict(model: ThroughputModel, cores: int, mem_mb: float | None = None,
            workers: int | None = None) -> float:
    """Predicted samples/s with `cores` cores, `mem_mb` of memory (None: enough to cache
    the whole dataset) and `workers` loader workers (None: workers_for(cores))."""
    if cores < 1:
        raise ValueError(f"cores must be at least 1, not {cores}")
    w = workers_for(cores) if workers is None else workers
    p, h = model.prep_core_s, model.host_core_s
    if model.basis == "end-to-end":
        # Fitted to whole runs: p is the total CPU cost per sample, G the plateau.
        limits = [cores / p if p > 0 else math.inf]
    else:
        # Where the loader's workers and the trainer outnumber the cores they take turns,
        # each evicting the other's caches: the one-core pair measured that cost.
        shared = model.shared_core_s if w > 0 and w + 1 > cores else None
        limits = [cores / shared if shared else
                  cores / (p + h) if p + h > 0 else math.inf]
        if w > 0:
            limits.append(min(w, cores) / p if p > 0 else math.inf)
        else:                       # input prepared in the training process itself
            limits.append(1.0 / (p + h) if p + h > 0 else math.inf)
    if model.device_rate is not None:
        limits.append(model.device_rate)
    elif model.basis != "end-to-end" and h > 0:
        limits.append(max(1, cores - w) / h)
    if model.fetch is not None and mem_mb is not None:
        x = cached_fraction(model.fetch, model.resident_mb, mem_mb)
        limits.append(fetch_rate(model.fetch, x))
    return min(limits)


def _errors(model: ThroughputModel, held: Sequence[Point], loader: Point,
            compute: Point) -> tuple[PointError, ...]:
    return tuple(PointError(pt.cores, pt.workers, pt.samples_per_s,
                            predict(model, pt.cores, None, pt.workers),
                            _noise(model, pt, loader, compute))
                 for pt in held if pt.samples_per_s > 0)


def _noise(model: ThroughputModel, pt: Point, loader: Point, compute: Point) -> float:
    """The error the measurements' noise alone could make of the point's prediction: its
    own runs' spread, plus how far the prediction moves when each component's rate moves
    by its runs' spread (p with the input-only step's; h and G with the compute-only
    step's); a component run once counts as noiseless."""
    def moved(changed: ThroughputModel) -> float:
        """How far the point's prediction moves with one component changed (a share)."""
        return abs(predict(changed, pt.cores, None, pt.workers) / base - 1.0)
    base = predict(model, pt.cores, None, pt.workers)
    if not 0 < base < math.inf:
        return pt.spread or 0.0
    ls, cs = loader.spread or 0.0, compute.spread or 0.0
    slower = replace(model, host_core_s=model.host_core_s * (1 + cs),
                     device_rate=None if model.device_rate is None else
                     model.device_rate / (1 + cs))
    return (pt.spread or 0.0) + moved(replace(model, prep_core_s=model.prep_core_s * (1 + ls))) \
        + moved(slower)


def fit_steps(train: Sequence[Point], on_gpu: bool) -> ThroughputModel:
    """Fit p, h, G from the training steps alone, for a script that takes no batch from a
    loader (it slices its own tensors): no input pipeline runs apart from its step, so p
    is 0 and h the training processes' CPU time per sample at the fewest cores measured
    (the steps' wall time there where the CPU time is unknown); G, on a GPU, the best
    rate measured. Every point is then compared with the model, the fewest cores' too."""
    least = min(train, key=lambda pt: pt.cores)
    h = least.host_cpu_s_per_sample or (least.cores / least.samples_per_s
                                        if least.samples_per_s > 0 else 0.0)
    held = started_anew(train)
    model = ThroughputModel(
        basis="steps", prep_core_s=0.0, host_core_s=h,
        device_rate=max(pt.samples_per_s for pt in train) if on_gpu else None,
        footprint_mb=max(pt.footprint_mb for pt in held or train), fetch=None,
        anon_mb=highest_known(pt.anon_mb for pt in held))
    return replace(model, held_out=tuple(
        PointError(pt.cores, pt.workers, pt.samples_per_s,
                   predict(model, pt.cores, None, pt.workers), pt.spread or 0.0)
        for pt in train if pt.samples_per_s > 0))


def fit_components(loader: Point, compute: Point, train: Sequence[Point], on_gpu: bool,
                   fetch: FetchRates | None,
                   shared: tuple[Point, Point] | None = None) -> ThroughputModel:
    """Fit p, h, G from the input-only and compute-only steps, and the one-core cost
    from `shared` (the input-only step alone on one core, the compute-only step beside
    another on that core) where measured; every end-to-end point is then held out, and
    its error is the model's error."""
    # The input-only step ran its workers flat out, each on a core of its own.
    p = max(1, min(loader.workers, loader.cores)) / loader.samples_per_s
    h = compute.host_cpu_s_per_sample
    alone, beside = shared or (None, None)
    shared_s = 1 / alone.samples_per_s + beside.host_cpu_s_per_sample \
        if alone and beside and alone.samples_per_s > 0 else None
    # Memory as the job will hold it: from the runs that started the script anew.
    held = started_anew(train)
    model = ThroughputModel(
        basis="components", prep_core_s=p, host_core_s=h,
        device_rate=compute.samples_per_s if on_gpu else None,
        footprint_mb=max((pt.footprint_mb for pt in held), default=compute.footprint_mb),
        fetch=fetch, anon_mb=highest_known(pt.anon_mb for pt in held),
        shared_core_s=shared_s)
    return replace(model, held_out=_errors(model, train, loader, compute))
