"""The report's pure parts: sacct lines folded into jobs, efficiencies, the per-workload
and cluster figures, the counterfactual, advice, and the files it writes."""

import json
from datetime import datetime

import pandas as pd
import pytest

from slurm_synergy.model import comment as comment_format
from slurm_synergy.model.engine import NodeShape
from slurm_synergy.model.units import duration_s, mem_mb
from slurm_synergy import paths
from slurm_synergy.report import accounting, advice, enrich, output, summary
from slurm_synergy.report.build import Report
from tests.helpers import profile

FP = "0123456789abcdef"


def line(job, name="train", state="COMPLETED", cpus="2", tres="billing=2,cpu=2,mem=3G,node=1",
         total="00:50.000", rss="", elapsed="50", submit="2026-11-22T10:00:00",
         start="2026-11-22T10:00:10", end="2026-11-22T10:01:00", comment="", req_mem="3G",
         req_tres=""):
    return {"JobIDRaw": job, "JobID": job, "JobName": name, "User": "ann", "Partition": "gpu",
            "State": state, "ExitCode": "0:0", "Submit": submit, "Start": start, "End": end,
            "ElapsedRaw": elapsed, "AllocCPUS": cpus, "ReqCPUS": cpus, "ReqMem": req_mem,
            "AllocTRES": tres, "ReqTRES": req_tres, "TotalCPU": total, "MaxRSS": rss, "NodeList": "n1",
            "Comment": comment}


def test_sizes_and_durations_as_sacct_writes_them():
    assert mem_mb("21304K") == pytest.approx(20.8046875)
    assert mem_mb("3G") == 3072 and mem_mb("100M") == 100
    assert mem_mb("1.5G") == 1536 and mem_mb("4000Mn") == 4000
    assert mem_mb("") is None
    assert duration_s("00:50.363") == pytest.approx(50.363)
    assert duration_s("01:02:03") == 3723
    assert duration_s("2-01:00:00") == 2 * 86400 + 3600
    assert duration_s("garbage") is None


def test_steps_fold_into_their_job():
    rows = [line("10", comment=f"synergy:fp={FP} asked=c4,m8192,g1 decision=c2,m1024,g1,w1,p250",
                 tres="billing=2,cpu=2,gres/gpu:a100=1,gres/gpu=1,mem=1G,node=1"),
            line("10.batch", rss="21304K"), line("10.extern", rss="104K"),
            # One srun step after the other, beside the batch script and the extern step.
            line("10.0", rss="294700K", start="2026-11-22T10:00:11", end="2026-11-22T10:00:30"),
            line("10.1", rss="281592K", start="2026-11-22T10:00:30", end="2026-11-22T10:00:59"),
            line("11", state="RUNNING", end="Unknown", total="00:00:00", elapsed="5")]
    jobs = accounting.jobs_frame(rows)
    assert list(jobs["job_id"]) == ["10", "11"]
    j = jobs.iloc[0]
    # The node holds the batch script, the extern step and the larger srun step at once.
    peak_kib = 21304 + 104 + 294700
    assert j["max_rss_mb"] == pytest.approx(peak_kib / 1024) and j["peak_node"] == "n1"
    assert j["total_cpu_s"] == pytest.approx(50.0)                 # the job line's sum
    assert j["cpu_eff"] == pytest.approx(0.5)                      # 50 s over 2 cores x 50 s
    assert j["mem_eff"] == pytest.approx(peak_kib / 1024 / 1024)
    assert (j["gpus"], j["gpu_type"], j["wait_s"]) == (1, "a100", 10.0)
    assert (j["asked_cpus"], j["asked_mem_mb"], j["asked_gpus"]) == (4, 8192, 1)
    assert (j["decided_cpus"], j["decided_mem_mb"], j["decided_power_w"]) == (2, 1024, 250)
    assert j["fingerprint"] == FP
    r = jobs.iloc[1]
    assert r["end"] is None and r["max_rss_mb"] is None and r["decided_cpus"] is None
    assert r["asked_cpus"] == 2 and r["asked_mem_mb"] == 3072     # no marks: sacct's request


def test_a_step_that_ran_with_no_memory_reading_leaves_the_peak_unknown():
    # As sacct shows a heterogeneous job's second component: its step used 5.8 s of CPU
    # and reads MaxRSS 0. A peak of the extern step's 112K would advise a tiny --mem.
    rows = [line("8", total="00:05.756"), line("8.extern", rss="112K", total="00:00.001"),
            line("8.0", rss="0", total="00:05.755")]
    j = accounting.jobs_frame(rows).iloc[0]
    assert j["max_rss_mb"] is None and j["mem_eff"] is None
    # A step that did nothing may well read 0.
    idle = accounting.jobs_frame([line("9"), line("9.0", rss="0", total="00:00:00"),
                                  line("9.1", rss="2048K")]).iloc[0]
    assert idle["max_rss_mb"] == 2.0


def test_a_job_cancelled_while_pending_held_nothing():
    # As sacct shows it: a Start equal to its End, AllocCPUS 1, no AllocTRES.
    jobs = accounting.jobs_frame([line("20", state="CANCELLED by 0", cpus="1", tres="",
                                       req_tres="billing=1,cpu=1,gres/gpu=2,mem=1G,node=1",
                                       elapsed="0", start="2026-11-22T10:00:30",
                                       end="2026-11-22T10:00:30")])
    j = jobs.iloc[0]
    assert (j["start"], j["alloc_cpus"], j["wait_s"], j["gpus"]) == (None, 0, None, 0)
    assert (j["asked_cpus"], j["asked_gpus"]) == (1, 2)      # what it asked, from sacct


def test_the_allocation_plot_never_goes_below_zero():
    from slurm_synergy.report.plots import allocation_steps
    jobs = accounting.jobs_frame([
        line("1", tres="cpu=2,gres/gpu=1,mem=1G", start="2026-11-22T10:00:00",
             end="2026-11-22T10:01:00"),
        line("2", state="CANCELLED by 0", cpus="1", tres="", elapsed="0",
             start="2026-11-22T10:00:30", end="2026-11-22T10:00:30"),
        # Ended the second it started (a job that failed at once).
        line("3", state="FAILED", tres="cpu=4,gres/gpu=2,mem=1G", elapsed="0",
             start="2026-11-22T10:00:40", end="2026-11-22T10:00:40"),
        line("4", cpus="1", tres="cpu=1,gres/gpu=1,mem=1G", start="2026-11-22T10:01:00",
             end="2026-11-22T10:02:00")])
    times, cores, gpus = allocation_steps(jobs)
    assert min(cores) == 0 and min(gpus) == 0
    # Job 1 ends as job 4 starts: one step, not a dip to zero.
    assert cores == [2, 1, 0] and gpus == [1, 1, 0] and len(times) == 3


def frame(*rows) -> pd.DataFrame:
    jobs = accounting.jobs_frame(list(rows))
    for col in enrich.GPU_COLUMNS[:-1] + ("samples_per_s", "data_wait_share",
                                          "resubmitted_as", "profiled_as",
                                          "prop_cpus", "prop_mem_mb", "prop_elapsed_s",
                                          "gpu_mem_asked_mib", "gpu_mem_est_mib"):
        enrich._column(jobs, col, [None] * len(jobs))
    enrich._column(jobs, "gpu_note", [""] * len(jobs))
    return jobs


def test_workload_and_cluster_figures():
    jobs = frame(line("1", comment=f"synergy:fp={FP}", elapsed="3600", total="01:00:00",
                      tres="cpu=2,gres/gpu=1,mem=1G", submit="2026-11-22T10:00:00",
                      start="2026-11-22T10:00:00", end="2026-11-22T11:00:00"),
                 line("2", comment=f"synergy:fp={FP}", elapsed="1800", total="00:15:00", cpus="4",
                      tres="cpu=4,gres/gpu=2,mem=1G", submit="2026-11-22T10:00:00",
                      start="2026-11-22T11:00:00", end="2026-11-22T11:30:00"),
                 line("3", name="other", elapsed="0", start="Unknown", end="Unknown"))
    enrich._column(jobs, "gpu_energy_j", [3.6e6, 1.8e6, None])
    c = summary.cluster(jobs)
    assert c["jobs"] == 3 and c["gpu_hours"] == pytest.approx(1 + 1.0)
    assert c["core_hours_alloc"] == pytest.approx(2 + 2)
    assert c["core_hours_used"] == pytest.approx(1.25 + 50 / 3600)
    assert c["makespan_s"] == 5400 and c["jct_mean_s"] == pytest.approx((3600 + 5400) / 2)
    assert c["wait_mean_s"] == pytest.approx(1800) and c["gpu_energy_kwh"] == pytest.approx(1.5)
    w = summary.workloads(jobs).set_index("workload")
    assert w.loc[FP, "jobs"] == 2 and w.loc["name:other", "jobs"] == 1


def test_the_counterfactual_uses_the_profile_at_the_proportional_share():
    jobs = frame(line("1", comment=f"synergy:fp={FP}", cpus="2", elapsed="100",
                      tres="cpu=2,gres/gpu=1,mem=4G"))
    p = profile({2: 200.0, 1: 100.0})
    enrich.add_counterfactual(jobs, {FP: p}, NodeShape(cores=4, mem_mb=16000, gpus=4))
    j = jobs.iloc[0]
    assert (j["prop_cpus"], j["prop_mem_mb"]) == (1, 4000)
    assert j["prop_elapsed_s"] == pytest.approx(200.0)     # half the speed at one core
    c = summary.cluster(jobs)
    assert c["run_s_proportional"] == pytest.approx(200.0) and c["run_s_with_profile"] == 100
    assert c["core_hours_proportional"] == pytest.approx(200 / 3600)   # 1 core x 200 s
    assert c["core_hours_with_profile"] == pytest.approx(200 / 3600)   # 2 cores x 100 s
    enrich.add_counterfactual(jobs, {}, NodeShape(4, 16000, 4))
    assert jobs.iloc[0]["prop_elapsed_s"] is None          # no profile: no claim


def test_advice_in_jobstats_spirit():
    jobs = frame(line("1", tres="cpu=8,mem=64G", cpus="8", total="00:10:00", elapsed="600"),
                 line("1.batch", rss="1000M"),
                 line("2", state="OUT_OF_MEMORY", tres="cpu=1,mem=2G", cpus="1"),
                 line("3", comment=f"synergy:fp={FP} profile=1"), line("3.0", rss="1000M"),
                 line("4", tres="cpu=1,mem=3G", cpus="1", elapsed="600", total="00:10:00"),
                 line("4.batch", rss="2900M"))
    text = {a["job_id"]: a["advice"] for a in advice.lines(jobs)}
    assert "asked 64G, used 1000M: --mem=1250M is enough" in [a["advice"] for a in advice.lines(jobs)
                                                              if a["job_id"] == "1"]
    assert any("kept 1.0 of 8 cores busy: --cpus-per-task=1" in a["advice"]
               for a in advice.lines(jobs))
    assert "ran out of memory at 2048M" in text["2"]
    assert "3" not in text and "4" not in text     # a profiling run; a job sized right


def test_a_step_on_fewer_cores_than_its_job_is_the_advice_not_fewer_cores():
    # srun without -c in a job of 4 cores: the step that trained had one of them.
    jobs = frame(line("5", cpus="4", tres="cpu=4,mem=3G", elapsed="600", total="09:50.000"),
                 line("5.batch", cpus="4", rss="10M", elapsed="600"),
                 line("5.0", cpus="1", rss="500M", elapsed="590", total="09:50.000"))
    text = [a["advice"] for a in advice.lines(jobs)]
    assert any(t.startswith("its step 0 ran on 1 of the job's 4 cores") and
               "SRUN_CPUS_PER_TASK" in t for t in text), text
    assert not any("--cpus-per-task=" in t for t in text), text


def report_of(jobs: pd.DataFrame) -> Report:
    return Report("test", jobs, summary.workloads(jobs), summary.cluster(jobs),
                  advice.lines(jobs), {FP: profile({2: 200.0, 1: 100.0})}, ["a problem"])


def test_the_files_a_report_writes(tmp_path):
    jobs = frame(line("1", comment=f"synergy:fp={FP} decision=c2,m1024,g1,w1"),
                 line("2", name="<script>x</script>"))
    enrich._column(jobs, "gpu_energy_j", [5000.0, None])
    enrich._column(jobs, "gpu_power_limit_w", [250.0, None])
    rep = report_of(jobs)
    written = output.write(rep, tmp_path)
    assert {p.name for p in written} == {"jobs.csv", "workloads.csv", "throughput.png",
                                         "allocation.png", "energy.png", "report.html"}
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in written if p.suffix == ".png")
    page = (tmp_path / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 3 and "<script>x" not in page
    assert pd.read_csv(tmp_path / "jobs.csv")["job_id"].tolist() == [1, 2]
    doc = json.loads(output.as_json(rep))
    assert doc["jobs"][0]["submit"] == "2026-11-22T10:00:00" and doc["problems"] == ["a problem"]
    assert "Workloads" in output.text(rep) and "Cluster" in output.text(rep)


def test_an_array_is_one_line_with_its_tasks_spread_unless_tasks_are_asked_for():
    def task(i, state, peak, cpu):
        row = line(f"5{i}", state=state, total=cpu)
        return [{**row, "JobID": f"50_{i}"}, line(f"5{i}.batch", rss=peak)]
    rows = [*task(1, "COMPLETED", "300M", "00:40.000"), *task(2, "COMPLETED", "600M", "00:20.000"),
            *task(3, "FAILED", "100M", "00:30.000"), line("60", name="alone")]
    jobs = frame(*rows)
    assert jobs["array_id"].tolist() == ["50", "50", "50", ""]
    head, folded, hidden = output.job_rows(report_of(jobs))
    assert len(folded) == 2 and hidden == 0
    assert output.job_rows(report_of(jobs), most=1)[1:] == ([folded[1]], 1)
    array = dict(zip(head, folded[0]))
    assert array["JobID"] == "50_[3 tasks]" and array["State"] == "COMPLETEDx2 FAILEDx1"
    # 300, 600 and 100 MB of a 3 GB allocation; 20-40 s of CPU over 2 cores x 50 s.
    assert array["peak"] == "600M" and array["Mem%"] == "3-20" and array["CPU%"] == "20-40"
    assert len(output.job_rows(report_of(jobs), tasks=True)[1]) == 4
    assert "50_[3 tasks]" in output.text(report_of(jobs))
    assert "50_2" in output.text(report_of(jobs), tasks=True)


def test_thousands_of_jobs_fold_in_one_pass():
    rows = []
    for i in range(3000):
        rows += [line(str(i), comment=f"synergy:fp={FP}"), line(f"{i}.batch", rss="100M")]
    jobs = accounting.jobs_frame(rows)
    assert len(jobs) == 3000 and jobs["max_rss_mb"].eq(100).all()
    assert isinstance(jobs.iloc[0]["submit"], datetime)


def test_untrusted_marks_and_names_cannot_break_the_report(tmp_path):
    """Comments and names are the users': out-of-range marks are unknown, control
    characters do not reach the terminal, formulas do not reach a spreadsheet."""
    jobs = frame(line("1", name="=cmd|' /C calc'!A0", comment=f"synergy:fp={FP} "
                      "asked=c65534,m-,g1 decision=c0,m99999999999999,g1,w0,p0"),
                 line("2", name="\x1b[2Jgone"))
    j = jobs.iloc[0]
    assert (j["asked_cpus"], j["decided_cpus"], j["decided_mem_mb"]) == (None, None, None)
    rep = report_of(jobs)
    output.write(rep, tmp_path)                          # the star is skipped, no crash
    assert "\x1b" not in output.text(rep)
    assert pd.read_csv(tmp_path / "jobs.csv")["name"][0].startswith("'=")


def test_a_profiling_chain_is_one_job_for_jct_and_pending_cancels_never_waited():
    jobs = frame(line("1", comment=f"synergy:fp={FP} profile=1", submit="2026-11-22T10:00:00",
                      end="2026-11-22T10:01:00"),
                 line("2", comment=f"synergy:fp={FP} from=1", submit="2026-11-22T10:01:00",
                      start="2026-11-22T10:01:10", end="2026-11-22T10:02:00"),
                 line("3", state="CANCELLED by 0", elapsed="0", submit="2026-11-22T09:00:00",
                      start="2026-11-22T10:00:00", end="2026-11-22T10:00:00"))
    enrich._column(jobs, "resubmitted_as", ["2", None, None])
    enrich._column(jobs, "profiled_as", [None, "1", None])
    c = summary.cluster(jobs)
    assert c["jct_mean_s"] == 120                        # 10:00 submit to 10:02 end
    assert c["wait_mean_s"] == 10                        # job 3 never waited to run


def test_throughput_and_data_wait_come_from_what_the_job_wrote_while_it_ran(tmp_path,
                                                                          monkeypatch):
    import os

    monkeypatch.setenv("SYNERGY_HOME", str(tmp_path / "home"))
    # Jobs of cluster c1 point at their folders from their cluster's own folder.
    outputs = paths.outputs_dir("c1")
    outputs.mkdir(parents=True)
    start, end = pd.Timestamp("2026-11-22T10:00:10"), pd.Timestamp("2026-11-22T10:10:00")
    inside, before = start.timestamp() + 60, start.timestamp() - 3600

    def job(raw, files, written):
        folder = tmp_path / raw
        folder.mkdir()
        for name, data in files.items():
            (folder / name).write_text(json.dumps(data))
            os.utime(folder / name, (written, written))
        (outputs / raw).write_text(f"{folder}\n")

    probe = {"ok": True, "mode": "watch",
             "measurement": {"samples_per_s": 812.5, "data_wait_share": 0.25}}
    job("1", {"probe.json": probe}, inside)                                # a user's script
    job("2", {"summary.json": {"samples_per_s": 90.0, "data_stall_fraction": 0.5}}, inside)
    job("3", {"probe.json": probe}, before)                 # an earlier run of the row
    job("4", {"probe.json": probe}, inside)                 # its profiling run: not a rate
    jobs = pd.DataFrame({"raw_id": ["1", "2", "3", "4", "5"],
                         "start": [start] * 5, "end": [end] * 5,
                         "profiling": [False, False, False, True, False]})
    enrich.add_throughput(jobs, "c1")
    assert list(jobs["samples_per_s"]) == [812.5, 90.0, None, None, None]
    assert list(jobs["data_wait_share"]) == [0.25, 0.5, None, None, None]


def test_a_chain_shows_both_ways_from_the_comment_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("SYNERGY_HOME", str(tmp_path))          # no chain records there
    jobs = frame(line("1", comment=f"synergy:fp={FP} profile=1"),
                 line("2", comment=f"synergy:fp={FP} from=1 decision=c1,m1024,g1,w1"))
    assert enrich.add_chains(jobs, "c1") == []
    assert list(jobs["resubmitted_as"]) == ["2", None]
    assert list(jobs["profiled_as"]) == [None, "1"]


def test_gpu_memory_asked_estimated_and_used_and_the_type_it_ran_on():
    import dataclasses
    from slurm_synergy.model.gpus import Catalog, GpuType
    from slurm_synergy.model.profile import BatchPeak, GpuMemory
    from slurm_synergy.report.output import job_rows
    comment = (f"synergy:fp={FP} asked=c2,m3072,g1:local1g "
               "decision=c2,m1024,g1:local4g,w1")
    jobs = frame(line("1", comment=comment, tres="cpu=2,gres/gpu:local4g=1,gres/gpu=1,mem=1G"),
                 line("2"))
    jobs.at[0, "gpu_mem_peak_mb"] = 540.0
    p = dataclasses.replace(profile({2: 200.0, 1: 100.0}), gpu_memory=GpuMemory(
        "fake tensors", 128, (BatchPeak(64, 300.0), BatchPeak(128, 600.0)), 1.0))
    catalog = Catalog({"local1g": GpuType("local1g", 1024, 100, 250, 300, 20, 1.0)})
    enrich.add_gpu_memory(jobs, {FP: p}, catalog)
    assert list(jobs["gpu_mem_asked_mib"]) == [1024, None]      # the type it asked for
    assert list(jobs["gpu_mem_est_mib"]) == [600.0, None]       # at its batch
    report = Report("p", jobs, summary.workloads(jobs), summary.cluster(jobs), [])
    head, rows, _ = job_rows(report)
    cells = dict(zip(head, rows[0]))
    assert cells["GPUs"] == ("1:local1g", "1:local4g", "1:local4g")
    assert cells["GPU MiB"] == ("1024", "600", "540")


def test_time_asked_predicted_and_used_per_job_and_workload():
    rows = [line("20", elapsed="600", comment=f"synergy:fp={FP} plain=1"),
            line("21", elapsed="900",
                 comment=f"synergy:fp={FP} plain=1 tmin=10,p600,n1 tback=240"),
            line("22", elapsed="300", comment=f"synergy:fp={FP} plain=1 tmin=30,p900,n2")]
    for r in rows:
        r["TimelimitRaw"] = "240"
    jobs = frame(*rows)
    assert list(jobs["limit_s"]) == [14400.0] * 3
    assert (jobs.iloc[1]["time_min_s"], jobs.iloc[1]["predicted_s"]) == (600.0, 600.0)
    w = summary.workloads(jobs).iloc[0]
    assert w["time_asked_over_used"] == pytest.approx(14400 / 600)
    said = [a["advice"] for a in advice.lines(jobs)]
    # Job 21 ran 15 min past its 10-minute time_min; the workload asks 240 min for 15.
    assert any(a.startswith("ran 15.0 min, past its --time-min of 10 min") and
               "gave its lowered limit back (240 min" in a for a in said)
    assert "its workload's 3 completed jobs ran at most 15.0 min of the 240 asked: " \
        "--time=30 is enough" in " ".join(said)
    # Fewer than two completed jobs, or a limit close to the runs: no line.
    assert advice.for_workloads([{"fingerprint": FP, "name": "x", "state": "COMPLETED",
                                  "elapsed_s": 600.0, "limit_s": 14400.0, "job_id": "1"}]) == []


def test_a_job_put_back_after_running_out_of_memory_is_counted_and_told():
    decided = f"synergy:fp={FP} asked=c2,m3072,g0 decision=c1,m768,g0,w1"
    rows = [line("20", comment=f"{decided} rescued=oom@4s"),
            line("21", state="OUT_OF_MEMORY", comment=decided, req_mem="768M",
                 tres="billing=1,cpu=1,mem=768M,node=1"),
            line("22", state="OUT_OF_MEMORY", req_mem="700M", tres="billing=1,cpu=1,mem=700M,node=1")]
    jobs = frame(*rows)
    c = summary.cluster(jobs)
    assert (c["rescued"], c["rescue_lost_s"]) == (1, 4.0)
    assert summary.workloads(jobs).set_index("workload").loc[FP, "rescued"] == 1
    said: dict[str, list[str]] = {}
    for a in advice.lines(jobs):
        said.setdefault(a["job_id"], []).append(a["advice"])
    # The job put back ran at what it asked: no word of the cores it was decided.
    assert said["20"] == ["ran out of memory at the decided 768M after 4 s; root put it back "
                          "with what it asked, and this is that run: its workload's next jobs "
                          "ask as it did until a run measures it again"]
    assert "unless it was submitted with --no-requeue (then resubmit it)" in said["21"][0]
    assert "the size it asked (not put back: the plugin did not lower it)" in said["22"][0]


def test_a_job_put_back_after_filling_its_decided_gpu_is_told_what_it_ran_out_of():
    decided = f"synergy:fp={FP} asked=c4,m8192,g1:a100 decision=c2,m4096,g1:a10,w2"
    jobs = frame(line("23", comment=f"{decided} rescued=gpu-oom@40s"),
                 line("24", comment=f"{decided} rescued=oom@4s"))
    assert list(jobs.sort_values("raw_id")["rescued_of"]) == ["GPU memory", "memory"]
    said = {a["job_id"]: a["advice"] for a in advice.lines(jobs) if "ran out" in a["advice"]}
    assert said["23"].startswith("ran out of GPU memory at the decided 1 GPU(s) of a10 "
                                 "after 40 s; root put it back with what it asked")
    assert said["24"].startswith("ran out of memory at the decided 4096M after 4 s")
    # A mark of a kind this release does not know is no rescue.
    assert comment_format.rescued(f"{decided} rescued=cpu@4s") is None


def test_a_right_sized_run_slower_than_predicted_is_told():
    decided = f"synergy:fp={FP} asked=c2,m3072,g0 decision=c1,m768,g0,w1"
    jobs = frame(line("30", comment=f"{decided} pace=41"), line("31", comment=decided))
    assert jobs.set_index("raw_id").loc["30", "pace_pct"] == 41.0
    said = {a["job_id"]: a["advice"] for a in advice.lines(jobs)
            if "predicted" in a["advice"]}
    assert said == {"30": "trained at 41% of the rate its decision predicted for its 1 "
                          "core(s), slower than the noise of both: its workload's later jobs "
                          "are decided more cores"}
    from slurm_synergy.jobs import plugin_note
    assert plugin_note(f"{decided} pace=41").startswith(
        "trained at 41% of the rate its decision predicted: its workload's later jobs are "
        "decided more cores, decision c1,m768,g0,w1")
