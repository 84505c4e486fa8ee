"""A data-parallel job over GPUs of two types: each type's batch share and power limit.

The model of one step, from measured points only:
- each GPU of a type works through its per-GPU batch at its power limit, taking the time
  and energy interpolated between the batch sizes measured at that limit; a share above
  the largest measured batch runs as micro-batches within it (gradient accumulation), one
  below the smallest is not planned (nothing is extrapolated);
- the step ends when the slowest GPU ends (they synchronise their gradients), and a GPU
  that ends early draws its idle power until then;
- Zeus's cost weighs the two: eta * energy + (1 - eta) * max power * time, the max power
  being the sum of the GPUs' highest limits, as Zeus normalises one GPU's.
The plan is the split and the limits of least cost, over every split of the global batch
and every pair of measured limits. With one type it is Zeus's power-limit choice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product
from typing import Sequence, TypeVar

import numpy as np

from slurm_synergy.hetero.traces import Cost, TypeTrace
from slurm_synergy.model.errors import SynergyError


class PlanError(SynergyError):
    """The job cannot be planned from these traces; the message says why."""


@dataclass(frozen=True)
class Group:
    """The job's GPUs of one type."""

    trace: TypeTrace
    gpus: int
    idle_w: float

    @property
    def gpu_type(self) -> str:
        """The group's GPU type, its trace's."""
        return self.trace.gpu_type


@dataclass(frozen=True)
class Share:
    gpu_type: str
    gpus: int
    batch: int              # samples per GPU per step
    micro_batch: int        # the largest micro-batch (the batch itself without accumulation)
    accumulation: int       # micro-batches per step; 0 for a share of nothing
    power_limit_w: float
    busy_s: float           # each GPU's compute time per step
    energy_j: float         # each GPU's energy per step, its idle wait included


@dataclass(frozen=True)
class Plan:
    shares: tuple[Share, ...]
    step_time_s: float      # in the traces' units: the window they measured
    energy_j: float
    cost: float

    def as_dict(self) -> dict:
        """The plan as JSON-ready fields: each type's share and limit (W), the step's time (s),
        energy (J) and cost."""
        return {"plan": [{"gpu_type": s.gpu_type, "gpus": s.gpus, "batch": s.batch,
                          "micro_batch": s.micro_batch, "accumulation": s.accumulation,
                          "power_limit_w": s.power_limit_w} for s in self.shares],
                "step_time_s": self.step_time_s, "energy_j": self.energy_j,
                "cost": self.cost}


# A figure, or the same figure for every split at once (the search works on arrays).
Figure = TypeVar("Figure", float, np.ndarray)


def zeus_cost(energy_j: Figure, time_s: Figure, eta: float, max_power_w: float) -> Figure:
    """Zeus's cost of a run: eta * energy + (1 - eta) * max power * time."""
    return eta * energy_j + (1 - eta) * max_power_w * time_s


def share_cost(trace: TypeTrace, batch: int, limit: float) -> tuple[Cost, int, int] | None:
    """One GPU's time and energy for `batch` samples at `limit`, with its micro-batch and
    accumulation count: as few micro-batches as keep each within the measured sizes,
    as even as whole samples allow. None where that would leave the measured range."""
    if batch == 0:
        return Cost(0.0, 0.0), 0, 0
    sizes = trace.batches(limit)
    steps = math.ceil(batch / sizes[-1])
    small, extra = divmod(batch, steps)       # `extra` micro-batches of small + 1
    parts = [(small + 1, extra), (small, steps - extra)]
    time = energy = 0.0
    for size, count in parts:
        if count == 0:
            continue
        cost = trace.at(size, limit)
        if cost is None:
            return None
        time += count * cost.time_s
        energy += count * cost.energy_j
    return Cost(time, energy), small + (extra > 0), steps


def _max_power(groups: Sequence[Group]) -> float:
    """Zeus's normaliser for the job: each GPU's highest measured limit, summed."""
    return sum(g.gpus * g.trace.max_limit_w for g in groups)


def _with_wait(g: Group, busy: tuple[Figure, Figure], step: Figure) -> Figure:
    """A GPU's energy for the step: its own work (time, energy), then idle power until
    the slowest GPU ends; the search and the plan share this one formula."""
    return busy[1] + g.idle_w * (step - busy[0])


def evaluate(groups: Sequence[Group], batches: Sequence[int], limits: Sequence[float],
             eta: float) -> Plan | None:
    """The model's step for this split and these limits; None outside the measured."""
    costs = [share_cost(g.trace, b, p) for g, b, p in zip(groups, batches, limits)]
    if any(c is None for c in costs) or not any(batches):
        return None
    step = max(c[0].time_s for c in costs if c is not None)
    shares = []
    for g, b, p, c in zip(groups, batches, limits, costs):
        assert c is not None
        cost, micro, accumulation = c
        shares.append(Share(g.gpu_type, g.gpus, b, micro, accumulation, p, cost.time_s,
                            _with_wait(g, (cost.time_s, cost.energy_j), step)))
    energy = sum(s.gpus * s.energy_j for s in shares)
    return Plan(tuple(shares), step, energy, zeus_cost(energy, step, eta, _max_power(groups)))


def _splits(groups: Sequence[Group], global_batch: int) -> list[tuple[int, ...]]:
    """Every per-GPU batch of each type that adds up to the global batch."""
    if len(groups) == 1:
        g = groups[0]
        if global_batch % g.gpus:
            raise PlanError(f"a global batch of {global_batch} does not split evenly over "
                            f"{g.gpus} {g.gpu_type} GPUs")
        return [(global_batch // g.gpus,)]
    first, second = groups
    out: list[tuple[int, ...]] = [(b, (global_batch - first.gpus * b) // second.gpus)
                                  for b in range(global_batch // first.gpus + 1)
                                  if (global_batch - first.gpus * b) % second.gpus == 0]
    if not out:
        raise PlanError(f"a global batch of {global_batch} has no split into "
                        f"{first.gpus} x {first.gpu_type} and {second.gpus} x "
                        f"{second.gpu_type} equal shares")
    return out


def _check(groups: Sequence[Group], global_batch: int, eta: float) -> None:
    if not 1 <= len(groups) <= 2:
        raise PlanError(f"the planner splits a job over one or two GPU types, not "
                        f"{len(groups)}")
    if len({g.gpu_type for g in groups}) != len(groups):
        raise PlanError("each GPU type may be given once")
    if global_batch < 1:
        raise PlanError(f"the global batch must be at least 1, not {global_batch}")
    if not 0 <= eta <= 1:
        raise PlanError(f"eta {eta:g} must lie between 0 and 1")
    for g in groups:
        if g.gpus < 1:
            raise PlanError(f"{g.gpu_type}: at least 1 GPU, not {g.gpus}")


def _table(g: Group, limit: float, most: int) -> tuple[np.ndarray, np.ndarray]:
    """Time and energy of each per-GPU batch 0..most at `limit` (NaN outside the range)."""
    time = np.full(most + 1, np.nan)
    energy = np.full(most + 1, np.nan)
    for b in range(most + 1):
        c = share_cost(g.trace, b, limit)
        if c is not None:
            time[b], energy[b] = c[0].time_s, c[0].energy_j
    return time, energy


def best_plan(groups: Sequence[Group], global_batch: int, eta: float) -> Plan:
    """The split and limits of least Zeus cost under the model (ties: the first type's
    smaller share, then its lower limits)."""
    _check(groups, global_batch, eta)
    splits = np.array(_splits(groups, global_batch))
    tables = [{p: _table(g, p, global_batch // g.gpus) for p in g.trace.limits}
              for g in groups]
    max_power = _max_power(groups)
    best: tuple[float, tuple[int, ...], tuple[float, ...]] | None = None
    for limits in product(*(g.trace.limits for g in groups)):
        busy = [(tables[i][p][0][splits[:, i]], tables[i][p][1][splits[:, i]])
                for i, p in enumerate(limits)]
        step = np.max([t for t, _ in busy], axis=0)
        energy = sum(g.gpus * _with_wait(g, b, step) for g, b in zip(groups, busy))
        cost = zeus_cost(energy, step, eta, max_power)
        if np.all(np.isnan(cost)):
            continue
        i = int(np.nanargmin(cost))
        if best is None or cost[i] < best[0]:
            best = (float(cost[i]), tuple(int(b) for b in splits[i]), limits)
    if best is None:
        raise PlanError("no split of the global batch stays within the measured batch "
                        "sizes (each type's share must be 0, or at least its smallest "
                        "measured batch)")
    plan = evaluate(groups, best[1], best[2], eta)
    assert plan is not None
    return plan


def even_split(groups: Sequence[Group], global_batch: int, eta: float) -> Plan:
    """The baseline: every GPU the same batch (the nearest that adds up), each type at
    the limit Zeus would give it alone at that batch, evaluated by the same model."""
    _check(groups, global_batch, eta)
    gpus = sum(g.gpus for g in groups)
    split = min(_splits(groups, global_batch), key=lambda s: abs(s[0] - global_batch / gpus))
    limits = []
    for g, b in zip(groups, split):
        def alone(p: float, g: Group = g, b: int = b) -> float:
            """Zeus's cost of type `g` alone at batch `b` under limit `p` (W); inf where unmeasured."""
            c = share_cost(g.trace, b, p)
            return math.inf if c is None else zeus_cost(c[0].energy_j, c[0].time_s, eta,
                                                         g.trace.max_limit_w)
        limits.append(min(g.trace.limits, key=alone))
    plan = evaluate(groups, split, limits, eta)
    if plan is None:
        raise PlanError(f"the even split {' and '.join(map(str, split))} leaves the "
                        "measured batch sizes")
    return plan
