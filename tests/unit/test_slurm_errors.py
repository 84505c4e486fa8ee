"""How a failed Slurm command is classified: a controller that is gone (refused, reset
mid-request, timed out) is SlurmUnreachable; a refusal of the job itself is SlurmError.
A stand-in `sbatch` on PATH prints what the real one prints in each case."""
import os
import stat

import pytest

from slurm_synergy.model.errors import SlurmError, SlurmUnreachable
from slurm_synergy.slurm import Slurm


def _fake(tmp_path, monkeypatch, message):
    exe = tmp_path / "sbatch"
    exe.write_text(f"#!/bin/sh\necho '{message}' >&2\nexit 1\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return Slurm(tmp_path / "slurm.conf", retry_s=0)


@pytest.mark.parametrize("message", [
    "sbatch: error: Batch job submission failed: Connection reset by peer",
    "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
    "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation",
    "sbatch: error: Batch job submission failed: Zero Bytes were transmitted or received",
    "sbatch: error: Batch job submission failed: Transport endpoint is not connected",
    "sbatch: error: Batch job submission failed: Unexpected missing socket error",
])
def test_a_controller_that_is_gone_is_unreachable(tmp_path, monkeypatch, message):
    slurm = _fake(tmp_path, monkeypatch, message)
    with pytest.raises(SlurmUnreachable, match="slurmctld unreachable"):
        slurm.sbatch(tmp_path / "job.sh")


def test_a_refused_job_is_not_unreachable(tmp_path, monkeypatch):
    slurm = _fake(tmp_path, monkeypatch,
                  "sbatch: error: Batch job submission failed: Requested node configuration is not available")
    with pytest.raises(SlurmError) as caught:
        slurm.sbatch(tmp_path / "job.sh")
    assert not isinstance(caught.value, SlurmUnreachable)
    assert "Requested node configuration is not available" in str(caught.value)
