"""Synergy's dynamic workload, drawn as its generator draws it: with the same seed, the
same trace, job for job (checked against the trace Synergy's simulator recorded,
11,772 jobs at 9 jobs/h, seed 42), so a run here can be set beside one of Synergy's.

Each job, in the order Synergy draws its random numbers:
- Arrival: the previous one's (0 for the first) plus a Poisson gap at `rate` jobs an
  hour, rounded up to a second.
- Run time at the GPU-proportional share: 60 x 10^U(3, 4) s with probability 0.2, else
  60 x 10^U(1.5, 3) s (Gavel's), so mostly 30 minutes to 17 hours, a tail to 7 days.
- GPUs: 1, 2, 4 or 8 at 70/10/15/5 % (`mix`); `single` draws the same and gives one.
- A model drawn at random, which Synergy then overrides by the class split; drawn here
  too, so that every later draw is Synergy's.
- Model: the class split image/language/speech (20/70/10 by default) is kept exactly:
  each job goes to the class furthest below its share of the jobs so far (the first to
  image), and each class hands out its models in turn.
- Iterations: the run time over the model's iteration time at the share.
Synergy reports such a run over a window of job ids past the warm-up (4000-4999 of its
default run): `simulate --window`.
"""

from __future__ import annotations

import math
import random
from typing import Mapping

from slurm_synergy.model.errors import SynergyError
from slurm_synergy.simulate.trace import SimJob
from slurm_synergy.simulate.workload import Workload

# Synergy's generator's classes and their models, in the order it hands them out.
CLASSES = {"image": ("alexnet", "res18", "res50", "mobilenet", "shufflenet"),
           "language": ("gnmt", "transformer", "lstm"),
           "speech": ("m5", "deepspeech")}
MODELS = tuple(m for ms in CLASSES.values() for m in ms)
SPLIT = (20, 70, 10)
# GPUs by the uniform draw u: 8 from 0.95, 4 from 0.8, 2 from 0.7, else 1.
GPU_MIX = ((0.95, 8), (0.8, 4), (0.7, 2))
GPUS_PER_JOB = ("mix", "single")


def dynamic_trace(jobs: int, rate: float, workloads: Mapping[str, Workload],
                  gpus: str = "mix", split: tuple[int, int, int] = SPLIT,
                  seed: int = 42) -> list[SimJob]:
    """`jobs` jobs of Synergy's dynamic workload arriving at `rate` jobs an hour, drawn as its
    generator draws them (see the module's docstring)."""
    if jobs < 1 or not 0 < rate < math.inf:
        raise SynergyError("a dynamic trace needs at least one job and a rate above 0 jobs/h")
    if gpus not in GPUS_PER_JOB:
        raise SynergyError(f"GPUs per job {gpus!r}: choose from {', '.join(GPUS_PER_JOB)}")
    missing = sorted(set(MODELS) - set(workloads))
    if missing:
        raise SynergyError(f"a dynamic trace needs Synergy's models; no throughput profile "
                           f"for {', '.join(missing)}")
    if len(split) != len(CLASSES) or min(split) < 0 or not sum(split) > 0:
        raise SynergyError(f"class split {split}: three shares, image/language/speech")
    want = dict(zip(CLASSES, (s / sum(split) for s in split)))
    given = dict.fromkeys(CLASSES, 0)
    rng = random.Random(seed)
    out, t = [], 0
    for n in range(jobs):
        t += math.ceil(-math.log(1.0 - rng.random()) / rate * 3600)
        lo, hi = (3.0, 4.0) if rng.random() >= 0.8 else (1.5, 3.0)
        seconds = 60 * 10 ** rng.uniform(lo, hi)
        u = rng.uniform(0, 1)
        g = next((k for at, k in GPU_MIX if u >= at), 1) if gpus == "mix" else 1
        rng.randint(0, len(MODELS) - 1)
        cls = max(CLASSES, key=lambda c: (want[c] - given[c] / n) if n else 0.0)
        model = CLASSES[cls][given[cls] % len(CLASSES[cls])]
        given[cls] += 1
        iters = max(1, int(seconds / workloads[model].iter_s))
        out.append(SimJob(str(n), model, float(t), iters, g))
    return out
