"""What each simulated job asks for, worked out by the plugin's decision engine.

Every allocation policy starts from the same four points, all from the engine's
`smallest_within` (the rule the plugin applies to real profiles), per GPU:
- share: the GPU-proportional share of a server (its cores and memory over its GPUs);
- floor: the fewest cores and least memory that run the job as fast as the share does;
- ideal: Synergy's demand vector, the fewest that give the best speed one server allows
  (under Synergy's speed rule, what Synergy's simulator asks for: `synergy_ideal`);
- claim: the plugin's decision under the site policy (its tolerance, its fairness cap).
The engine reads the workload's measured table, as the plugin reads a profile; the speed
model (below) is only how the simulator charges progress for an allocation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from slurm_synergy.model.engine import smallest_within
from slurm_synergy.model.policy import Policy
from slurm_synergy.simulate.cluster import ClusterSpec, Server
from slurm_synergy.simulate.workload import Workload


@dataclass(frozen=True)
class Config:
    """Cores and memory per GPU, and the speed they give (1.0 = the share's)."""

    cpus: int
    mem_gb: float
    rate: float


@dataclass(frozen=True)
class Demands:
    share: Config
    floor: Config
    ideal: Config
    claim: Config
    frontier: tuple[Config, ...]   # floor .. best, each strictly faster than the last


# speed(workload, its demands, cores per GPU, GB per GPU) -> speed relative to the share.
SpeedModel = Callable[[Workload, Demands, float, float], float]


def synergy_speed(work: Workload, d: Demands, cpus: float, mem_gb: float) -> float:
    """Synergy's simulator: the speed-up with the whole of its demand (`d.ideal`, capped
    at a server: `synergy_ideal`), else 1.0."""
    if cpus + 1e-9 >= d.ideal.cpus and mem_gb + 1e-9 >= d.ideal.mem_gb:
        return d.ideal.rate
    return 1.0


def matrix_speed(work: Workload, d: Demands, cpus: float, mem_gb: float) -> float:
    """The full matrix: the speed the job's actual allocation gives."""
    return work.rate(cpus, mem_gb)


SPEED_MODELS: dict[str, SpeedModel] = {"synergy": synergy_speed, "matrix": matrix_speed}


def synergy_ideal(work: Workload, gpus: int, server: Server, share_cpus: float) -> Config:
    """Synergy's demand for a job of `gpus` GPUs, per GPU: the matrix's demand vector
    times the GPUs, each resource capped at one server's. A capped CPU demand scales the
    speed-up linearly in cores, from 1.0 at the GPU-proportional share to the matrix's
    speed-up at its demand (a 4-GPU alexnet: 48 cores wanted, 24 given, 1.65 x instead
    of 2.94 x); capped memory leaves it alone. A job wider than a server gets its share
    at 1.0. This is how Synergy's simulator sizes a job; the speed-up away from the
    matrix's own points is its linear guess, not a measurement."""
    fair_c = gpus * share_cpus
    if gpus > server.gpus:
        return Config(int(share_cpus), server.mem_gb / server.gpus, 1.0)
    want_c, want_m = gpus * work.ideal_cpus, gpus * work.ideal_mem_gb
    speedup = work.ideal_speedup
    if want_c > server.cpus:
        speedup = 1 + (speedup - 1) * (server.cpus - fair_c) / (want_c - fair_c)
        want_c = server.cpus
    return Config(int(want_c // gpus), min(want_m, server.mem_gb) / gpus, speedup)


class DemandBook:
    """Demands per (model, GPUs), worked out once: the engine is the slow part."""

    def __init__(self, cluster: ClusterSpec, policy: Policy, speed: str = "matrix"):
        self.policy = policy
        # Under Synergy's speed rule a job asks for what Synergy's simulator asks for.
        self.synergy = speed == "synergy"
        self.share = cluster.share
        self.server = cluster.smallest
        self._book: dict[tuple[str, int], Demands] = {}

    def of(self, work: Workload, gpus: int) -> Demands:
        """The demands of `work` on `gpus` GPUs, worked out the first time they are asked for."""
        key = (work.name, gpus)
        found = self._book.get(key)
        if found is None:
            found = self._book[key] = self._work_out(work, gpus)
        return found

    def _work_out(self, work: Workload, gpus: int) -> Demands:
        rate = work.rate     # the profile, as the plugin sees it; not the speed model
        share_c, share_m = self.share
        # A job's GPUs on one server bound what each of them can have.
        on_one = max(1, min(gpus, self.server.gpus))
        max_c = max(1, self.server.cpus // on_one)
        max_m = self.server.mem_gb / on_one
        mems = sorted({m for m in work.mem_gb if m <= max_m} | {share_m, max_m})

        def pick(cap_c: int, cap_m: float, tolerance: float) -> Config:
            """Synergy's demand rule within `cap_c` cores and `cap_m` GB per GPU."""
            p = smallest_within(rate, range(1, cap_c + 1), [m for m in mems if m <= cap_m],
                                tolerance)
            return Config(p.cpus, p.mem, p.rate)

        share = Config(share_c, share_m, rate(share_c, share_m))
        floor = pick(share_c, share_m, 0.0)
        ideal = (synergy_ideal(work, gpus, self.server, share_c) if self.synergy
                 else pick(max_c, max_m, 0.0))
        cap = self.policy.fairness_cap
        claim = pick(min(max_c, max(share_c, int(cap * share_c))), min(max_m, cap * share_m),
                     self.policy.tolerance)
        return Demands(share, floor, ideal, claim, self._frontier(rate, floor, ideal, mems))

    @staticmethod
    def _frontier(rate, floor: Config, ideal: Config, mems: list[float]) -> tuple[Config, ...]:
        """The allocations worth stepping through from the floor towards the ideal, each
        with no fewer cores and no less memory than the one before (an upgrade only
        ever adds): for each core count, the least memory giving that count's best
        speed, kept only when faster than everything cheaper. The ideal may have fewer
        cores or less memory than the floor (more memory can stand in for cores), so the
        steps range over the larger of the two in each."""
        top_c, top_m = max(floor.cpus, ideal.cpus), max(floor.mem_gb, ideal.mem_gb)
        fits = [m for m in mems if floor.mem_gb <= m <= top_m]
        steps = [floor]
        for c in range(floor.cpus, top_c + 1):
            ms = [m for m in fits if m >= steps[-1].mem_gb]
            best = max(rate(c, m) for m in ms)
            if best > steps[-1].rate + 1e-9:
                steps.append(Config(c, next(m for m in ms if rate(c, m) >= best), best))
        return tuple(steps)
