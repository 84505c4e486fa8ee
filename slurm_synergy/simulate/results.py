"""What a simulation shows: JCT (mean, p50, p99), makespan, GPU-hours, utilisation, as a
table, CSV and JSON, one row per policy pair and flow when several run on one trace side
by side. JCT counts from a job's first arrival, a resubmitted job's second wait included."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from slurm_synergy.model.errors import SynergyError
from slurm_synergy.simulate.order import JobState
from slurm_synergy.simulate.simulator import Outcome


@dataclass(frozen=True)
class Summary:
    label: str
    order: str
    alloc: str
    speed: str
    flow: str
    jobs: int
    mean_jct_h: float
    p50_jct_h: float
    p99_jct_h: float
    makespan_h: float
    mean_wait_h: float
    gpu_h: float             # GPU-hours the jobs held, profiling that trained nothing included
    gpu_util: float          # GPU-hours held over GPU-hours the cluster had, to makespan
    cpu_util: float          # core-hours allocated over core-hours the cluster had
    mean_speed: float        # per job-round, 1.0 = the GPU-proportional share
    rounds: int
    alloc_ms_mean: float
    alloc_ms_max: float
    wall_s: float
    window: str = ""         # the measured job ids ("" = every job)


Window = tuple[int, int]       # the measured job ids, both ends included


def measured(jobs: Sequence[JobState], window: Window | None) -> list[JobState]:
    """The jobs a figure counts: those whose (numeric) id lies in the window, as Synergy
    and its paper measure a dynamic trace past its warm-up; all without one."""
    if window is None:
        return list(jobs)
    lo, hi = window
    return [j for j in jobs if j.job_id.isdigit() and lo <= int(j.job_id) <= hi]


def summarise(out: Outcome, window: Window | None = None) -> Summary:
    """JCT, wait, makespan and GPU-hours over the window's jobs (makespan: from the first
    of them to arrive to the last to finish); utilisation and speed over the whole run."""
    jobs = measured(out.jobs, window)
    if not jobs:
        raise SynergyError(f"no job of the trace has an id in the window {window[0]}-"
                           f"{window[1]}" if window else "the trace has no jobs")
    jct = np.array([j.finished_s - j.arrival_s for j in jobs]) / 3600
    wait = np.array([j.started_s - j.arrival_s for j in jobs]) / 3600
    window_span_s = max(j.finished_s for j in jobs) - min(j.arrival_s for j in jobs)
    span_s = max(j.finished_s for j in out.jobs) - min(j.arrival_s for j in out.jobs)
    R = out.cluster.round_s
    held = sum(out.rounds.gpus) * R
    cores = sum(out.rounds.cpus) * R
    runs = sum(out.rounds.running)
    alloc = np.array(out.rounds.alloc_s) * 1000
    return Summary(
        out.setup.label, out.setup.order, out.setup.alloc, out.setup.speed, out.setup.flow,
        len(jobs), float(jct.mean()), float(np.percentile(jct, 50)),
        float(np.percentile(jct, 99)), window_span_s / 3600, float(wait.mean()),
        sum(j.attained_s for j in jobs) / 3600,
        held / (out.cluster.gpus * span_s), cores / (out.cluster.cpus * span_s),
        sum(j.speed_sum for j in out.jobs) / runs if runs else 0.0, len(out.rounds.start_s),
        float(alloc.mean()), float(alloc.max()), out.wall_s,
        f"{window[0]}-{window[1]}" if window else "")


_COLUMNS = (("policy", "label", "{}"), ("JCT mean h", "mean_jct_h", "{:.2f}"),
            ("p50 h", "p50_jct_h", "{:.2f}"), ("p99 h", "p99_jct_h", "{:.2f}"),
            ("makespan h", "makespan_h", "{:.2f}"), ("wait h", "mean_wait_h", "{:.2f}"),
            ("GPU h", "gpu_h", "{:.1f}"),
            ("GPU util", "gpu_util", "{:.0%}"), ("CPU util", "cpu_util", "{:.0%}"),
            ("speed", "mean_speed", "{:.2f}"), ("alloc ms/round", "alloc_ms_mean", "{:.2f}"))


def summary_table(rows: Sequence[Summary], baseline: Summary | None = None) -> str:
    """Aligned text; with a baseline, each JCT and makespan is also given against it."""
    head = [c[0] for c in _COLUMNS] + (["vs " + baseline.label] if baseline else [])
    body = []
    for r in rows:
        cells = [fmt.format(getattr(r, attr)) for _, attr, fmt in _COLUMNS]
        if baseline:
            cells.append(f"JCT {baseline.mean_jct_h / r.mean_jct_h:.2f}x, "
                         f"makespan {baseline.makespan_h / r.makespan_h:.2f}x")
        body.append(cells)
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(line, widths)))
             for line in [head] + body]
    return "\n".join(lines)


def write(rows: Sequence[Summary], outcomes: Sequence[Outcome], out: Path) -> list[Path]:
    """summary.csv, summary.json and per-job jobs.csv (one row per job and policy)."""
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame([r.__dict__ for r in rows])
    frame.to_csv(out / "summary.csv", index=False)
    (out / "summary.json").write_text(json.dumps([r.__dict__ for r in rows], indent=2) + "\n")
    per_job = pd.DataFrame([
        {"policy": o.setup.label, "speed_model": o.setup.speed, "job_id": j.job_id,
         "model": j.model, "gpus": j.gpus, "arrival_s": j.arrival_s,
         "start_s": j.first_start_s, "end_s": j.finished_s, "jct_s": j.finished_s - j.arrival_s}
        for o in outcomes for j in o.jobs])
    per_job.to_csv(out / "jobs.csv", index=False)
    return [out / "summary.csv", out / "summary.json", out / "jobs.csv"]
