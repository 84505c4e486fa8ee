"""Which GPU type a workload's step fits in: its peak GPU memory (measured on a GPU, or
estimated before it ran on one) against the site catalog's types in the partition.

The rule, the same every time: a job keeps the type it asked for unless some type of the
partition would not hold its step; then it is sent to the type that holds it at the
lowest cost per sample (Zeus's: eta * energy + (1 - eta) * max power * time, with time
from the catalog's relative speed and power from its default limit). When no type holds
it, nothing changes and `explain` gives gradient-accumulation advice where half the batch
would fit. Without an estimate or a catalog, nothing changes either: this can move a job,
never reject one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from slurm_synergy.model.gpus import Catalog, GpuType
from slurm_synergy.model.policy import Policy
from slurm_synergy.model.profile import GpuMemory, Profile


@dataclass(frozen=True)
class GpuFit:
    gpu_type: str | None        # the type to move the job to; None keeps the job's own
    need_mib: float | None      # the step's peak per GPU, where known
    reason: str                 # the `explain` line


def peak_need(profile: Profile) -> tuple[float | None, str]:
    """The step's peak GPU memory in MiB and where it comes from; a peak measured on a GPU
    wins over the estimate."""
    measured = profile.gpu.peak_torch_mem_mb
    if measured:
        return measured, "measured on the GPU (torch's max_memory_allocated)"
    if profile.gpu_memory is None:
        return None, "the profile has no GPU memory estimate"
    return estimated_need(profile.gpu_memory)


def estimated_need(mem: GpuMemory) -> tuple[float | None, str]:
    """The estimate's peak at the job's batch, and where it comes from."""
    peak = mem.at(mem.batch)
    if not mem.method or peak is None:
        return None, f"no GPU memory estimate ({mem.reason or 'none at the job batch'})"
    return peak, f"estimated before the run ({mem.method}, batch {mem.batch})"


def cost_per_sample(t: GpuType, eta: float, max_power_w: float) -> float:
    """Zeus's cost of a sample on a type, in the catalog's relative units."""
    return (eta * t.default_power_w + (1 - eta) * max_power_w) / t.speed


def needed_mib(peak: float, policy: Policy) -> float:
    """What a GPU must hold for a step peaking at `peak` MiB: the headroom, and the CUDA
    context and library workspaces no tensor shows."""
    return peak * (1 + policy.gpu_mem_headroom) + policy.gpu_context_mib


def fit_gpu_type(profile: Profile, partition_types: Sequence[str], policy: Policy,
                 catalog: Catalog) -> GpuFit:
    """Where some GPU type of the partition (`partition_types`, sized by `catalog`) would
    not hold the workload's peak GPU memory with the policy's headroom and CUDA context,
    the type that does at the least Zeus cost per sample; else none (the job's type is
    kept). The fit's reason says which and why."""
    need, source = peak_need(profile)
    return fit_need(need, source, profile.gpu_memory, partition_types, policy, catalog)


def fit_need(need: float | None, source: str, estimate: GpuMemory | None,
             partition_types: Sequence[str], policy: Policy, catalog: Catalog) -> GpuFit:
    """The rule for a step peaking at `need` MiB per GPU (`estimate` gives the advice
    where no type holds it)."""
    if need is None:
        return GpuFit(None, None, f"GPU memory: {source}; the job's GPU type is kept")
    total = needed_mib(need, policy)
    head = (f"GPU memory: the step needs {need:.0f} MiB per GPU, {source}; with "
            f"{policy.gpu_mem_headroom:.0%} headroom and {policy.gpu_context_mib} MiB of CUDA "
            f"context, {total:.0f} MiB")
    if not catalog.types:
        return GpuFit(None, need, f"{head}; {catalog.problem}, so the job's GPU type is kept")
    if not partition_types:
        return GpuFit(None, need, f"{head}; the partition's GPUs have no type, so there is "
                      "none to choose")
    unknown = [t for t in partition_types if t not in catalog.types]
    known = [catalog.types[t] for t in partition_types if t in catalog.types]
    fits = [t for t in known if t.memory_mib >= total]
    if known and len(fits) == len(known):
        # A type missing from the catalog may or may not hold it: not known to be short,
        # so it is no reason to move a job.
        return GpuFit(None, need, f"{head}: every catalogued type of the partition holds "
                      f"it ({', '.join(f'{t.name} {t.memory_mib} MiB' for t in known)})"
                      + (f"; {', '.join(unknown)} is not in the catalog" if unknown else "")
                      + "; the job's type is kept")
    if not fits:
        return GpuFit(None, need, head + _no_fit(estimate, known, unknown, policy))
    top_w = max(t.max_power_w for t in known)
    best = min(fits, key=lambda t: (cost_per_sample(t, policy.zeus_eta, top_w), t.name))
    short = [t for t in known if t not in fits]
    costs = ", ".join(f"{t.name} {cost_per_sample(t, policy.zeus_eta, top_w):.0f}"
                      for t in fits)
    return GpuFit(best.name, need, (
        f"{head}: {', '.join(f'{t.name} ({t.memory_mib} MiB)' for t in short)} would not "
        f"hold it" + (f" and {', '.join(unknown)} is not in the catalog" if unknown else "")
        + f"; of the types that do, {best.name} costs least per sample (Zeus, eta "
        f"{policy.zeus_eta:g}: {costs}), so jobs of this workload ask for {best.name}"))


def _no_fit(mem: GpuMemory | None, known: list[GpuType], unknown: list[str],
            policy: Policy) -> str:
    largest = max(known, key=lambda t: t.memory_mib, default=None)
    where = (f"no type of the partition holds it (the largest, {largest.name}, has "
             f"{largest.memory_mib} MiB)" if largest else "no catalogued type holds it")
    if unknown:
        where += f"; {', '.join(unknown)} is not in the catalog"
    advice = ""
    if mem is not None and largest is not None:
        half = mem.batch // 2
        peak = mem.at(half) if half else None
        if peak is not None and needed_mib(peak, policy) <= largest.memory_mib:
            advice = (f"; advice: batch {half} with 2 gradient-accumulation steps needs "
                      f"{peak:.0f} MiB and fits {largest.name}")
    return f": {where}; the job's request is kept (it may run out of GPU memory){advice}"
