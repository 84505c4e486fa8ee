"""Peak GPU memory estimated on the CPU with fake tensors: it agrees with an independent
count, grows with the batch, never allocates the batch, and a failure is recorded, not
raised."""

import dataclasses
import json
import resource

import pytest

from profiler.gpumem import estimate
from slurm_synergy.model.profile_read import profile_from_json
from slurm_synergy.measure.offline.gpumem import estimate_gpu_memory, nearby
from tests.helpers import profile

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
    mem = estimate_gpu_memory([*SMALL["m5"], "--data", "unused", "-b", "8"], 8)
    assert mem.method and [p.batch for p in mem.peaks] == nearby(8) == [4, 8, 16]
    # The trainer's own --batch among its arguments is not taken for --batches.
    withb = estimate_gpu_memory([*SMALL["m5"], "--batch", "8", "--data", "x"], 8)
    assert [p.batch for p in withb.peaks] == [4, 8, 16]
    assert mem.at(8) is not None and mem.seconds > 0
    # It travels in the profile and reads back.
    p = dataclasses.replace(profile({2: 100.0, 1: 100.0}), gpu_memory=mem)
    assert profile_from_json(p.to_json(), "test").gpu_memory == mem


def test_a_failed_estimate_is_recorded_with_its_reason_and_no_figure():
    mem = estimate_gpu_memory(["-a", "resnet", "--depth", "0", "--data", "x"], 8)
    assert not mem.method and not mem.peaks and "the estimate failed" in mem.reason
    assert "batch size is unknown" in estimate_gpu_memory([], 0).reason


def test_the_command_prints_one_json_object_per_batch(capsys):
    from profiler.gpumem import main
    assert main(["-a", "m5", "--batches", "2,4", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["batch"] for r in rows] == [2, 4] and rows[0]["peak_mib"] < rows[1]["peak_mib"]


def _runner(tmp_path, command, args):
    from slurm_synergy.measure.offline.steps import Runner
    from slurm_synergy.slurm import Slurm
    return Runner(command=command, script_args=args, workers_option=None,
                  iterations_option=None, procs=1, iterations=10, warmup=2,
                  first_batch_s=120, mem_mb=2048, gpus=0, launcher="local",
                  workdir=tmp_path, cwd=tmp_path, timeout_s=300, name="t", slurm=Slurm())


def test_a_users_script_is_measured_by_its_own_steps_and_agrees_with_the_fake_model(tmp_path):
    """The probe's memory mode tracks a script it knows nothing about; on the built-in
    trainer, run as a script, it finds what the fake-tensor estimate finds."""
    import sys
    from slurm_synergy.measure.offline.gpumem import SCRIPT_METHOD, measure_script_memory
    args = [*SMALL["m5"], "--batch", "8", "--data", str(tmp_path / "data"), "--generate-data",
            "--dataset-size", "64"]
    mem = measure_script_memory(_runner(tmp_path, [sys.executable, "-m", "profiler.train"],
                                        args), 1, 1, 0, workers=1)
    assert mem.method == SCRIPT_METHOD, mem.reason
    assert mem.batch == 8 and mem.seconds > 0       # the batch as the script took it
    fake = estimate_gpu_memory([*SMALL["m5"], "--data", "x"], 8).at(8)
    assert fake is not None and abs(mem.at(8) / fake - 1) < 0.05, (mem.at(8), fake)


def test_a_script_that_will_not_train_on_the_cpu_gives_no_estimate(tmp_path):
    import sys
    from slurm_synergy.measure.offline.gpumem import measure_script_memory
    script = tmp_path / "cuda_only.py"
    script.write_text("import torch\ntorch.zeros(1, device='cuda')\n")
    mem = measure_script_memory(_runner(tmp_path, [sys.executable, str(script)], []), 1, 1, 8, workers=1)
    assert not mem.method and mem.reason.startswith("the script's step did not run on the CPU")
    ddp = measure_script_memory(_runner(tmp_path, [sys.executable, str(script)], []), 2, 2, 8, workers=1)
    assert not ddp.method and "torchrun" in ddp.reason
