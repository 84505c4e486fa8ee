"""The report as a terminal table, CSV, JSON, or a self-contained HTML page with plots."""

from __future__ import annotations

import base64
import json
import math
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from slurm_synergy import paths
from slurm_synergy.columns import aligned
from slurm_synergy.fileio import atomic_write_text
from slurm_synergy.report import plots
from slurm_synergy.report.build import Report
from slurm_synergy.report.summary import J_PER_KWH

# Rows shown in full; the rest are counted, and all are in jobs.csv and the JSON.
TERMINAL_JOBS = 100
PAGE_JOBS = 1000


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _clean(text: Any) -> str:
    """Other users' job names and comments: no terminal control sequences."""
    return _CONTROL.sub("?", str(text))


def _n(value: Any, fmt: str = ".0f", none: str = "-") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return none
    return format(value, fmt)


def _scaled(value: Any, factor: float) -> Any:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) \
        else value * factor


def _dur(s: Any) -> str:
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "-"
    s = int(round(s))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _mb(value: Any) -> str:
    return "-" if value is None else (f"{value / 1024:.1f}G" if value >= 1024 else f"{value:.0f}M")


# Cores, memory and GPUs read left to right: what the script asked, what the plugin
# decided, what Slurm gave. The terminal joins the three; the page has a column each.
ARROW = " \u2192 "
TRIPLE_NOTE = (f"Cores, Mem, GPUs: asked{ARROW}decided{ARROW}got "
               "(- where no decision was made); GPU MiB per GPU: the asked type "
               f"holds{ARROW}the step was estimated to need{ARROW}NVML saw used")
Cell = str | tuple[str, str, str]


def _gpus(count: Any, gtype: Any = "") -> str:
    return "-" if count is None else f"{count}{':' + gtype if gtype else ''}"


def job_rows(report: Report, most: int | None = None) -> tuple[list[str], list[list[Cell]]]:
    """The jobs table; Cores, Mem and GPUs cells are (asked, decided, got)."""
    head = ["JobID", "Name", "State", "Wait", "Elapsed", "Cores", "used", "CPU%", "Mem",
            "peak", "Mem%", "GPUs", "GPU MiB", "GPU kJ", "kWh", "util%", "limit W", "samples/s",
            "data wait%", "chain", "GPU note"]
    rows: list[list[Cell]] = []
    shown = report.jobs if most is None else report.jobs.tail(most)   # the latest
    for _, j in shown.iterrows():
        used = j["total_cpu_s"] / j["elapsed_s"] if j["total_cpu_s"] is not None and j["elapsed_s"] else None
        chain = (f"-> {j['resubmitted_as']}" if j["resubmitted_as"] else
                 f"<- {j['profiled_as']}" if j["profiled_as"] else
                 f"by {j['sized_by']}" if j["sized_by"] else "")
        energy = j["gpu_energy_j"]
        started = j["start"] is not None
        rows.append([
            j["job_id"], _clean(j["name"])[:22], j["state"], _dur(j["wait_s"]), _dur(j["elapsed_s"]),
            (_n(j["asked_cpus"]), _n(j["decided_cpus"]), _n(j["alloc_cpus"]) if started else "-"),
            _n(used, ".2f"), _n(j["cpu_eff"] and 100 * j["cpu_eff"]),
            (_mb(j["asked_mem_mb"]), _mb(j["decided_mem_mb"]),
             _mb(j["alloc_mem_mb"]) if started else "-"),
            _mb(j["max_rss_mb"]), _n(j["mem_eff"] and 100 * j["mem_eff"]),
            (_gpus(j["asked_gpus"], j["asked_gpu_type"]),
             _gpus(j["decided_gpus"], j["decided_gpu_type"]),
             _gpus(j["gpus"], j["gpu_type"]) if started else "-"),
            (_n(j["gpu_mem_asked_mib"]), _n(j["gpu_mem_est_mib"]), _n(j["gpu_mem_peak_mb"])),
            _n(energy and energy / 1000, ".1f"), _n(energy and energy / J_PER_KWH, ".4f"),
            _n(j["gpu_util_pct"]), _n(j["gpu_power_limit_w"]), _n(j["samples_per_s"], ".1f"),
            _n(_scaled(j["data_wait_share"], 100)),
            chain, _clean(j["gpu_note"])])
    return head, rows


def _joined(rows: list[list[Cell]]) -> list[list[str]]:
    return [[ARROW.join(c) if isinstance(c, tuple) else c for c in row] for row in rows]


def workload_rows(report: Report) -> tuple[list[str], list[list[str]]]:
    head = ["Workload", "Jobs", "GPU-h", "core-h got", "core-h used", "JCT mean", "JCT p95",
            "wait mean", "GPU kWh", "run time / proportional"]
    rows = []
    for _, w in report.workloads.iterrows():
        ratio = (w["run_s_with_profile"] / w["run_s_proportional"]
                 if w["run_s_proportional"] else None)
        rows.append([_clean(w["workload"] + (f" ({w['names']})" if w["workload"][:5] != "name:"
                                             else "")),
                     str(w["jobs"]), _n(w["gpu_hours"], ".3f"), _n(w["core_hours_alloc"], ".3f"),
                     _n(w["core_hours_used"], ".3f"), _dur(w["jct_mean_s"]), _dur(w["jct_p95_s"]),
                     _dur(w["wait_mean_s"]), _n(w["gpu_energy_kwh"], ".4f"), _n(ratio, ".2f")])
    return head, rows


def cluster_lines(report: Report) -> list[str]:
    c = report.cluster
    lines = [
        f"{c['jobs']} jobs, makespan {_dur(c['makespan_s'])}; JCT mean {_dur(c['jct_mean_s'])}, "
        f"p50 {_dur(c['jct_p50_s'])}, p95 {_dur(c['jct_p95_s'])}; wait mean "
        f"{_dur(c['wait_mean_s'])}, p95 {_dur(c['wait_p95_s'])}",
        f"{c['gpu_hours']:.3f} GPU-hours; {c['core_hours_alloc']:.3f} core-hours allocated, "
        f"{c['core_hours_used']:.3f} used"
        + (f" ({100 * c['core_hours_used'] / c['core_hours_alloc']:.0f}%)"
           if c["core_hours_alloc"] else "")
        + ("; GPU energy not measured" if c["gpu_energy_kwh"] is None
           else f"; GPU energy {c['gpu_energy_kwh']:.4f} kWh"),
    ]
    if c["run_s_proportional"]:
        lines.append(f"{c['jobs_with_profile']} job(s) with a profile ran {_dur(c['run_s_with_profile'])} "
                     f"in all; at the GPU-proportional share their profiles predict "
                     f"{_dur(c['run_s_proportional'])} "
                     f"({c['run_s_proportional'] / c['run_s_with_profile']:.2f}x) and "
                     f"{c['core_hours_proportional']:.3f} core-hours against "
                     f"{c['core_hours_with_profile']:.3f}")
    return lines


def _more(report: Report, most: int) -> list[str]:
    hidden = len(report.jobs) - most
    return [f"... and {hidden} earlier job(s): all are in --format csv|json and --out"] \
        if hidden > 0 else []


def text(report: Report) -> str:
    head, rows = job_rows(report, TERMINAL_JOBS)
    parts = [f"slurm-synergy report: {report.period}", "",
             aligned(head, _joined(rows), rule=True), TRIPLE_NOTE, *_more(report, TERMINAL_JOBS),
             "", "Workloads", aligned(*workload_rows(report), rule=True), "", "Cluster",
             *cluster_lines(report)]
    if report.advice:
        parts += ["", "Advice", *(_clean(f"{a['job_id']} {a['name']}: {a['advice']}")
                                  for a in report.advice[-TERMINAL_JOBS:])]
    return "\n".join(parts)


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{str(k): _plain(v) for k, v in row.items()} for row in frame.to_dict("records")]


def as_json(report: Report) -> str:
    return json.dumps({"period": report.period, "jobs": records(report.jobs),
                       "workloads": records(report.workloads),
                       "cluster": {k: _plain(v) for k, v in report.cluster.items()},
                       "advice": report.advice, "problems": report.problems}, indent=1)


def _cell(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula is quoted."""
    return "'" + value if isinstance(value, str) and value[:1] in ("=", "+", "-", "@") else value


def as_csv(frame: pd.DataFrame) -> str:
    rows = [{k: _cell(v) for k, v in r.items()} for r in records(frame)]
    return pd.DataFrame(rows, columns=list(frame.columns)).to_csv(index=False)


def _png(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def write(report: Report, out: Path) -> list[Path]:
    """jobs.csv, workloads.csv, three PNGs and report.html (which embeds them) in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "jobs.csv", out / "workloads.csv"]
    atomic_write_text(written[0], as_csv(report.jobs))
    atomic_write_text(written[1], as_csv(report.workloads))
    figures = {
        "Throughput against cores": plots.throughput(report.jobs, report.profiles,
                                                     out / "throughput.png"),
        "Allocation over time": plots.allocation(report.jobs, out / "allocation.png"),
        "GPU energy": plots.energy(report.jobs, out / "energy.png"),
    }
    written += figures.values()
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(paths.TEMPLATES)),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    page = env.get_template("report.html.j2").render(
        report=report, jobs=job_rows(report, PAGE_JOBS), more=_more(report, PAGE_JOBS),
        triple_note=TRIPLE_NOTE,
        advice=report.advice[-PAGE_JOBS:], workloads=workload_rows(report),
        cluster=cluster_lines(report),
        figures={title: _png(p) for title, p in figures.items()},
        made=datetime.now().isoformat(timespec="seconds"))
    atomic_write_text(out / "report.html", page)
    written.append(out / "report.html")
    return written
