"""A site's queue for the Slurm model: users ask at least what their jobs need (at most a
node), right-sizing never asks more than the user nor runs slower than the decision's
noise, --mem-update lowers memory once within its floor, and the rate brings the load."""

import json

import pytest

from slurm_synergy.cli import main

from slurm_synergy.simulate.dynamic import dynamic_trace
from slurm_synergy.simulate.sitejobs import (FLOWS, NOISE, rate_for_load, site_jobs)
from slurm_synergy.simulate.slurmqueue import Node
from slurm_synergy.simulate.workload import read_matrix

NODE = Node(24, 500 * 1024, 8)
W = read_matrix()


@pytest.fixture(scope="module")
def trace():
    return dynamic_trace(400, rate_for_load(1.0, 32), W)


def test_every_flow_asks_the_same_and_the_right_sized_ones_no_more(trace):
    by_flow = {f: site_jobs(trace, W, NODE, f) for f in FLOWS}
    asked = by_flow["asked"]
    assert all(j.decided is None and j.mem_update is None for j in asked)
    for flow in FLOWS:
        assert [j.asked for j in by_flow[flow]] == [j.asked for j in asked]
    for j, t in zip(by_flow["synergy"], trace):
        w = W[t.model]
        assert j.asked.cpus <= NODE.cpus and j.asked.mem_mb <= NODE.mem_mb
        assert j.asked.cpus >= min(NODE.cpus, w.ideal_cpus * t.gpus)
        d = j.decided
        assert d.cpus <= j.asked.cpus and d.mem_mb <= j.asked.mem_mb and d.gpus == t.gpus
        assert d.run_s <= j.asked.run_s / (1 - NOISE) + 1e-6
        assert j.measuring_s > j.asked.run_s
    assert sum(j.decided.mem_mb for j in by_flow["synergy"]) < \
        0.5 * sum(j.asked.mem_mb for j in asked)


def test_mem_update_lowers_memory_once_never_below_a_tenth_of_the_ask(trace):
    for j in site_jobs(trace, W, NODE, "mem-update"):
        delay, mb = j.mem_update
        assert delay == 300.0 and 0.1 * j.asked.mem_mb <= mb + 1 <= j.asked.mem_mb * 1.1 + 1


def test_the_rate_brings_the_asked_load_of_gpu_hours():
    trace = dynamic_trace(20000, rate_for_load(0.8, 64), W)
    gpu_h = sum(t.iters * W[t.model].iter_s * t.gpus for t in trace) / 3600
    hours = trace[-1].arrival_s / 3600
    assert gpu_h / hours / 64 == pytest.approx(0.8, rel=0.1)


def test_an_unknown_flow_is_refused(trace):
    with pytest.raises(ValueError, match="flow must be one of"):
        site_jobs(trace, W, NODE, "faster")


def test_the_command_runs_the_slurm_model_in_four_flows(tmp_path, capsys):
    assert main(["simulate", "--scheduler", "slurm", "--dynamic", "120", "--rate", "2",
                 "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "site.json").read_text())
    assert [r["flow"] for r in rows] == list(FLOWS)
    assert all(r["jobs"] == 120 and r["killed"] == 0 for r in rows)
    by = {r["flow"]: r for r in rows}
    # The deployment's servers, users over-asking memory: right-sizing shortens the queue.
    assert by["synergy"]["mean_wait_h"] < by["asked"]["mean_wait_h"]
    assert "| mem-update |" in capsys.readouterr().out
