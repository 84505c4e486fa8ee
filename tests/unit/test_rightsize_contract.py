"""The one decision applier (model/rightsize.py) and etc/job_submit.lua, which mirrors it
inside slurmctld: the same cases through both give the same request, the same workers
and the same asked= and decision= marks."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_synergy.model.engine import NodeShape
from slurm_synergy.model.policy import Policy
from slurm_synergy.model.rightsize import Asked, LeftAsAsked, rightsize
from slurm_synergy.decisions.table import Owned, render
from tests.shim import FP, UID, decision, run, table


# (what the job asks: cpus, MB, GPUs, GPU type, pinned), (the decision: cpus, MB, GPUs,
# its GPU type, workers, power limit, training processes), the site lets pins win
CASES = {
    "plain": ((2, 3072, 1, "", ()), (1, 1280, 1, "", 1, 0, 1), False),
    "more cores": ((2, 3072, 2, "", ()), (6, 4096, 1, "", 5, 250, 1), False),
    "asked type kept": ((4, 8192, 2, "a100", ()), (2, 2048, 1, "", 1, 0, 1), False),
    "decided type": ((4, 8192, 2, "a100", ()), (2, 2048, 1, "h100", 1, 0, 1), False),
    "pins ignored": ((8, 8192, 2, "", ("cpus", "mem")), (2, 1024, 1, "", 1, 0, 1), False),
    "pinned cores": ((8, 8192, 2, "", ("cpus",)), (2, 1024, 1, "", 1, 0, 1), True),
    "pinned memory, GPUs": ((8, 8192, 2, "", ("mem", "gpus")), (2, 1024, 1, "", 1, 0, 1),
                            True),
    "torchrun, pinned cores": ((8, 8192, 2, "", ("cpus",)), (4, 2048, 2, "", 1, 0, 2), True),
    "torchrun": ((8, 8192, 2, "", ()), (6, 2048, 2, "", 2, 0, 2), True),
    "no GPUs asked": ((4, 4096, 0, "", ()), (1, 1024, 0, "", 1, 0, 1), False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_shim_applies_a_decision_as_the_one_applier_does(tmp_path, case):
    (cpus, mem, gpus, gtype, pinned), (dc, dm, dg, dt, dw, dp, procs), wins = CASES[case]
    d = replace(decision(FP, dc, dm, dg, dt, dw, dp), procs=procs)
    sized = rightsize(Asked(cpus, mem, gpus, gtype, pinned=pinned), d, wins)
    gres = f"gres:gpu:{gtype + ':' if gtype else ''}{gpus}" if gpus else None
    job = {"name": "j", "comment": f"synergy:fp={FP}" + (f" req={','.join(pinned)}"
                                                         if pinned else ""),
           "cpus_per_task": str(cpus), "min_cpus": str(cpus), "pn_min_cpus": str(cpus),
           "pn_min_memory": str(mem), **({"tres_per_node": gres} if gres else {})}
    shape = NodeShape(16, 64000, 4, ("a100", "h100"))
    (out,), _ = run(tmp_path, [job], table(d, policy=Policy(user_request_wins=wins),
                                           shape=shape))
    assert int(out["cpus_per_task"]) == sized.cpus
    assert int(out["pn_min_memory"]) == sized.mem_mb
    assert out.get("tres_per_node") == (f"gres:{sized.gres}" if sized.gpus else gres)
    assert int(out["env.SYNERGY_WORKERS"]) == sized.workers
    assert out["comment"].endswith(f" asked={sized.asked} decision={sized.decided}")


# A shared decision (share_group): (asked cpus, MB, GPUs), (decision cpus, MB, GPUs)
SHARED = {
    "grows cores": ((2, 3072, 2), (4, 1024, 1)),
    "grows memory": ((8, 1024, 1), (2, 4096, 1)),
    "grows both": ((1, 512, 1), (4, 4096, 2)),
    "unset cores grow": ((None, 8192, 1), (3, 1024, 1)),
}


@pytest.mark.parametrize("case", list(SHARED))
def test_a_shared_decision_grows_a_job_alike_in_both(tmp_path, case):
    (cpus, mem, gpus), (dc, dm, dg) = SHARED[case]
    d = decision(FP, dc, dm, dg, "", 3, 200)
    sized = rightsize(Asked(cpus, mem, gpus), d, False, grow_only=True)
    job = {"name": "j", "comment": f"synergy:fp={FP}", "pn_min_memory": str(mem),
           "tres_per_node": f"gres:gpu:{gpus}",
           **({"cpus_per_task": str(cpus), "min_cpus": str(cpus), "pn_min_cpus": str(cpus)}
              if cpus else {})}
    tbl = render([Owned(UID, d, shared=True)], Policy(), NodeShape(16, 64000, 4))
    (out,), _ = run(tmp_path, [job], tbl)
    assert (int(out["cpus_per_task"]), int(out["pn_min_memory"])) == (sized.cpus, sized.mem_mb)
    assert sized.cpus >= (cpus or 0) and sized.mem_mb >= mem and sized.gpus == gpus
    assert out["tres_per_node"] == f"gres:gpu:{gpus}" and sized.power_limit_w == 0
    assert int(out["env.SYNERGY_WORKERS"]) == sized.workers
    assert out["comment"].endswith(f" asked={sized.asked} decision={sized.decided}")


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
