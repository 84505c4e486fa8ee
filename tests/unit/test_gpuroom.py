"""Before any step, the profiler checks that the job's GPU type holds the step: a type
that would not makes the job move (nothing measured there); anything it cannot tell
leaves the steps to run as before."""

import pytest

from slurm_synergy import paths
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.policy import load_site
from slurm_synergy.model.profile import BatchPeak, GpuMemory
from slurm_synergy.measure.offline.gpuroom import GpuMove, check_room, read_move, write_move
from slurm_synergy.slurm import Node


class Cluster:
    """sinfo and squeue as the check asks them: the partition's nodes, the job's gres."""

    def __init__(self, gres: str, fail: bool = False) -> None:
        self.job_gres, self.fail = gres, fail

    def gres(self, job_id: str) -> str:
        if self.fail:
            raise SynergyError("slurmctld unreachable")
        return self.job_gres

    def nodes(self, partition=None):
        return [Node("node1", "idle", 2, 20000, "gpu:local1g:2,gpu:local4g:2")]


def estimate(peak_mib: float, batch: int = 32) -> GpuMemory:
    return GpuMemory("fake tensors", batch, (BatchPeak(batch // 2, peak_mib / 2),
                                             BatchPeak(batch, peak_mib)), 5.0)


SITE = load_site(paths.ETC / "policy.toml")     # the shipped policy and GPU catalog


def test_a_step_the_jobs_type_would_not_hold_moves_the_job():
    # 600 MiB + 10% + 512 MiB of context = 1172 MiB: over local1g's 1024.
    move, why = check_room(estimate(600.0), "7", "gpu", Cluster("gres:gpu:local1g:1"), *SITE)
    assert move == GpuMove("local4g", "local1g", move.reason) and why == ""
    assert "local1g (1024 MiB) would not hold it" in move.reason


@pytest.mark.parametrize("gres, peak, why", [
    ("gres:gpu:local1g:1", 300.0, "local1g (1024 MiB) holds it"),
    ("gres:gpu:1", 600.0, "names no one GPU type"),
    ("gres:gpu:a800:1", 600.0, "a800 is not in the GPU catalog"),
    ("gres:gpu:local4g:1", 6000.0, "no type of the partition holds it"),
])
def test_what_it_cannot_tell_or_need_not_change_runs_the_steps_here(gres, peak, why):
    move, reason = check_room(estimate(peak), "7", "gpu", Cluster(gres), *SITE)
    assert move is None and why in reason


def test_a_failed_check_or_estimate_runs_the_steps_here(tmp_path):
    move, reason = check_room(estimate(600.0), "7", "gpu", Cluster("", fail=True), *SITE)
    assert move is None and "could not be made (slurmctld unreachable)" in reason
    failed = GpuMemory("", 32, (), 1.0, "fake tensors failed")
    assert check_room(failed, "7", "gpu", Cluster("gres:gpu:local1g:1"), *SITE)[0] is None
    bad = tmp_path / "policy.toml"
    bad.write_text("[gpu.local1g]\nmemory_mib = 'lots'\n")
    move, reason = check_room(estimate(600.0), "7", "gpu", Cluster("gres:gpu:local1g:1"),
                              *load_site(bad))
    assert move is None and "not in the GPU catalog" in reason


def test_the_move_is_read_back_and_a_forged_one_refused(tmp_path):
    move = GpuMove("local4g", "local1g", "why")
    assert read_move(write_move(tmp_path, move)) == move
    (tmp_path / "gpu-move.json").write_text('{"gpu_type": "x;rm", "from_type": "", "reason": ""}')
    with pytest.raises(SynergyError, match="is not a GPU type"):
        read_move(tmp_path / "gpu-move.json")
    (tmp_path / "gpu-move.json").write_text("{}")
    with pytest.raises(SynergyError, match="not a GPU move"):
        read_move(tmp_path / "gpu-move.json")
