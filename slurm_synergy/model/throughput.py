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

p and h are measured alone (the components); running together they cost more (the
workers and the trainer share caches and cores), by a factor the end-to-end runs tell,
each run checked against the factor the others give. Not modelled: the loader's refill
at each epoch's start (a new worker and its first batch, which nothing hides): much of
the time of a job whose epoch is a few batches (alexnet on 2 cores waited 9% of its
steps with 8 batches an epoch, 1.5% with 64) and nothing of a real dataset's thousands.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from typing import Sequence

from slurm_synergy.model.profile import (FetchRates, Point, PointError, ThroughputModel,
                                         highest_known, started_anew)


def workers_for(cores: int, procs: int = 1) -> int:
    """Loader workers per training process for k cores: each of the job's processes
    (torchrun ranks) gets an equal share of the cores, one of which stays with it."""
    return max(1, cores // procs - 1)


def cached_fraction(fetch: FetchRates, footprint_mb: float, mem_mb: float) -> float:
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


def _cpu_limits(model: ThroughputModel, cores: int, w: int) -> list[float]:
    """The rates the cores allow, at the model's CPU costs (its interference included)."""
    p = model.prep_core_s * model.interference
    h = model.host_core_s * model.interference
    if model.basis == "end-to-end":
        # Fitted to whole runs: p is the total CPU cost per sample, G the plateau.
        return [cores / p if p > 0 else math.inf]
    limits = [cores / (p + h) if p + h > 0 else math.inf]
    if w > 0:
        limits.append(min(w, cores) / p if p > 0 else math.inf)
    else:                       # input prepared in the training process itself
        limits.append(1.0 / (p + h) if p + h > 0 else math.inf)
    if model.device_rate is None and h > 0:
        limits.append(max(1, cores - w) / h)     # the device is the trainer's cores
    return limits


def predict(model: ThroughputModel, cores: int, mem_mb: float | None = None,
            workers: int | None = None) -> float:
    """Predicted samples/s with `cores` cores, `mem_mb` of memory (None: enough to cache
    the whole dataset) and `workers` loader workers (None: workers_for(cores))."""
    if cores < 1:
        raise ValueError(f"cores must be at least 1, not {cores}")
    w = workers_for(cores) if workers is None else workers
    limits = _cpu_limits(model, cores, w)
    if model.device_rate is not None:
        limits.append(model.device_rate)
    if model.fetch is not None and mem_mb is not None:
        x = cached_fraction(model.fetch, model.resident_mb, mem_mb)
        limits.append(fetch_rate(model.fetch, x))
    return min(limits)


# How close to the device's own rate an end-to-end run counts as fed (it binds, so the
# run says nothing of the CPU's costs): at least this, or the run's spread if wider.
DEVICE_MARGIN = 0.05


def interference(alone: ThroughputModel, run: Point) -> float | None:
    """The factor on the components' CPU costs that makes the model give `run`'s rate,
    or None where the run cannot tell it: the device bound it (within its noise), so the
    cores had time to spare whatever they cost, or nothing was measured."""
    cpu = min(_cpu_limits(alone, run.cores, run.workers))
    measured = run.samples_per_s
    if measured <= 0 or not math.isfinite(cpu):
        return None
    device = alone.device_rate
    if device is not None and cpu >= device:
        # The components say the device binds: only a run clearly below it says that
        # the cores bind after all, and only ever by costing more, never less: the safe
        # side, since a model whose cores cost more gives a job more of them.
        if measured >= (1 - max(DEVICE_MARGIN, run.spread or 0.0)) * device:
            return None
        return max(1.0, cpu / measured)
    return cpu / measured


def scaled(alone: ThroughputModel, runs: Sequence[Point]) -> ThroughputModel:
    """The components' model with its CPU costs scaled by the median of the factors the
    end-to-end `runs` tell (interference); as it is where none tells one."""
    told = [(pt.cores, f) for pt in runs if (f := interference(alone, pt)) is not None]
    if not told:
        return alone
    return replace(alone, interference=statistics.median(f for _, f in told),
                   scaled_by=tuple(sorted(k for k, _ in told)))


def fit_components(loader: Point, compute: Point, train: Sequence[Point], on_gpu: bool,
                   fetch: FetchRates | None) -> ThroughputModel:
    """Fit p, h, G from the input-only and compute-only steps, and scale the CPU costs by
    what the end-to-end runs show running together costs (`interference`). Each run is
    held out in turn: its error is against the model scaled by the other runs alone, a
    prediction of a point the fit never saw."""
    # The input-only step ran its workers flat out, each on a core of its own.
    p = max(1, min(loader.workers, loader.cores)) / loader.samples_per_s
    h = compute.host_cpu_s_per_sample
    # Memory as the job will hold it: from the runs that started the script anew.
    held = started_anew(train)
    alone = ThroughputModel(
        basis="components", prep_core_s=p, host_core_s=h,
        device_rate=compute.samples_per_s if on_gpu else None,
        footprint_mb=max((pt.peak_rss_mb for pt in held), default=compute.peak_rss_mb),
        fetch=fetch, anon_mb=highest_known(pt.anon_mb for pt in held))
    errors = tuple(
        PointError(pt.cores, pt.workers, pt.samples_per_s,
                   predict(scaled(alone, [o for o in train if o is not pt]), pt.cores, None,
                           pt.workers))
        for pt in train if pt.samples_per_s > 0)
    return replace(scaled(alone, train), held_out=errors)
