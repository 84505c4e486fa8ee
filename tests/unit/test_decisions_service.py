"""The one decision service (decisions/service.py): every path's decision or refusal,
after every check, with what Slurm says read once and again after its expiry."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_synergy.decisions.service import (LIMITS_TTL_S, NO_PROFILE, DecisionRequest,
                                             DecisionService, Refusal)
from slurm_synergy.model.policy import Policy
from slurm_synergy.model.engine import Decision, NodeShape
from slurm_synergy.model.errors import SlurmError
from slurm_synergy.profiles import ProfileStore
from slurm_synergy.slurm import user_name

from tests.helpers import FP, OfflineSlurm, make_profile, offline_service

SHAPE = NodeShape(16, 64000, 4)
ME = 4242


@pytest.fixture
def store(tmp_path) -> ProfileStore:
    s = ProfileStore(tmp_path)
    s.save(make_profile())
    return s


def row(user: str, cpus: int = 0, qos: str = "normal", default: str = "") -> list[str]:
    return ["users", user, "", qos, default, f"cpu={cpus}" if cpus else "", "", ""]


def test_a_users_own_profile_decides_and_nobody_elses(store):
    service = offline_service(SHAPE, stores={ME: store})
    d = service.decide(DecisionRequest(ME, FP))
    assert isinstance(d, Decision) and d.cpus >= 1
    other = service.decide(DecisionRequest(ME + 1, FP))
    assert other == Refusal(FP, NO_PROFILE)
    assert isinstance(service.decide(DecisionRequest(ME, "fedcba9876543210")), Refusal)


def test_the_qos_a_job_runs_under_bounds_its_decision(store):
    me = user_name(ME)
    cpus = offline_service(SHAPE, stores={ME: store}).decide(DecisionRequest(ME, FP)).cpus
    service = offline_service(SHAPE, stores={ME: store},
                              assocs=[row(me, qos="normal,short")],
                              qos=[["normal", "", "", "", ""],
                                   ["short", f"cpu={cpus - 1}", "", "", ""]])
    assert isinstance(service.decide(DecisionRequest(ME, FP)), Decision)
    refused = service.decide(DecisionRequest(ME, FP, qos="short"))
    assert isinstance(refused, Refusal) and "QOS short" in refused.why
    assert refused.reasons, "the engine's reasons are kept for explain"
    unknown = service.decide(DecisionRequest(ME, FP, qos="gone"))
    assert isinstance(unknown, Refusal) and f"no association of {me} or no QOS gone" in \
        unknown.why
    odd = service.decide(DecisionRequest(ME, FP, qos="a b"))
    assert isinstance(odd, Refusal) and "not one a decision can be checked" in odd.why


class Failing(OfflineSlurm):
    """Accounting down: sacctmgr fails, as with slurmdbd unreachable."""

    def association_rows(self, fields):
        raise SlurmError("sacctmgr failed: Connection refused")


def test_limits_that_cannot_be_read_while_enforced_refuse_every_decision(store):
    service = DecisionService(Failing(SHAPE, assocs=[]), Policy(),  # type: ignore[arg-type]
                              stores={ME: store}.get)
    refused = service.decide(DecisionRequest(ME, FP))
    assert isinstance(refused, Refusal)
    assert "accounting's limits cannot be read (sacctmgr failed" in refused.why
    assert "Slurm holds jobs to them, so none is applied" in refused.why


class Counting(OfflineSlurm):
    reads = 0

    def association_rows(self, fields):
        self.reads += 1
        return super().association_rows(fields)


def test_limits_are_read_once_and_again_after_their_expiry(store):
    now = [0.0]
    slurm = Counting(SHAPE, assocs=[row(user_name(ME))])
    service = DecisionService(slurm, Policy(), stores={ME: store}.get,  # type: ignore[arg-type]
                              clock=lambda: now[0])
    for _ in range(3):
        assert isinstance(service.decide(DecisionRequest(ME, FP)), Decision)
    assert slurm.reads == 1
    now[0] = LIMITS_TTL_S + 1
    service.decide(DecisionRequest(ME, FP))
    assert slurm.reads == 2


def test_a_decision_no_node_of_the_partition_has_is_refused(tmp_path):
    two = make_profile()
    store = ProfileStore(tmp_path)
    store.save(replace(two, allocation=replace(two.allocation, gpus=2)))
    small = offline_service(NodeShape(16, 64000, 1), stores={ME: store})
    refused = small.decide(DecisionRequest(ME, FP))
    assert isinstance(refused, Refusal) and "2 GPUs, the partition's nodes have 1" in refused.why
