"""The gres rewrite by GPU memory: a step that a type of the partition would not hold is
moved to the cheapest type that holds it; one that fits keeps its type; without an
estimate or a catalog nothing changes, and nothing is ever rejected."""

import dataclasses

from slurm_synergy.model.engine import NodeShape, decide
from slurm_synergy.model.gpufit import fit_gpu_type
from slurm_synergy.model.gpus import Catalog, GpuType
from slurm_synergy.model.policy import Policy
from slurm_synergy.model.profile import BatchPeak, GpuMemory
from tests.helpers import profile

T4 = GpuType("t4", 15360, 60, 70, 70, 10, 0.21)
A10 = GpuType("a10", 23028, 100, 150, 150, 15, 0.40)
A100 = GpuType("a100-40gb", 40960, 100, 400, 400, 50, 1.0)
H100 = GpuType("h100", 81559, 200, 700, 700, 70, 3.17)
CATALOG = Catalog({t.name: t for t in (T4, A10, A100, H100)})


def estimated(peaks: dict[int, float], batch: int = 64):
    mem = GpuMemory("fake tensors", batch, tuple(BatchPeak(b, p) for b, p in peaks.items()), 1.0)
    return dataclasses.replace(profile({2: 100.0, 1: 100.0}), gpu_memory=mem)


def test_a_step_a_small_gpu_would_not_hold_moves_to_one_that_does():
    # 20,000 MiB + 10% + 512 MiB of context = 22,512: over the T4's 15,360, under the A10's.
    fit = fit_gpu_type(estimated({64: 20_000.0}), ("a10", "t4"), Policy(), CATALOG)
    assert fit.gpu_type == "a10" and fit.need_mib == 20_000.0
    assert "t4 (15360 MiB) would not hold it" in fit.reason
    assert "jobs of this workload ask for a10" in fit.reason


def test_a_step_that_fits_every_type_keeps_the_job_s_own():
    fit = fit_gpu_type(estimated({64: 1_000.0}), ("a10", "t4"), Policy(), CATALOG)
    assert fit.gpu_type is None and "every catalogued type of the partition holds it" in fit.reason


def test_among_the_types_that_hold_it_the_cheapest_per_sample_wins():
    # Both hold 30 GB. Zeus's cost with eta 0.5 and 700 W the most: the A100
    # (0.5*400 + 0.5*700)/1.0 = 550, the H100 (0.5*700 + 0.5*700)/3.17 = 221.
    fit = fit_gpu_type(estimated({64: 30_000.0}), ("a100-40gb", "h100", "t4"), Policy(), CATALOG)
    assert fit.gpu_type == "h100" and "a100-40gb 550, h100 221" in fit.reason
    # 14 GB (15,912 MiB with headroom and context) fits the A10 and the A100, not the
    # T4. With time and energy weighed alike (400 W the most here) the A100 wins: 400
    # against the A10's (75 + 200)/0.4 = 688; weighing energy alone, the slower A10
    # does: 150/0.4 = 375 against 400.
    types = ("a10", "a100-40gb", "t4")
    assert fit_gpu_type(estimated({64: 14_000.0}), types, Policy(), CATALOG).gpu_type == \
        "a100-40gb"
    assert fit_gpu_type(estimated({64: 14_000.0}), types, Policy(zeus_eta=1.0),
                        CATALOG).gpu_type == "a10"


def test_no_type_holds_it_keeps_the_request_and_advises_accumulation():
    fit = fit_gpu_type(estimated({32: 12_000.0, 64: 24_000.0}), ("a10", "t4"), Policy(),
                       CATALOG)
    assert fit.gpu_type is None
    assert "no type of the partition holds it (the largest, a10, has 23028 MiB)" in fit.reason
    assert "advice: batch 32 with 2 gradient-accumulation steps needs 12000 MiB" in fit.reason


def test_without_an_estimate_or_a_catalog_nothing_changes():
    failed = dataclasses.replace(profile({2: 100.0, 1: 100.0}),
                                 gpu_memory=GpuMemory("", 64, reason="the estimate failed: x"))
    fit = fit_gpu_type(failed, ("a10", "t4"), Policy(), CATALOG)
    assert fit.gpu_type is None and "the estimate failed: x" in fit.reason
    none = fit_gpu_type(profile({2: 100.0, 1: 100.0}), ("a10", "t4"), Policy(), CATALOG)
    assert none.gpu_type is None and "no GPU memory estimate" in none.reason
    bad = Catalog({}, "the GPU catalog is not used: [gpu.t4]: missing speed")
    fit = fit_gpu_type(estimated({64: 20_000.0}), ("a10", "t4"), Policy(), bad)
    assert fit.gpu_type is None and "missing speed" in fit.reason


def test_a_type_missing_from_the_catalog_is_no_reason_to_move_a_job():
    fit = fit_gpu_type(estimated({64: 20_000.0}), ("a10", "mystery"), Policy(), CATALOG)
    assert fit.gpu_type is None and "mystery is not in the catalog" in fit.reason


def test_a_peak_measured_on_a_gpu_wins_over_the_estimate():
    p = estimated({64: 20_000.0})
    p = dataclasses.replace(p, gpu=dataclasses.replace(p.gpu, peak_torch_mem_mb=2_000.0))
    fit = fit_gpu_type(p, ("a10", "t4"), Policy(), CATALOG)
    assert fit.gpu_type is None and "measured on the GPU" in fit.reason


def test_the_decision_carries_the_type_into_its_gres():
    shape = NodeShape(2, 8000, 2, ("a10", "t4"))
    d = decide(estimated({64: 20_000.0}), shape, Policy(), CATALOG)
    assert d.gpu_type == "a10" and d.gres == "gpu:a10:1"
    assert any(r.startswith("GPU memory:") for r in d.reasons)
    # With no catalog the decision is what it was before the catalog existed.
    assert decide(estimated({64: 20_000.0}), shape, Policy()).gpu_type == ""
