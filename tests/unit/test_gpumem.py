"""Peak GPU memory estimated on the CPU with fake tensors: it agrees with an independent
count, grows with the batch, never allocates the batch, and a failure is recorded, not
raised."""

import dataclasses
import json
import resource

import pytest

from profiler.gpumem import estimate
from slurm_synergy.model.profile import profile_from_json
from slurm_synergy.profiling.gpumem import estimate_gpu_memory, nearby
from tests.unit.test_engine import profile

SMALL = {
    "resnet": ["-a", "resnet", "--depth", "8", "--crop", "32"],
    "alexnet": ["-a", "alexnet", "--crop", "32"],
    "mobilenet": ["-a", "mobilenet", "--crop", "32"],
    "transformer": ["-a", "transformer", "--seq-len", "64"],
    "lstm": ["-a", "lstm", "--seq-len", "64"],
    "m5": ["-a", "m5"],
}


@pytest.mark.parametrize("arch", sorted(SMALL))
def test_the_estimate_agrees_with_a_count_of_what_the_step_keeps(arch):
    argv = [*SMALL[arch], "--data", "unused"]
    small, large = estimate(argv, 8, check=True), estimate(argv, 16, check=True)
    assert 0 < small.peak_mib < large.peak_mib
    for e in (small, large):
        ratio = e.peak_mib / e.analytic_mib
        # The LSTM's backward keeps per-step gate gradients the count leaves out.
        assert (0.9 <= ratio <= 1.1) if arch != "lstm" else (0.9 <= ratio <= 1.3), ratio
        assert {"Parameter", "Activation"} <= set(e.parts_mib)


def test_a_batch_far_beyond_this_machine_is_estimated_without_allocating_it():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    e = estimate(["-a", "resnet", "--depth", "18", "--crop", "224", "--data", "x"], 1024)
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert e.peak_mib > 20_000          # tens of GB on a GPU ...
    assert grown_mib < 1_000            # ... while this process grew by less than 1 GB


def test_the_profiler_records_the_estimate_at_the_batch_and_beside_it():
    mem = estimate_gpu_memory(True, [*SMALL["m5"], "--data", "unused", "-b", "8"], 8)
    assert mem.method and [p.batch for p in mem.peaks] == nearby(8) == [4, 8, 16]
    # The trainer's own --batch among its arguments is not taken for --batches.
    withb = estimate_gpu_memory(True, [*SMALL["m5"], "--batch", "8", "--data", "x"], 8)
    assert [p.batch for p in withb.peaks] == [4, 8, 16]
    assert mem.at(8) is not None and mem.seconds > 0
    # It travels in the profile and reads back.
    p = dataclasses.replace(profile({2: 100.0, 1: 100.0}), gpu_memory=mem)
    assert profile_from_json(p.to_json(), "test").gpu_memory == mem


def test_a_failed_estimate_is_recorded_with_its_reason_and_no_figure():
    mem = estimate_gpu_memory(True, ["-a", "resnet", "--depth", "0", "--data", "x"], 8)
    assert not mem.method and not mem.peaks and "the estimate failed" in mem.reason
    user = estimate_gpu_memory(False, ["--whatever"], 8)
    assert not user.method and "built-in trainer only" in user.reason
    assert "batch size is unknown" in estimate_gpu_memory(True, [], 0).reason


def test_the_command_prints_one_json_object_per_batch(capsys):
    from profiler.gpumem import main
    assert main(["-a", "m5", "--batches", "2,4", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["batch"] for r in rows] == [2, 4] and rows[0]["peak_mib"] < rows[1]["peak_mib"]
