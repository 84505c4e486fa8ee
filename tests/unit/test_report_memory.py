"""A job's memory as Slurm charges it, from sacct's step lines: per node, the steps on it
together, against the per-node allowance; the job's figure is its worst node. Where the
node hooks read the job's cgroup on every node, their peaks and CPU time stand instead."""

import pandas as pd
import pytest

from slurm_synergy.hooks.records import JobGpuStats
from slurm_synergy.report import accounting, enrich, output
from slurm_synergy.report.build import Report
from slurm_synergy.report.memory import expand_nodes


def row(job, nodes="node1", ntasks="1", nnodes="1", tot="", largest="", largest_node="",
        rss="", total_cpu="00:01.000", start="2026-11-26T10:00:00", end="2026-11-26T10:01:00",
        tres="billing=2,cpu=2,mem=1G,node=1", cpus="2", elapsed="60", job_total="01:00.000"):
    """A job or step line as sacct writes it (--parsable2, the report's fields)."""
    step = "." in job
    return {"JobIDRaw": job, "JobID": job, "JobName": "shape", "User": "ann",
            "Partition": "multi", "State": "COMPLETED", "ExitCode": "0:0",
            "Submit": "2026-11-26T10:00:00", "Start": start, "End": end,
            "ElapsedRaw": elapsed, "AllocCPUS": cpus, "ReqCPUS": cpus, "ReqMem": "1G",
            "AllocTRES": "" if step else tres, "ReqTRES": "",
            "TotalCPU": total_cpu if step else job_total, "MaxRSS": rss, "NodeList": nodes,
            "NNodes": nnodes, "NTasks": ntasks if step else "", "Comment": "",
            "TRESUsageInTot": f"cpu=00:00:01,mem={tot}" if tot else "",
            "TRESUsageInMax": f"cpu=00:00:01,mem={largest}" if largest else "",
            "TRESUsageInMaxNode": f"cpu={largest_node},mem={largest_node}" if largest_node
            else "", "ConsumedEnergyRaw": "0"}


def test_host_lists_expand_as_slurm_writes_them():
    assert expand_nodes("node[1-3,5],gpu7") == ("node1", "node2", "node3", "node5", "gpu7")
    assert expand_nodes("n[08-10]") == ("n08", "n09", "n10")
    assert expand_nodes("None assigned") == ()


def test_two_nodes_one_task_each_read_per_node():
    # Issue 40's job A: 400 MB a task on each of two nodes, --mem=1G a node. The whole
    # (800 MB over 2 GB) and the worst node (400 MB over 1 GB) agree here; a single
    # task's MaxRSS over the whole 2 GB would read 20%.
    rows = [row("1", nodes="node[1-2]", nnodes="2", cpus="2",
                tres="billing=2,cpu=2,mem=2G,node=2"),
            row("1.batch", tot="5M", largest="5M", largest_node="node1"),
            row("1.extern", nodes="node[1-2]", nnodes="2", ntasks="2", tot="1M",
                largest="512K", largest_node="node1", total_cpu="00:00:00"),
            row("1.0", nodes="node[1-2]", nnodes="2", ntasks="2", tot="800M", largest="400M",
                largest_node="node2", start="2026-11-26T10:00:01", end="2026-11-26T10:00:59")]
    j = accounting.jobs_frame(rows).iloc[0]
    assert j["node_mem_mb"] == 1024
    # node1: batch 5 + extern 0.5 + its share of step 0 (400); node2: extern 0.5 + 400.
    assert j["peak_node"] == "node1" and j["max_rss_mb"] == pytest.approx(405.5)
    assert j["mem_eff"] == pytest.approx(405.5 / 1024)
    assert j["mem_estimated"] and not j["one_node"] and not j["one_task"]


def test_tasks_on_one_node_add_up_and_steps_one_after_another_do_not():
    # Issue 40's job B: two tasks of 300 MB at once, then a step of 200 MB, --mem=1G.
    rows = [row("2"),
            row("2.batch", tot="4M", largest="4M", largest_node="node1"),
            row("2.0", ntasks="2", tot="600M", largest="300M", largest_node="node1",
                start="2026-11-26T10:00:01", end="2026-11-26T10:00:30"),
            row("2.1", tot="200M", largest="200M", largest_node="node1",
                start="2026-11-26T10:00:30", end="2026-11-26T10:00:59")]
    j = accounting.jobs_frame(rows).iloc[0]
    assert j["max_rss_mb"] == pytest.approx(604) and j["mem_eff"] == pytest.approx(604 / 1024)
    assert not j["mem_estimated"] and j["mem_note"] == ""
    assert j["one_node"] and not j["one_task"]


def test_a_peak_sacct_never_sampled_is_a_dash_and_a_reason():
    rows = [row("3"), row("3.batch", tot="0", rss="0", total_cpu="00:02.000")]
    j = accounting.jobs_frame(rows).iloc[0]
    assert j["max_rss_mb"] is None and j["mem_eff"] is None
    assert "step batch ran but was never sampled" in j["mem_note"]
    # The extern step's sleeper reads 0 after a millisecond of CPU: nothing unknown.
    rows = [row("7"), row("7.batch", tot="400M", largest="400M", largest_node="node1"),
            row("7.extern", tot="0", rss="0", total_cpu="00:00.001")]
    assert accounting.jobs_frame(rows).iloc[0]["max_rss_mb"] == 400


def test_a_job_that_never_ran_says_so():
    j = accounting.jobs_frame([row("4", tres="", start="Unknown", elapsed="0")]).iloc[0]
    assert j["mem_eff"] is None and j["mem_note"] == "never ran"


def test_slurms_own_energy_where_a_plugin_measured_it():
    measured = accounting.jobs_frame([{**row("5"), "ConsumedEnergyRaw": "52300"}]).iloc[0]
    none = accounting.jobs_frame([row("6")]).iloc[0]
    assert measured["slurm_energy_j"] == 52300 and none["slurm_energy_j"] is None


def stats(job, node, peak, cpu_s, ended="2026-11-26T10:01:00Z"):
    return JobGpuStats(job, node, "2026-11-26T10:00:00Z", ended, (), "", peak, cpu_s)


def two_node_job():
    return accounting.jobs_frame(
        [row("1", nodes="node[1-2]", nnodes="2", cpus="2", tres="billing=2,cpu=2,mem=2G,node=2"),
         row("1.0", nodes="node[1-2]", nnodes="2", ntasks="2", tot="800M", largest="400M",
             largest_node="node2")])


def test_the_hooks_cgroup_peaks_replace_sacct_where_every_node_has_one():
    jobs = two_node_job()
    enrich.add_cgroup_use(jobs, {"1": [stats("1", "node1", 380.0, 20.0),
                                       stats("1", "node2", 452.5, 25.0)]})
    j = jobs.iloc[0]
    assert j["usage_from"] == "cgroup" and not j["mem_estimated"]
    assert (j["peak_node"], j["max_rss_mb"]) == ("node2", 452.5)
    assert j["mem_eff"] == pytest.approx(452.5 / 1024)
    # The larger of two lower bounds: here sacct's TotalCPU (a minute) over the cgroups'.
    assert j["total_cpu_s"] == 60.0 and j["cpu_eff"] == pytest.approx(60.0 / (2 * 60))
    jobs = two_node_job()
    enrich.add_cgroup_use(jobs, {"1": [stats("1", "node1", 380.0, 50.0),
                                       stats("1", "node2", 452.5, 25.0)]})
    assert jobs.iloc[0]["total_cpu_s"] == 75.0


def test_a_node_without_a_cgroup_reading_leaves_the_job_on_sacct():
    for partial in ([stats("1", "node1", 380.0, 20.0)],
                    [stats("1", "node1", 380.0, 20.0), stats("1", "node2", None, None)]):
        jobs = two_node_job()
        enrich.add_cgroup_use(jobs, {"1": partial})
        j = jobs.iloc[0]
        assert j["usage_from"] == "sacct" and j["mem_estimated"]
        assert j["total_cpu_s"] == 60.0                         # sacct's TotalCPU


def test_a_requeued_job_is_read_from_its_last_run():
    jobs = accounting.jobs_frame([row("3"), row("3.batch", tot="100M", largest="100M",
                                                largest_node="node1")])
    enrich.add_cgroup_use(jobs, {"3": [stats("3", "node1", 900.0, 50.0, "2026-11-26T12:00:00Z"),
                                       stats("3", "node1", 200.0, 10.0, "2026-11-26T09:00:00Z")]})
    assert jobs.iloc[0]["max_rss_mb"] == 900.0


def test_the_report_says_where_its_peaks_come_from():
    jobs = two_node_job()
    enrich.add_cgroup_use(jobs, {"1": [stats("1", "node1", 380.0, 20.0),
                                       stats("1", "node2", 452.5, 25.0)]})
    report = Report("test", jobs, pd.DataFrame(), {}, [])
    assert output.usage_line(report).startswith(
        "peak, Mem%: the node hooks' cgroup readings for 1 of 1 job(s)")
    enrich.add_cgroup_use(jobs, {})
    assert "readings for 0 of 1 job(s)" in output.usage_line(report)


def test_lines_in_any_order_fold_to_the_same_jobs():
    # sacct prints each job's steps after it; the fold parses lines as they come and must
    # not depend on that: steps before their job, and a step after the next job.
    ordered = [row("7"), row("7.batch", tot="300M", largest="300M", largest_node="node1"),
               row("7.0", tot="700M", largest="700M", largest_node="node1",
                   start="2026-11-26T10:00:01", end="2026-11-26T10:00:30"),
               row("8"), row("8.batch", tot="100M", largest="100M", largest_node="node1")]
    shuffled = [ordered[1], ordered[3], ordered[0], ordered[4], ordered[2]]
    expected = accounting.jobs_frame(ordered)
    assert expected.set_index("raw_id").loc["7", "max_rss_mb"] == pytest.approx(1000)  # at once
    pd.testing.assert_frame_equal(
        accounting.jobs_frame(shuffled).set_index("raw_id").sort_index(),
        expected.set_index("raw_id").sort_index())



def test_a_one_task_step_on_fewer_cores_than_its_job_that_did_its_work_is_noted():
    # srun without -c in a job of 4 cores a task: the step that ran for most of the job
    # had 1 of them. A short helper step on 1 core, or the batch script, is no case.
    def job(step_cpus, step_s, helper=True):
        return [row("3", cpus="4", elapsed="600", job_total="09:50.000"),
                row("3.batch", cpus="4", elapsed="600", tot="4M"),
                *([row("3.0", cpus="1", elapsed="3", tot="1M")] if helper else []),
                row("3.1", cpus=step_cpus, elapsed=step_s, tot="300M",
                    total_cpu="09:50.000")]
    assert accounting.jobs_frame(job("1", "590")).iloc[0]["narrow_step"] == "1:1"
    for whole in (job("4", "590"), job("1", "200"), job("4", "590", helper=False)):
        assert accounting.jobs_frame(whole).iloc[0]["narrow_step"] == "", whole
