"""`synergy report` against the real cluster: after the demo's jobs, every per-job figure
matches sacct's own lines, the files are written, the page renders in headless Chromium
(Debian's), and bad input gets one clear answer."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import signal
import subprocess
import time
from typing import Iterator

import pytest
from PIL import Image

from slurm_synergy import paths
from slurm_synergy.report import output
from slurm_synergy.report.build import build
from tests.shapes import SHAPES, lines_of, node_stats_done, submit, truths

from .conftest import cluster_up, finish, synergy

@pytest.fixture(scope="module")
def demo_jobs(demo) -> Iterator[list[str]]:
    """The demo's jobs (the session's one run, on a store of its own): each workload's
    first job measured while it trained and its second right-sized in place, both left
    to report. The report reads the demo's store while this module runs."""
    os.environ["SYNERGY_PROFILES"] = str(demo.store)
    yield demo.job_ids
    os.environ["SYNERGY_PROFILES"] = ""


def raw_sacct(slurm, ids):
    """sacct's lines, parsed here independently of the report's code."""
    fields = ["JobIDRaw", "AllocCPUS", "AllocTRES", "ElapsedRaw", "State", "ExitCode",
              "TotalCPU", "MaxRSS", "Submit", "Start", "End", "NTasks", "NodeList"]
    out = slurm.run(["sacct", "--parsable2", "--noheader", "--allusers", "--delimiter=|",
                     "--format=" + ",".join(fields), "--jobs=" + ",".join(ids)])
    return [dict(zip(fields, line.split("|"))) for line in out.splitlines()]


def node_stats(box, slurm):
    """The local cluster's folder of the node epilogs' stats."""
    return paths.cluster_folder(box.hook_paths.stats_dir, slurm.cluster_name())


def to_mb(text):
    if text.isdigit():             # sacct writes a zero as "0", with no unit
        return float(text)
    n, unit = float(text[:-1]), text[-1]
    return n * {"K": 1 / 1024, "M": 1, "G": 1024}[unit]


def to_s(text):
    parts = text.split(":")
    return sum(float(p) * 60 ** i for i, p in enumerate(reversed(parts)))


def test_every_figure_agrees_with_sacct_and_the_node_stats(box, slurm, demo_jobs, tmp_path):
    """Each figure against its source, read here apart from the report's code: sacct's
    lines, and the epilog's record of the job's cgroup, whose peak stands for sacct's
    wherever it exists (the report without it shows sacct's)."""
    proc = synergy("report", "--jobs", ",".join(demo_jobs), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    node_stats_done(node_stats(box, slurm), json.loads(proc.stdout)["jobs"])
    proc = synergy("report", "--jobs", ",".join(demo_jobs), "--format", "json")
    doc = json.loads(proc.stdout)
    jobs = {j["raw_id"]: j for j in doc["jobs"]}
    assert sorted(jobs) == sorted(demo_jobs)
    sacct_alone = {j["raw_id"]: j for j in output.records(
        build(slurm, demo_jobs, stats_dir=tmp_path / "no-node-stats").jobs)}
    stats = node_stats(box, slurm)
    lines = raw_sacct(slurm, demo_jobs)
    core_s = 0.0
    for line in (ln for ln in lines if "." not in ln["JobIDRaw"]):
        record = json.loads((stats / f"{line['JobIDRaw']}.{line['NodeList']}.json").read_text())
        j = jobs[line["JobIDRaw"]]
        assert j["usage_from"] == "cgroup", j
        assert j["max_rss_mb"] == record["cgroup_mem_peak_mb"] and j["peak_node"] == record["node"]
        assert j["mem_eff"] == pytest.approx(j["max_rss_mb"] / j["alloc_mem_mb"])
        # The larger of the cgroup's CPU time and sacct's: each can only miss some.
        assert j["total_cpu_s"] == pytest.approx(max(record["cgroup_cpu_s"],
                                                     to_s(line["TotalCPU"])), abs=0.001)
        assert j["cpu_eff"] == pytest.approx(j["total_cpu_s"] / (j["alloc_cpus"] * j["elapsed_s"]))
        j = sacct_alone[line["JobIDRaw"]]
        assert j["usage_from"] == "sacct"
        tres = dict(kv.split("=", 1) for kv in line["AllocTRES"].split(","))
        assert j["alloc_cpus"] == int(line["AllocCPUS"])
        assert j["alloc_mem_mb"] == pytest.approx(to_mb(tres["mem"]))
        assert j["gpus"] == int(tres.get("gres/gpu", 0))
        assert j["elapsed_s"] == float(line["ElapsedRaw"])
        assert j["state"] == line["State"].split()[0] and j["exit_code"] == line["ExitCode"]
        assert j["total_cpu_s"] == pytest.approx(to_s(line["TotalCPU"]), abs=0.001)
        steps = [s for s in lines
                 if s["JobIDRaw"].startswith(line["JobIDRaw"] + ".") and s["MaxRSS"]]
        assert all(s["NTasks"] == "1" for s in steps)   # one task: MaxRSS is the step's
        if any(to_mb(s["MaxRSS"]) == 0 and to_s(s["TotalCPU"]) >= 0.1 for s in steps):
            # A step that did work but was never sampled (a job of a few seconds): its
            # peak is not known, rather than the extern step's 108K.
            assert j["max_rss_mb"] is None and "never sampled" in j["mem_note"]
        else:
            # One node: the steps running at once there (the batch script beside its
            # srun step), at the start of whichever step makes the most. ISO times in
            # one zone compare as text.
            peaks = [sum(to_mb(s["MaxRSS"]) for s in steps
                         if s is first or s["Start"] <= first["Start"] < s["End"])
                     for first in steps]
            assert j["max_rss_mb"] == pytest.approx(max(peaks))
            assert j["mem_eff"] == pytest.approx(max(peaks) / j["alloc_mem_mb"])
        assert j["cpu_eff"] == pytest.approx(j["total_cpu_s"] / (j["alloc_cpus"] * j["elapsed_s"]))
        assert j["wait_s"] == (time.mktime(time.strptime(line["Start"], "%Y-%m-%dT%H:%M:%S"))
                               - time.mktime(time.strptime(line["Submit"], "%Y-%m-%dT%H:%M:%S")))
        core_s += int(line["AllocCPUS"]) * float(line["ElapsedRaw"])
    assert doc["cluster"]["core_hours_alloc"] == pytest.approx(core_s / 3600)
    assert doc["cluster"]["jobs"] == len(demo_jobs)
    # The plugin's part: a job right-sized in place names the measured job whose run
    # decided it, and carries the decision beside what the script asked; the profile
    # gives the counterfactual. Nothing was resubmitted.
    in_place = [j for j in jobs.values() if j["sized_by"]]
    assert in_place, "the demo measured nothing: run it on a fresh profile store"
    for j in in_place:
        assert j["decided_cpus"] == j["alloc_cpus"] and j["asked_cpus"] == 2
        assert jobs[j["sized_by"]]["measured"] and not jobs[j["sized_by"]]["profiling"]
        assert j["prop_elapsed_s"] is not None and j["samples_per_s"] > 0
    assert not any(j["resubmitted_as"] or j["profiled_as"] for j in jobs.values())


def test_the_report_files_render_in_headless_chromium(demo_jobs, tmp_path):
    out = tmp_path / "report"
    proc = synergy("report", "--jobs", ",".join(demo_jobs), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "Workloads" in proc.stdout and "Cluster" in proc.stdout
    names = {p.name for p in out.iterdir()}
    assert {"jobs.csv", "workloads.csv", "report.html", "throughput.png", "allocation.png",
            "energy.png"} <= names
    page = (out / "report.html").read_text()
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(images) == 3
    for data in images:                      # every embedded plot decodes as an image
        assert Image.open(io.BytesIO(base64.b64decode(data))).size[0] > 300
    shot = out / "screenshot.png"
    run = chromium(f"--screenshot={shot}", "--window-size=1400,1800",
                   (out / "report.html").as_uri())
    page_errors = [ln for ln in run.stderr.splitlines()
                   if "CONSOLE" in ln or "Uncaught" in ln or "Failed to load resource" in ln]
    assert page_errors == []
    img = Image.open(shot).convert("L")
    assert img.size == (1400, 1800)
    assert len(img.getcolors(256)) > 10                       # drawn, not blank


def chromium(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("chromium")
    assert exe, "Debian's chromium is missing: make setup installs it"
    run = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu",
                          "--hide-scrollbars", "--log-level=0", "--enable-logging=stderr",
                          *args], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return run


# Measured by the browser after layout, written into the page for --dump-dom to print.
LAYOUT_PROBE = """<script>
const t = document.querySelector("table.jobs"), box = t.parentElement;
const rows = [...t.querySelectorAll("tr")].slice(2).map(r => r.getBoundingClientRect().height);
const font = parseFloat(getComputedStyle(t).fontSize);
const pre = document.createElement("pre");
pre.id = "layout";
pre.textContent = JSON.stringify({page: document.documentElement.scrollWidth,
  window: window.innerWidth, table: t.scrollWidth, box: box.clientWidth,
  overflow: getComputedStyle(box).overflowX, tallest_row: Math.max(...rows), font: font});
document.body.appendChild(pre);
</script>"""


def whole_record(slurm, job_id: str, name: str, timeout: float = 120) -> None:
    """slurmdbd learns of a job cancelled while pending in two steps: for a moment sacct
    shows it CANCELLED as "allocation", asking 0 cores. Wait for the whole record."""
    deadline = time.monotonic() + timeout
    while (rec := finish(slurm, [job_id])[job_id]).name != name:
        assert time.monotonic() < deadline, f"sacct never showed job {job_id} whole: {rec}"
        time.sleep(0.5)


def test_the_page_fits_a_laptop_screen(slurm, demo_jobs, tmp_path):
    """At 1366x768 the page does not scroll sideways: the jobs table scrolls in its own
    box, one line per job. A job cancelled while pending is on it, holding nothing."""
    pending = slurm.run(["sbatch", "--parsable", "--hold", "--job-name=never-ran",
                         f"--output={tmp_path}/never-%j.out", "--wrap", "true"]).strip()
    slurm.cancel([pending])
    whole_record(slurm, pending, "never-ran")
    ids = [*demo_jobs, pending]
    proc = synergy("report", "--jobs", ",".join(ids), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    never = next(j for j in json.loads(proc.stdout)["jobs"] if j["raw_id"] == pending)
    assert (never["start"], never["alloc_cpus"], never["gpus"]) == (None, 0, 0)
    text = synergy("report", "--jobs", ",".join(ids)).stdout
    row = next(line for line in text.splitlines() if line.startswith(pending + " "))
    assert "never-ran" in row and "\u2192 - \u2192 -" in row     # asked -> no decision -> got nothing
    out = tmp_path / "report"
    assert synergy("report", "--jobs", ",".join(ids), "--out", str(out)).returncode == 0
    probe = out / "probe.html"
    probe.write_text((out / "report.html").read_text().replace("</body>", LAYOUT_PROBE + "</body>"))
    dom = chromium("--window-size=1366,768", "--dump-dom", probe.as_uri()).stdout
    layout = json.loads(re.search(r'<pre id="layout">(.*?)</pre>', dom).group(1))
    assert layout["page"] <= layout["window"], layout             # no sideways page scroll
    assert layout["overflow"] == "auto", layout
    assert layout["tallest_row"] < 2.4 * layout["font"], layout   # one line per job
    chromium(f"--screenshot={out / 'laptop.png'}", "--window-size=1366,768",
             (out / "report.html").as_uri())


def test_no_jobs_in_range_is_a_plain_answer():
    proc = synergy("report", "--since", "2001-01-01", "--until", "2001-01-02")
    assert proc.returncode == 0 and proc.stdout.startswith("no jobs in 2001-01-01 to 2001-01-02")
    assert proc.stderr == ""


def test_accounting_down_is_one_clear_error(box, slurm):
    os.kill(box._pid("slurmdbd"), signal.SIGTERM)
    try:
        while box._alive("slurmdbd"):
            time.sleep(0.2)
        proc = synergy("report", "--since", "now-1hours")
        assert proc.returncode == 1
        assert proc.stderr.startswith("synergy: error: ") and "sacct" in proc.stderr
        assert "Traceback" not in proc.stderr and proc.stderr.count("\n") <= 3, proc.stderr
    finally:
        assert cluster_up().returncode == 0


def test_every_job_shape_reads_within_three_points_of_the_truth(box, slurm, tmp_path):
    """Issue 40's shapes, each task's use counted by the kernel (tests/shapes.py): the
    worst node's memory efficiency and the CPU efficiency within 3 points, from the node
    hooks' cgroup readings (the report's own run) and from sacct alone (the same jobs
    without the hooks' stats). sacct rarely samples the short step: a dash and its
    reason, never a 0, or on 22.05 a sample caught partway, not above the truth (later
    releases read it as it ends: a figure held to the truth); the cgroup has its peak."""
    holder, ids = submit(slurm, tmp_path)
    finish(slurm, list(ids.values()))
    proc = synergy("report", "--jobs", ",".join(ids.values()), "--format", "json")
    node_stats_done(node_stats(box, slurm), json.loads(proc.stdout)["jobs"])
    proc = synergy("report", "--jobs", ",".join(ids.values()), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    # The job that trained on one of its two cores is told so, and not to ask for fewer.
    said = [a["advice"] for a in json.loads(proc.stdout)["advice"]
            if a["job_id"] == ids["narrow-step"]]
    assert any(a.startswith("its step 0 ran on 1 of the job's 2 cores") for a in said), said
    assert not any("--cpus-per-task=" in a for a in said), said
    views = {"cgroup": json.loads(proc.stdout)["jobs"],
             "sacct": output.records(build(slurm, list(ids.values()),
                                           stats_dir=tmp_path / "no-node-stats").jobs)}
    truth = truths(holder)
    wrong = []
    for view, jobs in views.items():
        for shape in SHAPES:
            lines = lines_of(jobs, ids[shape.name])
            assert len(lines) == shape.lines, (shape.name, [j["job_id"] for j in lines])
            for job in lines:
                assert job["state"] == "COMPLETED", (shape.name, job)
                assert job["usage_from"] == view, (shape.name, job)
                mem, cpu = truth[job["job_id"]].percent(job["alloc_cpus"], job["elapsed_s"])
                got_cpu = 100 * job["cpu_eff"]
                if abs(got_cpu - cpu) > 3:
                    wrong.append(f"{view}: {job['job_id']} ({shape.name}): CPU {got_cpu:.1f}% "
                                 f"against {cpu:.1f}%")
                # sacct samples every 5 s: a shorter step is seen or not as the node's load
                # has it. Unseen, a dash and its reason, never a 0; 22.05 may catch it
                # partway (CI, 2026-12-07: 35% against about 39% on a loaded machine), a
                # figure above 0 and not above the truth; 24.11 reads a step's usage as
                # it ends: a figure, held to the truth below.
                if view == "sacct" and not shape.sampled and job["mem_eff"] is None:
                    assert "never sampled" in job["mem_note"], job
                    continue
                if view == "sacct" and not shape.sampled and box.release.hosted:
                    assert 0 < 100 * job["mem_eff"] <= mem + 3, (job, mem)
                    continue
                got_mem = None if job["mem_eff"] is None else 100 * job["mem_eff"]
                if got_mem is None or abs(got_mem - mem) > 3:
                    wrong.append(f"{view}: {job['job_id']} ({shape.name}): memory {got_mem} "
                                 f"against {mem:.1f}% ({job['mem_note']})")
    assert wrong == []
