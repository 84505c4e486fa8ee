"""Per-workload and per-cluster figures from the per-job rows.

A workload is a fingerprint (jobs without one are grouped by name). JCT is end minus
submit, a profiling chain counted once from its first submit; makespan is the last end
minus the first submit. The proportional columns add up
what the GPU-proportional allocation would have taken, from the jobs' profiles (run time
only: queueing under another allocation is not modelled here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

J_PER_KWH = 3.6e6


@dataclass
class _Columns:
    """The columns the figures read, each converted once: numbers as float arrays (NaN
    where there is none), times and ids as lists. A workload's figures then index them,
    rather than slicing the frame (a millisecond a group, and a site has hundreds)."""

    elapsed: np.ndarray      # 0 where there is none
    gpus: np.ndarray
    cpus: np.ndarray
    used_cpu_s: np.ndarray
    wait_s: np.ndarray
    energy_j: np.ndarray
    prop_s: np.ndarray
    prop_cpus: np.ndarray
    limit_s: np.ndarray
    rescue_lost_s: np.ndarray  # NaN where the job was not put back after running out
    completed: np.ndarray    # bool
    ran: np.ndarray          # bool
    raw_id: list[Any]
    submit: list[Any]
    end: list[Any]
    resubmitted_as: list[Any]
    profiled_as: list[Any]

    @classmethod
    def of(cls, jobs: pd.DataFrame) -> "_Columns":
        """The columns of `jobs`, each converted once."""
        def num(name: str) -> np.ndarray:
            """The column `name` as floats, NaN where it holds no number."""
            return pd.to_numeric(jobs[name], errors="coerce").to_numpy(dtype=float)

        elapsed = np.nan_to_num(num("elapsed_s"))
        # Cancelled while pending, sacct gives a job Start = End = the cancel time and no
        # run time: it did not run.
        ran = ~((jobs["state"].to_numpy() == "CANCELLED") & (elapsed == 0))
        return cls(elapsed, num("gpus"), num("alloc_cpus"), num("total_cpu_s"), num("wait_s"),
                   num("gpu_energy_j"), num("prop_elapsed_s"), num("prop_cpus"),
                   num("limit_s"), num("rescued_lost_s"),
                   jobs["state"].to_numpy() == "COMPLETED", ran,
                   *(jobs[c].tolist() for c in ("raw_id", "submit", "end", "resubmitted_as",
                                                "profiled_as")))


def _jct(c: _Columns, rows: np.ndarray) -> list[float]:
    """End minus submit. A profiling run and its resubmission are one job to the user:
    counted once, from the profiling run's submit to the resubmission's end."""
    ids = {c.raw_id[i]: c.submit[i] for i in rows}
    out = []
    for i in rows[c.ran[rows]]:
        submit, end = c.submit[i], c.end[i]
        if end is None or submit is None or c.resubmitted_as[i] in ids:
            continue         # counted with its resubmission
        out.append((end - (ids.get(c.profiled_as[i]) or submit)).total_seconds())
    return out


def _figures(c: _Columns, rows: np.ndarray) -> dict[str, Any]:
    jct = _jct(c, rows)
    wait = c.wait_s[rows[c.ran[rows]]]
    wait = wait[~np.isnan(wait)]
    elapsed, energy, prop = c.elapsed[rows], c.energy_j[rows], c.prop_s[rows]
    has_prop = ~np.isnan(prop)
    starts = [c.submit[i] for i in rows if c.submit[i] is not None]
    ends = [c.end[i] for i in rows if c.end[i] is not None]
    profiled = bool(has_prop.any())
    # --time over the run, for the completed jobs that ran at least a second
    done = rows[c.completed[rows] & (c.elapsed[rows] >= 1) & ~np.isnan(c.limit_s[rows])]
    asked_over_used = c.limit_s[done] / c.elapsed[done]
    return {
        "jobs": len(rows),
        "gpu_hours": float(np.nansum(c.gpus[rows] * elapsed) / 3600),
        "core_hours_alloc": float(np.nansum(c.cpus[rows] * elapsed) / 3600),
        "core_hours_used": float(np.nansum(c.used_cpu_s[rows]) / 3600),
        "makespan_s": (max(ends) - min(starts)).total_seconds() if starts and ends else None,
        "jct_mean_s": float(np.mean(jct)) if jct else None,
        "jct_p50_s": float(np.percentile(jct, 50)) if jct else None,
        "jct_p95_s": float(np.percentile(jct, 95)) if jct else None,
        "wait_mean_s": float(wait.mean()) if len(wait) else None,
        "wait_p95_s": float(np.percentile(wait, 95)) if len(wait) else None,
        "time_asked_over_used": float(np.median(asked_over_used)) if len(done) else None,
        "time_asked_s": float(np.median(c.limit_s[done])) if len(done) else None,
        "time_used_max_s": float(c.elapsed[done].max()) if len(done) else None,
        "completed": int(len(done)),
        # Jobs that ran out of memory at the decided size and were put back, and the runs
        # they lost (decisions/rescue.py).
        "rescued": int((~np.isnan(c.rescue_lost_s[rows])).sum()),
        "rescue_lost_s": float(np.nansum(c.rescue_lost_s[rows])),
        "gpu_energy_kwh": float(np.nansum(energy) / J_PER_KWH)
        if (~np.isnan(energy)).any() else None,
        "jobs_with_profile": int(has_prop.sum()),
        "run_s_with_profile": float(elapsed[has_prop].sum()) if profiled else None,
        "run_s_proportional": float(prop[has_prop].sum()) if profiled else None,
        "core_hours_with_profile": float(np.nansum((c.cpus[rows] * elapsed)[has_prop]) / 3600)
        if profiled else None,
        "core_hours_proportional": float(np.nansum((c.prop_cpus[rows] * prop)[has_prop])
                                         / 3600) if profiled else None,
    }


def workloads(jobs: pd.DataFrame) -> pd.DataFrame:
    """One row per workload (fingerprint, else name:<job name>): its job names and figures."""
    columns = _Columns.of(jobs)
    groups: dict[str, list[int]] = {}
    names = jobs["name"].tolist()
    for i, (fp, name) in enumerate(zip(jobs["fingerprint"], names)):
        groups.setdefault(fp or f"name:{name}", []).append(i)
    rows = []
    for workload in sorted(groups):
        group = np.array(groups[workload])
        shown = sorted({names[i] for i in group})
        rows.append({"workload": workload, "names": ", ".join(shown[:3]),
                     **_figures(columns, group)})
    return pd.DataFrame(rows)


def cluster(jobs: pd.DataFrame) -> dict[str, Any]:
    """The figures over every job of the report."""
    return _figures(_Columns.of(jobs), np.arange(len(jobs)))
