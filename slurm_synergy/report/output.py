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
from slurm_synergy.report.accounting import row_dicts
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


def _peak(j: Any) -> str:
    """The worst node's memory peak; its node where the job had several, `~` where a step
    over several nodes was split evenly (sacct keeps no per-node figure)."""
    if j["max_rss_mb"] is None:
        return "-"
    return ("~" if j["mem_estimated"] else "") + _mb(j["max_rss_mb"]) + \
        ("" if j["one_node"] else f"@{j['peak_node']}")


JOB_HEAD = ["JobID", "Name", "State", "Wait", "Elapsed", "Cores", "used", "CPU%", "Mem",
            "peak", "Mem%", "GPUs", "GPU MiB", "GPU kJ", "kWh", "util%", "limit W",
            "samples/s", "data wait%", "chain", "note"]
_AT = {name: i for i, name in enumerate(JOB_HEAD)}


def _cores_used(j: Any) -> float | None:
    """CPU time over run time: the cores the job kept busy."""
    return j["total_cpu_s"] / j["elapsed_s"] if j["total_cpu_s"] is not None and j["elapsed_s"] \
        else None


def _note(j: Any) -> str:
    return _clean("; ".join(n for n in (j["mem_note"], j["gpu_note"]) if n))


def _job_row(j: Any) -> list[Cell]:
    chain = (f"-> {j['resubmitted_as']}" if j["resubmitted_as"] else
             f"<- {j['profiled_as']}" if j["profiled_as"] else
             f"by {j['sized_by']}" if j["sized_by"] else "")
    energy = j["gpu_energy_j"]
    started = j["start"] is not None
    return [
        j["job_id"], _clean(j["name"])[:22], j["state"], _dur(j["wait_s"]), _dur(j["elapsed_s"]),
        (_n(j["asked_cpus"]), _n(j["decided_cpus"]), _n(j["alloc_cpus"]) if started else "-"),
        _n(_cores_used(j), ".2f"), _n(j["cpu_eff"] and 100 * j["cpu_eff"]),
        (_mb(j["asked_mem_mb"]), _mb(j["decided_mem_mb"]),
         _mb(j["alloc_mem_mb"]) if started else "-"),
        _peak(j), _n(j["mem_eff"] and 100 * j["mem_eff"]),
        (_gpus(j["asked_gpus"], j["asked_gpu_type"]),
         _gpus(j["decided_gpus"], j["decided_gpu_type"]),
         _gpus(j["gpus"], j["gpu_type"]) if started else "-"),
        (_n(j["gpu_mem_asked_mib"]), _n(j["gpu_mem_est_mib"]), _n(j["gpu_mem_peak_mb"])),
        _n(energy and energy / 1000, ".1f"), _n(energy and energy / J_PER_KWH, ".4f"),
        _n(j["gpu_util_pct"]), _n(j["gpu_power_limit_w"]), _n(j["samples_per_s"], ".1f"),
        _n(_scaled(j["data_wait_share"], 100)),
        chain, _note(j)]


def _known(values: Any) -> list[float]:
    return [float(v) for v in values
            if v is not None and not (isinstance(v, float) and math.isnan(v))]


def _span(values: Any, scale: float = 1.0, fmt: str = ".0f") -> str:
    """The tasks' spread, low-high (one value where they agree)."""
    known = [v * scale for v in _known(values)]
    if not known:
        return "-"
    low, high = format(min(known), fmt), format(max(known), fmt)
    return low if low == high else f"{low}-{high}"


def _array_row(tasks: pd.DataFrame) -> list[Cell]:
    """An array's tasks as one line: the first task's request, the tasks' states counted,
    their run times, CPU and memory efficiency as spreads, the worst task's peak, and
    energy summed. --tasks shows them one by one."""
    first = tasks.iloc[0]
    row = _job_row(first)
    states = tasks["state"].value_counts()
    energy = _known(tasks["gpu_energy_j"])
    row[_AT["JobID"]] = f"{first['array_id']}_[{len(tasks)} tasks]"
    row[_AT["State"]] = " ".join(f"{s}x{n}" for s, n in states.items())
    row[_AT["Wait"]] = _dur(max(_known(tasks["wait_s"]), default=None))
    row[_AT["Elapsed"]] = "-".join(dict.fromkeys(
        _dur(f(_known(tasks["elapsed_s"]), default=None)) for f in (min, max)))
    each = row_dicts(tasks)
    row[_AT["used"]] = _span([_cores_used(j) for j in each], fmt=".2f")
    row[_AT["CPU%"]] = _span(tasks["cpu_eff"], 100)
    peaks = [j for j in each if j["max_rss_mb"] is not None]
    row[_AT["peak"]] = _peak(max(peaks, key=lambda j: j["max_rss_mb"])) if peaks else "-"
    row[_AT["Mem%"]] = _span(tasks["mem_eff"], 100)
    row[_AT["GPU kJ"]] = _n(sum(energy) / 1000 if energy else None, ".1f")
    row[_AT["kWh"]] = _n(sum(energy) / J_PER_KWH if energy else None, ".4f")
    row[_AT["chain"]] = ""
    row[_AT["note"]] = "; ".join(dict.fromkeys(n for j in each if (n := _note(j))))
    return row


def job_rows(report: Report, tasks: bool = False, most: int | None = None
             ) -> tuple[list[str], list[list[Cell]], int]:
    """The jobs table, its latest `most` lines (all where None), and how many earlier
    lines were left out; Cores, Mem and GPUs cells are (asked, decided, got). An array's
    tasks are one line unless `tasks`."""
    jobs = report.jobs
    arrays: dict[str, pd.DataFrame] = {} if tasks else {
        str(a): g for a, g in jobs.groupby("array_id", sort=False) if a}
    firsts: dict[Any, str] = {group.index[0]: array for array, group in arrays.items()}
    # A job's position, or an array's id where its first task stands.
    lines: list[int | str] = [firsts.get(label, i) for i, (label, array)
                              in enumerate(zip(jobs.index, jobs["array_id"]))
                              if array not in arrays or label in firsts]
    shown = lines if most is None else lines[-most:]
    rows = [_array_row(arrays[x]) if isinstance(x, str) else _job_row(jobs.iloc[x])
            for x in shown]
    return list(JOB_HEAD), rows, len(lines) - len(shown)


def _joined(rows: list[list[Cell]]) -> list[list[str]]:
    return [[ARROW.join(c) if isinstance(c, tuple) else c for c in row] for row in rows]


def workload_rows(report: Report) -> tuple[list[str], list[list[str]]]:
    """The workloads table's head and rows: jobs, hours, JCT, wait, energy (kWh), and the
    run time against the GPU-proportional share's."""
    head = ["Workload", "Jobs", "GPU-h", "core-h got", "core-h used", "JCT mean", "JCT p95",
            "wait mean", "GPU kWh", "run time / proportional", "--time / run"]
    rows = []
    for _, w in report.workloads.iterrows():
        ratio = (w["run_s_with_profile"] / w["run_s_proportional"]
                 if w["run_s_proportional"] else None)
        rows.append([_clean(w["workload"] + (f" ({w['names']})" if w["workload"][:5] != "name:"
                                             else "")),
                     str(w["jobs"]), _n(w["gpu_hours"], ".3f"), _n(w["core_hours_alloc"], ".3f"),
                     _n(w["core_hours_used"], ".3f"), _dur(w["jct_mean_s"]), _dur(w["jct_p95_s"]),
                     _dur(w["wait_mean_s"]), _n(w["gpu_energy_kwh"], ".4f"), _n(ratio, ".2f"),
                     _n(w["time_asked_over_used"], ".1f")])
    return head, rows


def cluster_lines(report: Report) -> list[str]:
    """The cluster's summary: JCT and wait, GPU- and core-hours, GPU energy (kWh), and what
    the profiles predict at the GPU-proportional share."""
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
    if c["rescued"]:
        jobs = report.jobs
        put_back = jobs[jobs["rescued_lost_s"].notna()]
        users = ", ".join(f"{u} {n}" for u, n in put_back["user"].value_counts().items())
        of = ", ".join(f"{what} {n}" for what, n in put_back["rescued_of"].value_counts().items())
        lines.append(f"{c['rescued']} job(s) ran out at the decided size ({of}) and were "
                     f"put back with what they asked ({_dur(c['rescue_lost_s'])} of runs "
                     f"lost; by user: {users}; per workload: rescued in --format csv|json)")
    if c["run_s_proportional"]:
        lines.append(f"{c['jobs_with_profile']} job(s) with a profile ran {_dur(c['run_s_with_profile'])} "
                     f"in all; at the GPU-proportional share their profiles predict "
                     f"{_dur(c['run_s_proportional'])} "
                     f"({c['run_s_proportional'] / c['run_s_with_profile']:.2f}x) and "
                     f"{c['core_hours_proportional']:.3f} core-hours against "
                     f"{c['core_hours_with_profile']:.3f}")
    return lines


def usage_line(report: Report) -> str:
    """Where the memory peaks and CPU time come from: the node hooks' cgroup readings
    (exact) or sacct's (memory sampled every JobAcctGatherFrequency)."""
    jobs = report.jobs
    read = int((jobs["usage_from"] == "cgroup").sum()) if "usage_from" in jobs else 0
    return (f"peak, Mem%: the node hooks' cgroup readings for {read} of {len(jobs)} job(s) "
            f"(their CPU time where above sacct's), sacct's samples for the rest (usage_from "
            f"in --format csv|json)")


def _more(hidden: int) -> list[str]:
    """A line counting the table's lines left out."""
    return [f"... and {hidden} earlier line(s): every job is in --format csv|json and "
            "--out"] if hidden > 0 else []


def text(report: Report, tasks: bool = False) -> str:
    """The terminal's report: jobs (an array's tasks folded unless `tasks`), workloads,
    the cluster and advice."""
    head, rows, hidden = job_rows(report, tasks, TERMINAL_JOBS)
    parts = [f"slurm-synergy report: {report.period}", "",
             aligned(head, _joined(rows), rule=True), TRIPLE_NOTE, usage_line(report),
             *_more(hidden),
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
    """The frame's rows as JSON-ready dicts: times in ISO form, NaN as None."""
    return [{str(k): _plain(v) for k, v in row.items()} for row in frame.to_dict("records")]


def as_json(report: Report) -> str:
    """The whole report as JSON (--format json): period, jobs, workloads, cluster, advice and
    problems."""
    return json.dumps({"period": report.period, "jobs": records(report.jobs),
                       "workloads": records(report.workloads),
                       "cluster": {k: _plain(v) for k, v in report.cluster.items()},
                       "advice": report.advice, "problems": report.problems}, indent=1)


def _cell(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula is quoted."""
    return "'" + value if isinstance(value, str) and value[:1] in ("=", "+", "-", "@") else value


def as_csv(frame: pd.DataFrame) -> str:
    """The frame as CSV, a cell a spreadsheet would run as a formula quoted."""
    rows = [{k: _cell(v) for k, v in r.items()} for r in records(frame)]
    return pd.DataFrame(rows, columns=list(frame.columns)).to_csv(index=False)


def _png(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def write(report: Report, out: Path, tasks: bool = False) -> list[Path]:
    """jobs.csv, workloads.csv, three PNGs and report.html (which embeds them) in `out`;
    the CSV holds every array task, the page folds them unless `tasks`."""
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
    head, rows, hidden = job_rows(report, tasks, PAGE_JOBS)
    page = env.get_template("report.html.j2").render(
        report=report, jobs=(head, rows), more=_more(hidden),
        triple_note=TRIPLE_NOTE, usage_note=usage_line(report),
        advice=report.advice[-PAGE_JOBS:], workloads=workload_rows(report),
        cluster=cluster_lines(report),
        figures={title: _png(p) for title, p in figures.items()},
        made=datetime.now().isoformat(timespec="seconds"))
    atomic_write_text(out / "report.html", page)
    written.append(out / "report.html")
    return written
