"""What slurm-synergy knows about each job beyond sacct: the stats its node epilogs left
(GPUs, and the job's cgroup peaks that replace sacct's sampled memory and CPU), its own
throughput (the summary.json it wrote), its profiling chain, and, from its workload's
profile, what the GPU-proportional allocation would have given it."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from slurm_synergy import paths
from slurm_synergy.model.comment import FINGERPRINT_RE
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.hooks.records import JobGpuStats
from slurm_synergy.model.engine import NodeShape, speed
from slurm_synergy.model.gpus import Catalog
from slurm_synergy.chains import read_chains
from slurm_synergy.model.profile import Profile, ProfileError
from slurm_synergy.profiles import ProfileStore
from slurm_synergy.report.accounting import row_dicts
from slurm_synergy.report.memory import expand_nodes

GPU_COLUMNS = ("gpu_energy_j", "gpu_util_pct", "gpu_sm_active_pct", "gpu_mem_peak_mb",
               "gpu_power_limit_w", "gpu_note")


def _column(jobs: pd.DataFrame, name: str, values: list[Any]) -> None:
    """A column of Python values: None stays None (a plain list would become NaN)."""
    jobs[name] = pd.Series(values, index=jobs.index, dtype=object)


def _gpu_fields(gpus: int, stats: list[JobGpuStats] | None) -> dict[str, Any]:
    empty: dict[str, Any] = dict.fromkeys(GPU_COLUMNS[:-1])
    if not gpus:
        return {**empty, "gpu_note": ""}
    if not stats:
        return {**empty, "gpu_note": "no GPU stats (node epilog not installed, or job not ended)"}
    job = JobGpuStats.of_job(stats)
    if not job.gpus:
        return {**empty, "gpu_note": job.note}
    return {
        "gpu_energy_j": job.energy_j, "gpu_util_pct": job.util_mean_pct,
        "gpu_sm_active_pct": job.sm_active_mean_pct, "gpu_mem_peak_mb": job.mem_peak_mb,
        "gpu_power_limit_w": job.power_limit_w,
        "gpu_note": "; ".join(sorted({g.note for g in job.gpus if g.note})),
    }


def add_gpu_stats(jobs: pd.DataFrame, stats: dict[str, list[JobGpuStats]]) -> None:
    """GPU columns in place, from the epilogs' stats (records.StatsFolder)."""
    fields = [_gpu_fields(g, stats.get(r)) for g, r in zip(jobs["gpus"], jobs["raw_id"])]
    for col in GPU_COLUMNS:
        _column(jobs, col, [f[col] for f in fields])


def _cgroup_peaks(nodes: str, stats: list[JobGpuStats]) -> dict[str, JobGpuStats] | None:
    """Each node's record of the job's last run, where every node of the job has one that
    read the job's cgroup; None where any lacks it (a part cannot stand for the whole)."""
    latest: dict[str, JobGpuStats] = {}
    for s in sorted(stats, key=lambda s: s.ended):
        latest[s.node] = s
    names = expand_nodes(nodes)
    if not names or any(latest.get(n) is None or latest[n].cgroup_mem_peak_mb is None
                        or latest[n].cgroup_cpu_s is None for n in names):
        return None
    return {n: latest[n] for n in names}


def add_cgroup_use(jobs: pd.DataFrame, stats: dict[str, list[JobGpuStats]]) -> None:
    """Where the node hooks read a job's cgroup on every node it ran on, its memory peak
    (per node: the kernel's high-water mark of all its steps there) replaces sacct's
    sampled one, and its CPU time sacct's where it is the larger; `usage_from` says which
    a row shows."""
    names = ("max_rss_mb", "peak_node", "mem_estimated", "mem_note", "mem_eff", "total_cpu_s",
             "cpu_eff")
    columns = {name: jobs[name].tolist() for name in names}
    source: list[str] = []
    for i, (raw, nodes, start, allowed, cores, elapsed) in enumerate(zip(
            jobs["raw_id"], jobs["nodes"], jobs["start"], jobs["node_mem_mb"],
            jobs["alloc_cpus"], jobs["elapsed_s"])):
        per_node = _cgroup_peaks(nodes or "", stats[raw]) \
            if start is not None and raw in stats else None
        if per_node is None:
            source.append("sacct")
            continue
        worst = max(per_node, key=lambda n: (per_node[n].cgroup_mem_peak_mb or 0.0, n))
        peak = per_node[worst].cgroup_mem_peak_mb or 0.0
        # Both are lower bounds: the cgroup's last reading misses up to a poll's worth,
        # sacct's TotalCPU the processes a killed step never reaped.
        cpu_s = max(sum(s.cgroup_cpu_s or 0.0 for s in per_node.values()),
                    columns["total_cpu_s"][i] or 0.0)
        for name, value in (("max_rss_mb", peak), ("peak_node", worst), ("mem_estimated", False),
                            ("mem_note", ""), ("mem_eff", peak / allowed if allowed else None),
                            ("total_cpu_s", cpu_s),
                            ("cpu_eff", cpu_s / (cores * elapsed) if cores and elapsed else None)):
            columns[name][i] = value
        source.append("cgroup")
    for name in names:
        _column(jobs, name, columns[name])
    _column(jobs, "usage_from", source)


def add_throughput(jobs: pd.DataFrame, cluster: str) -> None:
    """samples/s and the share of each step spent waiting on data, as the job measured
    them: the script probe's record of the run (probe.json, any script run in watch mode),
    else the summary.json the built-in trainer writes. A job's folder is shared by its
    profiling run and its resubmission (and by reruns of the row), so a file counts only
    if it was written while this job ran."""
    outputs = paths.outputs_dir(cluster)
    try:
        pointers = set(os.listdir(outputs))      # one listing, not a failed open a job
    except OSError:
        pointers = set()
    rates: list[float | None] = []
    waits: list[float | None] = []
    for raw, start, end, profiling in zip(jobs["raw_id"], jobs["start"], jobs["end"],
                                          jobs["profiling"]):
        found = (None, None) if profiling or start is None or end is None \
            or raw not in pointers else \
            _measured(outputs / raw, start.timestamp(), end.timestamp())
        rates.append(found[0])
        waits.append(found[1])
    _column(jobs, "samples_per_s", rates)
    _column(jobs, "data_wait_share", waits)


def _measured(pointer: Path, start: float, end: float) -> tuple[float | None, float | None]:
    try:
        folder = Path(pointer.read_text().strip())
    except (OSError, ValueError):
        return None, None
    for name, rate, wait in (("probe.json", ("measurement", "samples_per_s"),
                              ("measurement", "data_wait_share")),
                             ("summary.json", ("samples_per_s",), ("data_stall_fraction",))):
        try:
            path = folder / name
            if not start - 1 <= path.stat().st_mtime <= end + 60:
                continue
            data = json.loads(path.read_text())
            value, share = _dig(data, rate), _dig(data, wait)
            if value is not None:
                return value, share
        except (OSError, ValueError):
            continue
    return None, None


def _dig(data: Any, keys: tuple[str, ...]) -> float | None:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return float(data) if isinstance(data, (int, float)) and math.isfinite(data) else None


def add_chains(jobs: pd.DataFrame, cluster: str) -> list[str]:
    """profiled_as: the job that profiled this one's workload and resubmitted it;
    resubmitted_as: the job a profiling job became. Returns what could not be read."""
    problems = []
    try:
        links = read_chains(cluster)
    except (SynergyError, OSError, UnicodeDecodeError) as e:
        links, problems = [], [f"no profiling chains: {e}"]
    # A resubmission's comment names its profiling job (from=), so a chain whose record
    # is in another store (or gone) still shows both ways when both jobs are reported.
    became = {f: r for r, f in zip(jobs["raw_id"], jobs["from_job"]) if f}
    became.update({c.profiled_job: c.resubmitted_job for c in links})
    came_from = {c.resubmitted_job: c.profiled_job for c in links}
    _column(jobs, "resubmitted_as", [became.get(r) for r in jobs["raw_id"]])
    _column(jobs, "profiled_as", [came_from.get(r) or (f or None)
                                  for r, f in zip(jobs["raw_id"], jobs["from_job"])])
    return problems


def load_profiles(jobs: pd.DataFrame,
                  store: ProfileStore | None = None) -> tuple[dict[str, Profile], list[str]]:
    """The profiles of the jobs' workloads (the user's own store unless told), and a problem
    for each one that is there but cannot be read."""
    store = store or ProfileStore.default()
    found, problems = {}, []
    for fp in sorted({f for f in jobs["fingerprint"] if f and FINGERPRINT_RE.match(f)}):
        try:
            found[fp] = store.load(fp)
        except ProfileError as e:
            if store.path(fp).exists():     # absent is normal (not profiled): say nothing
                problems.append(f"profile {fp}: {e}")
    return found, problems


def add_gpu_memory(jobs: pd.DataFrame, profiles: dict[str, Profile],
                   catalog: Catalog) -> None:
    """Per GPU, in MiB: what the type the job asked for holds (the catalog's), what its
    workload's step was estimated to need before it ran (the profile's, at its batch),
    and what NVML saw it use (the epilog's peak)."""
    asked, estimated = [], []
    for gpus, asked_type, got_type, fp in zip(jobs["gpus"], jobs["asked_gpu_type"],
                                              jobs["gpu_type"], jobs["fingerprint"]):
        gtype = asked_type or got_type if gpus else ""
        t = catalog.types.get(gtype) if gtype else None
        asked.append(t.memory_mib if t else None)
        profile = profiles.get(fp)
        mem = profile.gpu_memory if profile is not None and gpus else None
        estimated.append(mem.at(mem.batch) if mem is not None else None)
    _column(jobs, "gpu_mem_asked_mib", asked)
    _column(jobs, "gpu_mem_est_mib", estimated)


def add_counterfactual(jobs: pd.DataFrame, profiles: dict[str, Profile],
                       shape: NodeShape | None) -> None:
    """From each job's profile: its predicted speed at the allocation it got and at the
    GPU-proportional share of the node (Synergy's baseline), and so the run time the
    proportional allocation would have taken (prop_elapsed_s) on those cores and memory."""
    rows = [_proportional(j, profiles.get(j["fingerprint"]), shape)
            for j in row_dicts(jobs)] if profiles else [(None, None, None)] * len(jobs)
    for i, col in enumerate(("prop_cpus", "prop_mem_mb", "prop_elapsed_s")):
        _column(jobs, col, [r[i] for r in rows])


def _proportional(job: Mapping[Any, Any], profile: Profile | None,
                  shape: NodeShape | None) -> tuple[int | None, int | None, float | None]:
    # A profiling run spent its time measuring, not training: nothing to compare.
    if (profile is None or shape is None or job["profiling"] or not job["elapsed_s"]
            or not job["alloc_cpus"] or not job["alloc_mem_mb"]):
        return None, None, None
    gpus = job["gpus"] or 0
    if shape.gpus and gpus:      # the same share the engine compares against
        cores, mem = max(1, shape.cores * gpus // shape.gpus), shape.mem_mb * gpus // shape.gpus
    else:
        cores, mem = shape.cores, shape.mem_mb
    measured = {p.cores: p.samples_per_s for p in profile.train_points()}
    try:
        got = speed(profile, measured, int(job["alloc_cpus"]), float(job["alloc_mem_mb"]))
        share = speed(profile, measured, cores, mem)
    except (ValueError, ArithmeticError):    # a profile the model cannot evaluate here
        return cores, mem, None
    return cores, mem, job["elapsed_s"] * got / share if got > 0 and share > 0 else None
