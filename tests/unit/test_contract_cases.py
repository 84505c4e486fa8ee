"""tests/contract_cases.toml through both sides of the job_submit contract: each case
through the Python that owns the rule and through etc/job_submit.lua (lua5.1, the
harness), one answer wanted. The shim's constants come from the Python already
(test_plugin_contract); these are its rules."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_synergy.hooks import taskenv
from slurm_synergy.decisions.table import Owned, render
from slurm_synergy.model import comment as c
from slurm_synergy.model.engine import NodeShape
from slurm_synergy.model.policy import Policy
from slurm_synergy.model.rightsize import Asked, rightsize
from tests.shim import FP, UID, decision, key_of, python_key, run, submit_script, table

CASES = tomllib.loads((Path(__file__).parents[1] / "contract_cases.toml").read_text())
SHAPE = NodeShape(16, 64000, 4, ("a100", "h100"))


def cases(kind: str) -> list:
    return [pytest.param(case, id=case["name"]) for case in CASES[kind]]


def the_decision(d: dict):
    return replace(decision(FP, d["cpus"], d["mem_mb"], d["gpus"], d.get("gpu_type", ""),
                            d["workers"], d.get("power_limit_w", 0)), procs=d.get("procs", 1))


# How each release's slurmctld hands job_submit a job's GPUs and cores: until 22.05 the
# GPUs as gres:gpu:N; from 23.02 as gres/gpu:N, and from 23.11 --cpus-per-task also in
# tres_per_task (cpu=N).
FORMS = {"22.05": ("gres:", False), "24.11": ("gres/", True)}


def the_job(asked: dict, comment: str, release: str = "22.05") -> dict[str, str]:
    """A job asking `asked`, as `release`'s slurmctld hands job_submit its fields."""
    cpus, gpus, gtype = asked.get("cpus"), asked["gpus"], asked.get("gpu_type", "")
    gres, per_task = FORMS[release]
    return {"name": "j", "comment": comment, "pn_min_memory": str(asked["mem_mb"]),
            **({"cpus_per_task": str(cpus), "min_cpus": str(cpus), "pn_min_cpus": str(cpus)}
               if cpus else {}),
            **({"tres_per_task": f"cpu={cpus}"} if cpus and per_task else {}),
            **({"tres_per_node": f"{gres}gpu:{gtype + ':' if gtype else ''}{gpus}"}
               if gpus else {})}


def through_both(tmp_path, case: dict, tbl: str, sized) -> None:
    for release in FORMS:
        one_release(tmp_path / release, case, tbl, sized, release)


def one_release(tmp_path, case: dict, tbl: str, sized, release: str) -> None:
    asked = case["asked"]
    pins = asked.get("pinned", [])
    comment = " ".join(filter(None, (f"synergy:fp={FP}", f"req={','.join(pins)}" if pins
                                     else "", case.get("comment", ""))))
    job = the_job(asked, comment, release)
    tmp_path.mkdir()
    (out,), logs = run(tmp_path, [job], tbl)
    assert (int(out["cpus_per_task"]), int(out["pn_min_memory"])) == (sized.cpus,
                                                                       sized.mem_mb), logs
    assert int(out["min_cpus"]) == int(out["pn_min_cpus"]) == sized.cpus
    gres, per_task = FORMS[release]
    assert out.get("tres_per_node") == (f"{gres}{sized.gres}" if sized.gpus
                                        else job.get("tres_per_node")), (release, logs)
    assert out.get("tres_per_task") == (f"cpu={sized.cpus}" if "tres_per_task" in job
                                        else None), (release, logs)
    # The workers travel in the comment alone: the node prolog hands them to the tasks.
    assert "env.SYNERGY_WORKERS" not in out
    assert taskenv.lines(out["comment"]) == f"SYNERGY_WORKERS={sized.workers}\n"
    assert out["comment"] == c.with_marks(comment, asked=sized.asked, decision=sized.decided)


@pytest.mark.parametrize("case", cases("rightsize"))
def test_a_decision_is_applied_alike(tmp_path, case):
    asked, d = case["asked"], the_decision(case["decision"])
    wins = case.get("user_request_wins", False)
    sized = rightsize(Asked(asked["cpus"], asked["mem_mb"], asked["gpus"],
                            asked.get("gpu_type", ""), pinned=tuple(asked.get("pinned", ()))),
                      d, wins)
    through_both(tmp_path, case, table(d, policy=Policy(user_request_wins=wins), shape=SHAPE),
                 sized)


@pytest.mark.parametrize("case", cases("grow"))
def test_a_shared_decision_grows_a_job_alike(tmp_path, case):
    asked, d = case["asked"], the_decision(case["decision"])
    sized = rightsize(Asked(asked.get("cpus"), asked["mem_mb"], asked["gpus"]), d, False,
                      grow_only=True)
    assert sized.cpus >= asked.get("cpus", 0) and sized.mem_mb >= asked["mem_mb"]
    assert sized.gpus == asked["gpus"] and sized.power_limit_w == 0
    through_both(tmp_path, case, render([Owned(UID, d, shared=True)], Policy(), SHAPE), sized)


@pytest.mark.parametrize("case", cases("plainkey"))
def test_a_plain_script_is_keyed_alike(tmp_path, case):
    script = case["script"].encode("latin-1") if case.get("latin1") else case["script"]
    fields = case.get("fields", {})
    job, logs = submit_script(tmp_path, script, table(), **fields)
    assert key_of(job) == python_key(script, **fields), logs
