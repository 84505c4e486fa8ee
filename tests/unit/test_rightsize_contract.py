"""The one decision applier (model/rightsize.py), and etc/job_submit.lua where it repeats
a rule beyond tests/contract_cases.toml's cases (test_contract_cases runs those through
both)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_synergy.model.rightsize import Asked, LeftAsAsked, rightsize
from tests.shim import FP, decision, run, table


def test_a_shared_decision_that_would_grow_nothing_is_left_as_asked():
    with pytest.raises(LeftAsAsked, match="would grow nothing"):
        rightsize(Asked(8, 8192, 1), decision(FP, 2, 1024, 1), False, grow_only=True)


def test_workers_follow_pinned_cores_one_kept_for_each_training_process():
    d = replace(decision(FP, 4, 2048, 2, "", 1, 0), procs=2)
    sized = rightsize(Asked(8, 8192, 2, pinned=("cpus",)), d, True)
    assert (sized.cpus, sized.workers) == (8, 3)
    assert rightsize(Asked(8, 8192, 2, pinned=("cpus",)), d, False).cpus == 4


def test_a_job_of_several_tasks_or_nodes_is_left_as_asked():
    for asked in (Asked(2, 1024, 1, tasks=2), Asked(2, 1024, 1, nodes=2)):
        with pytest.raises(LeftAsAsked, match="more than one task or node"):
            rightsize(asked, decision(FP), False)


def test_the_shim_keeps_what_a_client_recorded_as_asked(tmp_path):
    """A user-mode submission (or resubmission) carries the decision already, with what
    its row asked: the shim, deciding the same, keeps that asked=."""
    job = {"name": "j", "comment": f"synergy:fp={FP} asked=c2,m3072,g1 decision=c1,m1024,g1,w1",
           "cpus_per_task": "1", "min_cpus": "1", "pn_min_cpus": "1", "pn_min_memory": "1024",
           "tres_per_node": "gres:gpu:1"}
    (out,), _ = run(tmp_path, [job], table(decision(FP, 1, 1024, 1, "", 1, 0)))
    assert out["comment"] == f"synergy:fp={FP} asked=c2,m3072,g1 decision=c1,m1024,g1,w1"
