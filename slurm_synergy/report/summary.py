"""Per-workload and per-cluster figures from the per-job rows.

A workload is a fingerprint (jobs without one are grouped by name). JCT is end minus
submit, a profiling chain counted once from its first submit; makespan is the last end
minus the first submit. The proportional columns add up
what the GPU-proportional allocation would have taken, from the jobs' profiles (run time
only: queueing under another allocation is not modelled here).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

J_PER_KWH = 3.6e6


def _num(series: pd.Series) -> pd.Series:
    return pd.to_numeric(series, errors="coerce")


def _ran(jobs: pd.DataFrame) -> pd.Series:
    """Which jobs ran. Cancelled while pending, sacct gives a job Start = End = the cancel
    time and no run time."""
    return ~((jobs["state"] == "CANCELLED") & (_num(jobs["elapsed_s"]).fillna(0) == 0))


def _jct(jobs: pd.DataFrame, ran: pd.Series) -> list[float]:
    """End minus submit. A profiling run and its resubmission are one job to the user:
    counted once, from the profiling run's submit to the resubmission's end."""
    ids = dict(zip(jobs["raw_id"], jobs["submit"]))
    done = jobs[ran]
    out = []
    for submit, end, resubmitted, profiled in zip(done["submit"], done["end"],
                                                  done["resubmitted_as"], done["profiled_as"]):
        if end is None or submit is None or resubmitted in ids:   # counted with its resubmission
            continue
        out.append((end - (ids.get(profiled) or submit)).total_seconds())
    return out


def _figures(jobs: pd.DataFrame) -> dict[str, Any]:
    ran = _ran(jobs)
    jct = _jct(jobs, ran)
    wait = _num(jobs["wait_s"][ran]).dropna()
    elapsed = _num(jobs["elapsed_s"]).fillna(0)
    energy = _num(jobs["gpu_energy_j"])
    prop = _num(jobs["prop_elapsed_s"])
    has_prop = prop.notna()
    starts = [t for t in jobs["submit"] if t is not None]
    ends = [t for t in jobs["end"] if t is not None]
    return {
        "jobs": len(jobs),
        "gpu_hours": float((_num(jobs["gpus"]).fillna(0) * elapsed).sum() / 3600),
        "core_hours_alloc": float((_num(jobs["alloc_cpus"]).fillna(0) * elapsed).sum() / 3600),
        "core_hours_used": float(_num(jobs["total_cpu_s"]).fillna(0).sum() / 3600),
        "makespan_s": (max(ends) - min(starts)).total_seconds() if starts and ends else None,
        "jct_mean_s": float(np.mean(jct)) if jct else None,
        "jct_p50_s": float(np.percentile(jct, 50)) if jct else None,
        "jct_p95_s": float(np.percentile(jct, 95)) if jct else None,
        "wait_mean_s": float(wait.mean()) if len(wait) else None,
        "wait_p95_s": float(np.percentile(wait, 95)) if len(wait) else None,
        "gpu_energy_kwh": float(energy.sum() / J_PER_KWH) if energy.notna().any() else None,
        "jobs_with_profile": int(has_prop.sum()),
        "run_s_with_profile": float(elapsed[has_prop].sum()) if has_prop.any() else None,
        "run_s_proportional": float(prop[has_prop].sum()) if has_prop.any() else None,
        "core_hours_with_profile": float((_num(jobs["alloc_cpus"]) * elapsed)[has_prop].sum()
                                         / 3600) if has_prop.any() else None,
        "core_hours_proportional": float((_num(jobs["prop_cpus"]) * prop)[has_prop].sum()
                                         / 3600) if has_prop.any() else None,
    }


def workloads(jobs: pd.DataFrame) -> pd.DataFrame:
    key = [fp or f"name:{n}" for fp, n in zip(jobs["fingerprint"], jobs["name"])]
    rows = []
    for workload, group in jobs.groupby(pd.Series(key, index=jobs.index), sort=True):
        names = sorted({n for n in group["name"]})
        rows.append({"workload": workload, "names": ", ".join(names[:3]), **_figures(group)})
    return pd.DataFrame(rows)


def cluster(jobs: pd.DataFrame) -> dict[str, Any]:
    return _figures(jobs)
