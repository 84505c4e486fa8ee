"""The three flows by which a job comes to be right-sized (simulate/flows.py), on traces
small enough to follow round by round."""

from __future__ import annotations

import json

import pytest

from slurm_synergy.cli import main
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.simulate import results
from slurm_synergy.simulate.cluster import ClusterSpec, Server, load_cluster
from slurm_synergy.simulate.flows import FlowCosts
from slurm_synergy.simulate.simulator import Setup, simulate
from slurm_synergy.simulate.trace import SimJob, poisson_trace
from slurm_synergy.simulate.workload import read_matrix

WORK = read_matrix()
COSTS = FlowCosts()         # the defaults: 600 s profiling, 30 s restart, 18 s of 300 lost

# One server of 2 GPUs and 6 cores: the share is 3 cores a GPU. Model "m" runs at 1.0
# on 3 to 5 cores and 2.0 on 6, an iteration a second at the share: 300 iterations a
# round at its share, 600 alone on the server right-sized. Two at once both get 3 cores
# under TUNE (the second takes the first back to its share).
TWO = ClusterSpec("two", (Server(2, 6, 125.0),))


@pytest.fixture
def m(tmp_path):
    path = tmp_path / "m.csv"
    lines = ["model,cpus_per_gpu,mem_per_gpu_gb,norm_throughput,ideal_cpus_per_gpu,"
             "ideal_mem_per_gpu_gb,speedup_at_ideal,iter_time_s_at_proportional"]
    lines += [f"m,{c},{g},{0.5 if c < 3 else 1.0 if c < 6 else 2.0},6,62.5,2.0,1.0"
              for c in range(1, 7) for g in (62.5, 125)]
    path.write_text("\n".join(lines) + "\n")
    return read_matrix(path)


# a profiles first; b starts beside it; c waits for a GPU. A static trace: rounds at 1 s,
# 301 s, 601 s, ...
ABC = [SimJob("a", "m", 0.0, 900, 1), SimJob("b", "m", 0.1, 600, 1),
       SimJob("c", "m", 0.2, 1200, 1)]


def _run(work, flow, trace=ABC, alloc="tune", costs=COSTS):
    return simulate(trace, work, TWO, Setup("fifo", alloc, "matrix", flow, costs))


def _ends(out):
    return {j.job_id: j.end_s for j in out.jobs}


def test_known_right_sizes_every_job_from_its_arrival(m):
    out = _run(m, "known")
    assert out.setup.label == "fifo/tune"
    # a and b share the server at 1.0 until b ends (601); c then takes a back to its
    # share, and runs alone at 2.0 from 901.
    assert _ends(out) == {"a": 901.0, "b": 601.0, "c": 1501.0}
    assert _ends(out) == _ends(simulate(ABC, m, TWO, Setup("fifo", "tune")))


def test_in_run_slows_the_first_job_and_right_sizes_its_waiting_sibling_in_place(m):
    out = _run(m, "in-run")
    a, b, c = out.jobs
    # a sweeps in its first lease and loses 18 s of it: 282 + 300 + 300 iterations
    # leave 18 for a fourth round; without the loss it would end at 901.
    assert a.end_s == 1201.0 and a.first_start_s == 1.0
    # b started before the decision: its asked size to its end.
    assert b.end_s == 601.0
    # c was waiting when the decision came (301): right-sized, it keeps its place and
    # runs at 2.0 once alone (1201): 300 + 300 + 600. At its asked size it would end
    # at 1801.
    assert c.end_s == 1501.0 and c.queued_s == c.arrival_s
    assert all(j.queued_s == j.arrival_s for j in out.jobs)    # nobody queued again
    s = results.summarise(out)
    assert s.flow == "in-run" and s.gpu_h == pytest.approx((4 + 2 + 3) * 300 / 3600)


def test_resubmit_queues_the_profiler_and_a_sibling_started_late_again(m):
    out = _run(m, "resubmit")
    a, b, c = out.jobs
    # a profiles for two leases, trains nothing, and arrives again at 601, right-sized,
    # behind c: it shares the server with c at 1.0 until its 900 iterations are done.
    assert a.first_start_s == 1.0 and a.queued_s == 601.0 and a.end_s == 1501.0
    # b started while a was profiling: it trains as submitted.
    assert b.end_s == 601.0 and b.queued_s == b.arrival_s
    # c was marked at submission; it starts at 601, finds the profile, resubmits itself
    # 30 s in, joins the queue at 901 behind a, and runs alone at 2.0 from 1501.
    assert c.first_start_s == 601.0 and c.queued_s == 631.0 and c.end_s == 1801.0
    s = results.summarise(out)
    # JCT from the first arrival: the profiling and the second wait count.
    assert s.mean_jct_h == pytest.approx((1501 + 600.9 + 1800.8) / 3 / 3600)
    # a's two profiling leases and c's first, which trained nothing, are held.
    assert s.gpu_h == pytest.approx((5 + 2 + 4) * 300 / 3600)
    assert out.setup.label == "fifo/tune/resubmit"


def test_a_job_arriving_after_the_profile_is_right_sized_at_submission(m):
    trace = [SimJob("a", "m", 0.0, 600, 1), SimJob("d", "m", 2000.0, 1200, 1)]
    for flow in ("in-run", "resubmit"):
        out = _run(m, flow, trace)
        assert out.jobs[1].first_start_s == 2100.0 and out.jobs[1].end_s == 2700.0, flow
    # The profiler alone: in-run it trains at its asked size (282 + 300 + 18), resubmit
    # it profiles at 0 and 300, then runs right-sized alone at 2.0 from 600.
    assert _run(m, "in-run", trace).jobs[0].end_s == 900.0
    assert _run(m, "resubmit", trace).jobs[0].end_s == 900.0


def test_two_models_or_two_sizes_are_two_workloads(m):
    work = {**m, "n": m["m"]}
    trace = [SimJob("a", "m", 0.0, 600, 1), SimJob("b", "n", 0.1, 600, 1)]
    out = simulate(trace, work, TWO, Setup("fifo", "tune", "matrix", "resubmit"))
    assert [j.queued_s for j in out.jobs] == [601.0, 601.0]      # both profiled
    trace = [SimJob("a", "m", 0.0, 600, 1), SimJob("b", "m", 0.1, 600, 2)]
    out = simulate(trace, m, TWO, Setup("fifo", "tune", "matrix", "resubmit"))
    assert out.jobs[0].queued_s == 601.0 and out.jobs[1].queued_s > 601.0


def test_under_the_share_alone_in_run_without_a_loss_is_known():
    # proportional gives every job its share, asked or right-sized: the in-run flow's
    # only cost is the sweep's loss, and resubmitting costs rounds.
    trace = poisson_trace(120, 1.1, 32, WORK, seed=5)
    deploy = load_cluster("deployment")

    def run(flow, costs=COSTS):
        return simulate(trace, WORK, deploy, Setup("fifo", "proportional", "matrix", flow,
                                                   costs))

    known = run("known")
    free = run("in-run", FlowCosts(sweep_lost_s=0.0))
    assert _ends(free) == _ends(known)
    assert results.summarise(run("in-run")).mean_jct_h >= results.summarise(known).mean_jct_h
    resubmit = results.summarise(run("resubmit"))
    assert resubmit.mean_jct_h > results.summarise(known).mean_jct_h
    assert resubmit.gpu_h > results.summarise(known).gpu_h


@pytest.mark.parametrize("alloc", ["greedy", "opt", "synergy-slurm"])
def test_every_allocator_gives_an_asked_job_its_share(m, alloc):
    # c alone from 1201 under in-run; a, which started at its asked size, never gets
    # more than its share: it needs its fourth round although alone from 601 (b ends).
    out = _run(m, "in-run", alloc=alloc)
    assert out.jobs[0].end_s == 1201.0


def test_bad_flows_are_refused(m):
    with pytest.raises(SynergyError, match="flow 'later' is not one of known, in-run, "
                       "resubmit"):
        _run(m, "later")
    with pytest.raises(SynergyError, match="0 or more"):
        FlowCosts(profile_s=-1.0)
    with pytest.raises(SynergyError, match="cannot lose 60 s of training in the 30 s"):
        FlowCosts(sweep_s=30.0, sweep_lost_s=60.0)


def test_the_command_runs_the_flows_side_by_side(tmp_path, capsys):
    out = tmp_path / "sim"
    assert main(["simulate", "--poisson", "60", "--load", "1.0", "--seed", "4", "--alloc",
                 "tune", "--flow", "all", "--profile-s", "900", "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert "GPU h" in table and "fifo/tune/resubmit" in table
    rows = json.loads((out / "summary.json").read_text())
    assert [(r["label"], r["flow"]) for r in rows] == [
        ("fifo/tune", "known"), ("fifo/tune/in-run", "in-run"),
        ("fifo/tune/resubmit", "resubmit")]
    assert rows[2]["gpu_h"] > rows[0]["gpu_h"]
