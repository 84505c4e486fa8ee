"""Job traces for the simulator: Synergy's CSV format, and generated Poisson traces.

Synergy's format is one job per line, `job_id,model,arrival_s,iters,gpus`, with or
without that header. The generator draws arrivals from a Poisson process whose rate
gives the asked load: the GPU-hours arriving per hour, at the GPU-proportional share,
over the cluster's GPUs.
"""

from __future__ import annotations

import csv
import io
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from slurm_synergy import paths
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.simulate.workload import Workload

REFERENCE_TRACE = paths.DATA / "synergy" / "synergy_static_100job.csv"
HEADER = ("job_id", "model", "arrival_s", "iters", "gpus")

# Synergy's three task families and the models of each in its matrices.
FAMILIES = {
    "image": ("alexnet", "res18", "shufflenet", "mobilenet", "res50"),
    "language": ("gnmt", "lstm", "transformer", "bert"),
    "speech": ("m5", "deepspeech"),
}
DEFAULT_MIX = {"image": 0.6, "language": 0.3, "speech": 0.1}   # the static trace's split
# GPUs per job, as in Philly-derived traces: mostly single-GPU, a tail of larger jobs.
DEFAULT_GPU_MIX = {1: 0.70, 2: 0.10, 4: 0.15, 8: 0.05}
# Run time at the proportional share, log-uniform between these (hours).
DURATION_H = (0.25, 12.0)


@dataclass(frozen=True)
class SimJob:
    job_id: str
    model: str
    arrival_s: float
    iters: int
    gpus: int


def read_trace(path: Path) -> list[SimJob]:
    """A trace file; any bad line refuses the whole file, naming the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SynergyError(f"trace {path} cannot be read: {e}") from None
    jobs: list[SimJob] = []
    seen: set[str] = set()
    for n, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row or not "".join(row).strip():
            continue
        if n == 1 and tuple(c.strip() for c in row) == HEADER:
            continue
        if len(row) != len(HEADER):
            raise SynergyError(f"trace {path}, line {n}: expected {len(HEADER)} fields "
                               f"({','.join(HEADER)}), found {len(row)}")
        job_id, model, arrival, iters, gpus = (c.strip() for c in row)
        try:
            job = SimJob(job_id, model, float(arrival), int(iters), int(gpus))
        except ValueError:
            raise SynergyError(f"trace {path}, line {n}: arrival_s, iters and gpus must be "
                               "numbers") from None
        if not job_id or not model:
            raise SynergyError(f"trace {path}, line {n}: empty job id or model")
        if job_id in seen:
            raise SynergyError(f"trace {path}, line {n}: job id {job_id} appears twice")
        if not (math.isfinite(job.arrival_s) and job.arrival_s >= 0) or job.iters < 1 \
                or job.gpus < 1:
            raise SynergyError(f"trace {path}, line {n}: arrival_s must be >= 0, iters and "
                               "gpus >= 1")
        seen.add(job_id)
        jobs.append(job)
    if not jobs:
        raise SynergyError(f"trace {path}: no jobs")
    return jobs


def write_trace(jobs: Sequence[SimJob], path: Path) -> None:
    """Write the jobs as a trace CSV (HEADER's columns), as read_trace reads it."""
    with path.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(HEADER)
        for j in jobs:
            out.writerow((j.job_id, j.model, f"{j.arrival_s:.3f}", j.iters, j.gpus))


def parse_mix(text: str) -> dict[str, float]:
    """`image=0.6,language=0.3,speech=0.1` (families or model names) -> weights."""
    mix: dict[str, float] = {}
    for part in text.split(","):
        name, sep, weight = part.partition("=")
        try:
            value = float(weight)
        except ValueError:
            value = -1.0
        if not sep or not name.strip() or not value >= 0:
            raise SynergyError(f"model mix {text!r}: write name=weight pairs, e.g. "
                               "image=0.6,language=0.3,speech=0.1")
        mix[name.strip()] = value
    if not sum(mix.values()) > 0:
        raise SynergyError(f"model mix {text!r}: the weights add up to nothing")
    return mix


def poisson_trace(jobs: int, load: float, total_gpus: int, workloads: Mapping[str, Workload],
                  mix: Mapping[str, float] = DEFAULT_MIX,
                  gpu_mix: Mapping[int, float] = DEFAULT_GPU_MIX,
                  max_gpus: int | None = None, seed: int = 0) -> list[SimJob]:
    """`jobs` jobs arriving as a Poisson process at offered `load` (1.0 = as many
    GPU-hours arrive per hour as the cluster has GPUs). A family in `mix` stands for its
    models, equally weighted; a job never asks for more GPUs than `max_gpus`."""
    if jobs < 1 or not load > 0:
        raise SynergyError("a generated trace needs at least one job and a load above 0")
    choices: list[tuple[str, float]] = []
    for name, weight in mix.items():
        members = [m for m in FAMILIES.get(name, (name,)) if m in workloads]
        if not members:
            raise SynergyError(f"model mix: {name!r} is neither a family "
                               f"({', '.join(FAMILIES)}) nor a known model")
        choices += [(m, weight / len(members)) for m in members]
    sizes = [(g, w) for g, w in gpu_mix.items() if max_gpus is None or g <= max_gpus]
    if not sizes:
        raise SynergyError("no job size in the GPU mix fits one server")
    rng = random.Random(seed)
    lo, hi = (math.log(h * 3600) for h in DURATION_H)
    mean_s = (math.exp(hi) - math.exp(lo)) / (hi - lo)        # mean of a log-uniform
    mean_gpus = sum(g * w for g, w in sizes) / sum(w for _, w in sizes)
    rate = load * total_gpus / (mean_gpus * mean_s)          # arrivals per second
    models, weights = zip(*choices)
    gpus, gweights = zip(*sizes)
    out, t = [], 0.0
    for n in range(jobs):
        t += rng.expovariate(rate)
        model = rng.choices(models, weights)[0]
        seconds = math.exp(rng.uniform(lo, hi))
        iters = max(1, round(seconds / workloads[model].iter_s))
        out.append(SimJob(str(n), model, round(t, 3), iters, rng.choices(gpus, gweights)[0]))
    return out
