"""The decision engine: from a profile, a node shape and the site policy, what to allocate.

Synergy's rule, made safe for a shared Slurm partition:
- cores and memory: the smallest (cores, memory) whose predicted throughput is within
  the tolerance of the best the node can give, never more than a node has, and never
  more than the site's fairness cap over the job's GPU-proportional share;
- GPUs: fewer, when the profile shows that the extra GPUs add less than a threshold;
- loader workers: those the chosen core count was measured with, else one per core but
  the trainer's (the profile's model assumes it);
- GPU power limit: the one that minimised Zeus's cost eta*E + (1-eta)*MaxPower*T over
  the profiled limits, under the site cap.
Every step leaves a line in `reasons`, which `synergy plugin explain` prints. Where the
profile cannot support a decision (its runs too far apart, or its model too wrong where
the decision needs it), `decide` raises NoDecision with the reasons: jobs run as asked.

Long because `decide` is one chain of steps, each writing its reason in order, and the
rules it applies (memory, GPUs, power) are read beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from slurm_synergy.model.profile import Profile, memory_points
from slurm_synergy.model.throughput import cached_fraction, fetch_rate, predict, workers_for
from slurm_synergy.model.comment import decision_text
from slurm_synergy.model.gpufit import fit_gpu_type
from slurm_synergy.model.gpus import Catalog
from slurm_synergy.model.noise import counted, within_noise
from slurm_synergy.model.policy import Policy
from slurm_synergy.model.units import gpu_count, gpu_types, gres_text

MEM_STEP_MB = 256          # decisions are rounded up to this, as people write --mem


class NoDecision(ValueError):
    """The profile cannot carry a decision; `reasons` say what was weighed and why not."""

    def __init__(self, reasons: Sequence[str]) -> None:
        super().__init__(reasons[-1])
        self.reasons = tuple(reasons)


@dataclass(frozen=True)
class NodeShape:
    """What one node of the partition offers (the smallest, so a decision fits on any)."""

    cores: int
    mem_mb: int
    gpus: int
    gpu_types: tuple[str, ...] = ()

    def describe(self) -> str:
        """The node's cores, memory (MB) and GPUs, for the reasons."""
        types = f" ({', '.join(self.gpu_types)})" if self.gpu_types else ""
        return f"{self.cores} cores, {self.mem_mb} MB, {self.gpus} GPUs{types}"


@dataclass(frozen=True)
class Decision:
    fingerprint: str
    job_name: str
    cpus: int
    mem_mb: int
    gpus: int
    gpu_type: str                # "" = keep whatever type the job asked for
    workers: int
    power_limit_w: int           # 0 = leave the site cap (or the device default)
    predicted_samples_per_s: float
    best_samples_per_s: float
    share_cpus: int              # the GPU-proportional share, for comparison
    share_mem_mb: int
    reasons: tuple[str, ...]
    procs: int = 1               # training processes per task (torchrun ranks) measured

    @property
    def gres(self) -> str:
        """--gres's value for the decided GPUs, of the decision's type if any."""
        return self.gres_for("")

    def gres_for(self, asked_type: str) -> str:
        """The --gres value: the decision's GPU type where it names one, else the type
        the job asked for (the shim follows the same rule)."""
        return gres_text(self.gpus, self.gpu_type or asked_type)

    def summary(self, asked_type: str = "") -> str:
        """The short form that goes into the job's comment (and so into sacct)."""
        return decision_text(self.cpus, self.mem_mb, self.gpus, self.workers,
                             self.power_limit_w,
                             (self.gpu_type or asked_type) if self.gpus else "")


class NodeFacts(Protocol):
    """What sinfo says of a node (slurm.Node)."""

    @property
    def cpus(self) -> int:
        """The node's cores."""

    @property
    def mem_mb(self) -> int:
        """The node's memory, MB."""

    @property
    def gres(self) -> str:
        """The node's generic resources, as sinfo writes them (gpu:a10:4)."""


def shape_of(nodes: Sequence[NodeFacts]) -> NodeShape:
    """The shape every node of `nodes` offers at least: a decision for it fits on any."""
    if not nodes:
        raise ValueError("no nodes to size decisions for")
    types: set[str] = set()
    for node in nodes:
        types |= gpu_types(node.gres)
    return NodeShape(cores=min(n.cpus for n in nodes), mem_mb=min(n.mem_mb for n in nodes),
                     gpus=min(gpu_count(n.gres) for n in nodes), gpu_types=tuple(sorted(types)))


def proportional_share(shape: NodeShape, gpus: int) -> tuple[int, int]:
    """Cores (at least one) and MB a job of `gpus` GPUs gets in proportion on `shape`."""
    return max(1, shape.cores * gpus // shape.gpus), shape.mem_mb * gpus // shape.gpus


def measured_rates(profile: Profile) -> dict[int, float]:
    """The profile's sweep by cores, each counted at its slowdown (right-sized runs that
    trained slower than predicted: Profile.slowed)."""
    return {p.cores: p.samples_per_s * profile.slowdown(p.cores)
            for p in profile.train_points()}


def speed(profile: Profile, measured: dict[int, float], cores: int, mem_mb: float) -> float:
    """Samples/s at (cores, mem_mb): `measured` (measured_rates) where the profiler
    measured those cores (Synergy's empirical CPU sweep), the model elsewhere, counted at
    the slowdown as the sweep is; page cache limits either."""
    rate = measured.get(cores) or predict(profile.model, cores) * profile.slowdown(cores)
    fetch = profile.model.fetch
    if fetch is not None:
        rate = min(rate, fetch_rate(fetch, cached_fraction(fetch, profile.model.resident_mb,
                                                           mem_mb)))
    return rate


@dataclass(frozen=True)
class Pick:
    cpus: int
    mem: float
    rate: float
    best: float            # the best rate within the caps
    best_cpus: int


def smallest_within(rate: Callable[[int, float], float], cores: Sequence[int],
                    mems: Sequence[float], tolerance: float) -> Pick:
    """Synergy's demand rule, the heart of every allocation this project makes: the best
    rate the caps allow (at the most memory), then the fewest cores and, for those, the
    least memory whose rate is within `tolerance` of it. The plugin applies it to a
    profile; the simulator's allocators to Synergy's matrices."""
    top = max(mems)
    best_k = max(cores, key=lambda k: rate(k, top))   # first of equals: the fewest cores
    best = rate(best_k, top)
    if not best > 0:
        raise ValueError("no throughput at any allocation")
    target = (1 - tolerance) * best
    for k in sorted(cores):
        for m in sorted(mems):
            r = rate(k, m)
            if r >= target:
                return Pick(k, m, r, best, best_k)
    return Pick(best_k, top, best, best, best_k)


def _round_mem(mb: float) -> int:
    return int(math.ceil(mb / MEM_STEP_MB) * MEM_STEP_MB)


def decide(profile: Profile, shape: NodeShape, policy: Policy,
           catalog: Catalog | None = None) -> Decision:
    """The right size for a workload's jobs on nodes of `shape` under `policy`: the
    fewest cores and least memory whose predicted samples/s stay within the policy's
    tolerance of the best within the GPU-proportional share's fairness cap (Synergy's
    rule), with the noise of the profile's runs counted; GPUs where it keeps them busy;
    the loader workers the chosen cores were measured with; the power limit that
    minimises Zeus's energy-time cost; a GPU type that holds its memory (`catalog`).
    Every step is explained in `reasons`. NoDecision (its reasons say why) where the
    runs are too noisy or the model too far off to decide."""
    model = profile.model
    alloc = profile.allocation
    why: list[str] = []
    err = model.mean_error
    why.append(f"profile: {profile.job_name or profile.fingerprint}, measured in job "
               f"{alloc.job_id or '-'} on {alloc.node} with up to {alloc.cores} cores, "
               f"{alloc.mem_mb} MB, {alloc.gpus} GPU(s); model fitted to {model.basis}"
               + (f", held-out error {err:.1%}" if err is not None else "")
               + (f" (the runs' noise alone could make {model.mean_noise:.1%})"
                  if err is not None and model.mean_noise is not None else "")
               + profile.program_note)
    gpus, gpu_note = _gpus(profile, policy.gpu_threshold)
    why.append(gpu_note)

    # GPU-proportional share: what the node gives per GPU, times the job's GPUs.
    if shape.gpus and gpus:
        share_c, share_m = proportional_share(shape, gpus)
        cap_c = min(shape.cores, max(share_c, int(policy.fairness_cap * share_c)))
        cap_m = min(shape.mem_mb, int(policy.fairness_cap * share_m))
        why.append(f"node: {shape.describe()}; GPU-proportional share for {gpus} GPU(s): "
                   f"{share_c} core(s), {share_m} MB; fairness cap {policy.fairness_cap:g}x: "
                   f"at most {cap_c} core(s), {cap_m} MB")
    else:
        share_c, share_m, cap_c, cap_m = shape.cores, shape.mem_mb, shape.cores, shape.mem_mb
        why.append(f"node: {shape.describe()}; a job without GPUs has no GPU-proportional "
                   f"share: at most a whole node")

    peak_noise = max(policy.min_mem_spread, max(
        (s for s in (p.peak_spread for p in memory_points(profile)) if s is not None),
        default=0.0))
    # The peak counted with its noise, so that the size does not flip between profiles.
    footprint = model.footprint_mb * (1 + peak_noise)
    resident = model.resident_mb * (1 + peak_noise)    # what the page cache cannot take
    floor_m = max(policy.min_mem_mb, _round_mem(footprint * (1 + policy.mem_headroom)))
    if floor_m > cap_m:
        why.append(f"memory: the workload's peak {model.footprint_mb:.0f} MB +"
                   f"{peak_noise:.0%} for its noise + {policy.mem_headroom:.0%} needs "
                   f"{floor_m} MB, above the cap; it gets that much (up to the node's "
                   f"{shape.mem_mb} MB) rather than fail")
        cap_m = min(shape.mem_mb, floor_m)
        floor_m = cap_m

    measured = measured_rates(profile)
    spreads = {p.cores: p.spread for p in profile.train_points() if p.spread is not None}
    rates = {k: speed(profile, measured, k, cap_m) for k in range(1, cap_c + 1)}
    mems = _memory_candidates(profile, resident, floor_m, cap_m)

    def rate(k: int, m: float) -> float:
        """Samples/s at k cores and m MB: measured where the sweep ran k, else the model."""
        return speed(profile, measured, k, m)
    try:
        pick = smallest_within(rate, range(1, cap_c + 1), mems, policy.tolerance)
    except ValueError:
        raise ValueError("the profile predicts no throughput at any core count") from None
    cpus, mem_mb, chosen, best, best_k = (pick.cpus, int(pick.mem), pick.rate, pick.best,
                                          pick.best_cpus)
    curve = ", ".join(f"{k}c {rates[k]:.1f}"
                      + (f" ±{spreads[k]:.0%}" if k in spreads else "")
                      + ("" if k in measured else " (model)") for k in rates)
    unit = profile.rate_unit
    why.append(f"cores: the best within the cap is {best:.1f} {unit} at {best_k} "
               f"core(s); {cpus} core(s) give {chosen:.1f} ({chosen / best - 1:+.1%}), "
               f"within the {policy.tolerance:.0%} tolerance; {unit} by cores, measured "
               f"(± the spread of its runs) unless marked: {curve}")
    for r in profile.slowed:
        why.append(f"slower than predicted: job {r.job_id} trained at {r.observed:.1f} {unit} "
                   f"(±{r.spread:.0%}) at its decided {r.cores} core(s), where "
                   f"{r.predicted:.1f} was predicted: {r.cores} core(s) and fewer are counted "
                   f"{1 - r.factor:.0%} slower from then on")
    floored = counted(spreads, policy.min_spread)
    rule = policy.noise
    untold = within_noise(measured, floored, cpus, best_k, best, policy.tolerance)
    cheaper = next((k for k in untold if rule.excused(measured[k], best)), None)
    for k in untold:
        if cheaper is not None and k >= cheaper:
            break
        why.append(f"noise: {k} core(s) measured {measured[k]:.1f} ±{floored[k]:.0%} against "
                   f"{best:.1f} ±{floored[best_k]:.0%} at {best_k}: the runs cannot tell "
                   f"whether {k} is within the {policy.tolerance:.0%} tolerance, but its "
                   f"median is {1 - measured[k] / best:.0%} under, more than the policy's "
                   f"max_noise_loss of {policy.max_noise_loss:.0%}: the noise does not "
                   f"excuse that much")
    if cheaper is not None:
        k = cheaper
        full = rate(k, cap_m)
        m = min(m for m in mems if rate(k, m) >= (1 - policy.tolerance) * full)
        why.append(f"noise: {k} core(s) measured {measured[k]:.1f} ±{floored[k]:.0%} against "
                   f"{best:.1f} ±{floored[best_k]:.0%} at {best_k} (spreads counted as at "
                   f"least the policy's ±{policy.min_spread:.0%}): the runs cannot tell "
                   f"whether {k} is within the {policy.tolerance:.0%} tolerance, and its "
                   f"median is {1 - measured[k] / best:.0%} under, within the policy's "
                   f"max_noise_loss of {policy.max_noise_loss:.0%}: the fewer cores are "
                   f"kept (the same rule every time)")
        cpus, mem_mb, chosen = k, int(m), rate(k, m)
    noisy = sorted({k for k in (cpus, best_k) if spreads.get(k, 0.0) > policy.max_spread})
    if noisy:
        why.append("no decision: the runs at " + ", ".join(
            f"{k} core(s) lie ±{spreads[k]:.0%} apart" for k in noisy)
            + f", more than the policy's max_spread of ±{policy.max_spread:.0%}; profile "
            "again on a quieter node (--force)")
        raise NoDecision(why)
    fetch = model.fetch
    on_model = [f"{k} cores" for k in sorted({cpus, best_k}) if k not in measured]
    if fetch is not None and cached_fraction(fetch, resident, mem_mb) < 1:
        on_model.append(f"{mem_mb} MB (the page cache short of the dataset)")
    # An offline profile holds every swept point out; one measured in the run may have
    # measured its full size alone (the job ended first), and then nothing tests the model.
    if on_model and err is None and model.basis == "in-run":
        why.append(f"no decision: the throughput model decides {' and '.join(on_model)}, and "
                   "no measured point was held out to tell its error (the profile measured "
                   "too few core counts)")
        raise NoDecision(why)
    if on_model and err is not None and err > policy.max_model_error:
        why.append(f"no decision: the throughput model decides {' and '.join(on_model)}, and "
                   f"its held-out error of {err:.1%} is above the policy's max_model_error "
                   f"of {policy.max_model_error:.0%}")
        raise NoDecision(why)
    if cpus > alloc.cores:
        why.append(f"note: {cpus} cores is beyond the {alloc.cores} the profiler measured; "
                   "the figure is the model's extrapolation")
    why.append(_memory_note(profile, resident, mem_mb, floor_m, policy, peak_noise))
    procs = alloc.procs
    # The workers the chosen count was measured with (offline: the row's, else
    # workers_for's; in the run: the job's own), so that the decision is what was
    # measured; the rule where not. A point counts them over all processes.
    at = {p.cores: p.workers // max(1, procs) for p in profile.train_points()}
    workers = at.get(cpus, workers_for(cpus, procs))
    why.append(f"workers: {workers} data-loader worker(s)"
               + (f" in each of {procs} processes" if procs > 1 else "")
               + (f", as measured at {cpus} core(s)" if cpus in at else
                  ", one core left to each" if procs > 1 else ", one core left to the trainer"))
    power, power_note = _power(profile, policy.zeus_eta, policy.power_cap_w)
    why.append(power_note)
    gpu_type = _gpu_type(profile, shape)
    if gpus:
        fit = fit_gpu_type(profile, shape.gpu_types, policy,
                           catalog or Catalog({}, "no GPU catalog was given"))
        why.append(fit.reason)
        gpu_type = fit.gpu_type or gpu_type
    return Decision(fingerprint=profile.fingerprint, job_name=profile.job_name, cpus=cpus,
                    mem_mb=mem_mb, gpus=gpus, gpu_type=gpu_type,
                    workers=workers, power_limit_w=power,
                    predicted_samples_per_s=round(chosen, 3),
                    best_samples_per_s=round(best, 3), share_cpus=share_c,
                    share_mem_mb=share_m, reasons=tuple(why), procs=procs)


def _gpus(profile: Profile, threshold: float) -> tuple[int, str]:
    full = profile.allocation.gpus
    if full < 2:
        return full, f"GPUs: {full}, as asked"
    at_full = max((p.samples_per_s for p in profile.train_points()), default=0.0)
    fewer: dict[int, float] = {}
    for p in profile.points:
        if p.measure == "train" and p.gpus is not None and p.gpus < full:
            fewer[p.gpus] = max(fewer.get(p.gpus, 0.0), p.samples_per_s)
    if not fewer or at_full <= 0:
        return full, f"GPUs: {full}, as asked (the profile has no run at fewer GPUs)"
    for g in sorted(fewer):
        gain = at_full / fewer[g] - 1
        if gain < threshold:
            return g, (f"GPUs: {g} instead of {full}: {fewer[g]:.1f} samples/s at {g} against "
                       f"{at_full:.1f} at {full}, the extra GPUs add {gain:+.1%}, less than "
                       f"the site's {threshold:.0%}")
    g = min(fewer)
    return full, (f"GPUs: {full}, as asked: they add {at_full / fewer[g] - 1:+.1%} over {g} "
                  f"GPU(s), more than the site's {threshold:.0%}")


def _gpu_type(profile: Profile, shape: NodeShape) -> str:
    """The gres type of the GPU the profile ran on, when the partition has that type."""
    name = profile.gpu.name.lower()
    for t in shape.gpu_types:
        if t.lower() in name.split() or t.lower() in name.replace("-", " ").split():
            return t
    return ""


def _memory_candidates(profile: Profile, resident: float, floor_m: int,
                       cap_m: int) -> list[int]:
    """Memory sizes worth trying: the floor, then quarters of the dataset in page cache."""
    sizes = {floor_m, cap_m}
    fetch = profile.model.fetch
    if fetch is not None and fetch.dataset_mb > 0:
        for quarter in (0.25, 0.5, 0.75, 1.0):
            m = _round_mem(resident + quarter * fetch.dataset_mb)
            if floor_m <= m <= cap_m:
                sizes.add(m)
    return sorted(sizes)


def _memory_note(profile: Profile, resident: float, mem_mb: int, floor_m: int,
                 policy: Policy, peak_noise: float) -> str:
    mem_points = memory_points(profile)
    peaks = [m for p in mem_points for m in p.peaks_mb]
    # An in-run profile's points share the whole run's peak: one figure, not a range.
    apart = bool(peaks) and round(max(peaks)) > round(min(peaks))
    runs = f", its runs {min(peaks):.0f}-{max(peaks):.0f} MB" if apart else ""
    rss = max((p.peak_rss_mb for p in mem_points), default=0.0)
    if any(p.peak_own_mb for p in mem_points):
        runs += ("; its own pages once and its libraries' counted whole, which no other job "
                 f"on the node changes, where its processes' resident memory summed comes "
                 f"to {rss:.0f} MB")
    elif any(p.peak_pss_mb for p in mem_points):
        runs += (f"; each page once, where its processes' resident memory summed comes to "
                 f"{rss:.0f} MB")
    runs += profile.raised_note
    note = (f"memory: {mem_mb} MB (peak use {profile.model.footprint_mb:.0f} MB{runs}; "
            f"counted +{peak_noise:.0%} for the noise between runs, at least the policy's "
            f"min_mem_spread of {policy.min_mem_spread:.0%}, and +{policy.mem_headroom:.0%} "
            f"headroom, it needs {floor_m} MB)")
    fetch = profile.model.fetch
    if fetch is not None:
        x = cached_fraction(fetch, resident, mem_mb)
        note += f"; page cache holds {x:.0%} of the {fetch.dataset_mb:.0f} MB dataset"
        if profile.model.anon_mb is not None:
            note += (f" (it competes with all but the job's {profile.model.anon_mb:.0f} MB "
                     "of anonymous and shared memory)")
    else:
        note += ("; no page-cache model: a sweep in the run varies the cores only"
                 if profile.model.basis == "in-run" else
                 "; the profile has no memory model (no dataset folder)")
    return note


def _power(profile: Profile, eta: float, cap_w: float) -> tuple[int, str]:
    sweep = [p for p in profile.gpu.power_sweep if p.samples_per_s > 0]
    if not sweep:
        reason = profile.gpu.power_sweep_note or profile.gpu.reason or "not measured"
        cap = f"the site cap ({cap_w:.0f} W)" if cap_w else "the device's default limit"
        return 0, f"power limit: {cap}; the profile has no power sweep ({reason})"
    max_power = profile.gpu.max_limit_w or max(p.limit_w for p in sweep)

    def cost(p) -> float:
        """Zeus's cost per sample at one power limit: eta * energy (J) + (1 - eta) *
        MaxPower (W) * time (s)."""
        return eta * p.avg_power_w / p.samples_per_s + (1 - eta) * max_power / p.samples_per_s

    best = min(sweep, key=cost)
    limit = best.limit_w
    note = (f"power limit: {limit:.0f} W minimises Zeus's cost (eta {eta:g}) over "
            + ", ".join(f"{p.limit_w:.0f} W: {cost(p):.2f}" for p in sweep))
    if cap_w and limit > cap_w:
        limit = cap_w
        note += f"; held to the site cap of {cap_w:.0f} W"
    return int(round(limit)), note
