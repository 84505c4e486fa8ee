"""`synergy tune`'s plan: which pending jobs fall back to their share, and which never."""

from __future__ import annotations

import pytest

from slurm_synergy.model.errors import SlurmError
from slurm_synergy.slurm import NodeUse, QueuedJob, Slurm
from slurm_synergy.tune.plan import plan_resizes

NODE = NodeUse("n1", "mixed", 24, 20, 500_000, 100_000, 8, 4)     # 4 cores, 4 GPUs free


def job(job_id, user="ann", state="PENDING", reason="Resources", cpus=12, mem=125_000,
        gpus=1, tasks=1, nodes=1, partition="gpu", gres="gres:gpu:1", features="",
        array=False):
    return QueuedJob(job_id, user, state, reason, cpus, tasks, mem, gpus, nodes, partition,
                     gres, features, array)


def test_a_job_that_cannot_start_at_its_ideal_falls_back_to_its_share():
    changes, _ = plan_resizes([job("1")], [NODE], "ann", admin=False)
    assert [(c.job_id, c.cpus_after, c.mem_after_mb, c.node) for c in changes] == \
        [("1", 3, 62_500, "n1")]


def test_the_room_a_change_takes_is_not_planned_twice():
    changes, notes = plan_resizes([job("1"), job("2")], [NODE], "ann", admin=False)
    assert [c.job_id for c in changes] == ["1"]          # 4 cores free: one share of 3
    assert any(n.startswith("2: no node has room") for n in notes)


def test_running_held_multi_node_and_other_users_jobs_are_left_alone():
    queue = [job("1", state="RUNNING"), job("2", reason="JobHeldUser"), job("3", nodes=2),
             job("4", user="bob"), job("5", gpus=0), job("6", cpus=2, mem=1000)]
    changes, notes = plan_resizes(queue, [NODE], "ann", admin=False)
    assert changes == []
    assert [n.split(":")[0] for n in notes] == ["2", "3", "4", "5", "6"]
    assert "bob's job; only an admin may tune it" in notes[2]
    assert "fits as asked" in notes[4]


def test_an_admin_tunes_every_users_jobs():
    changes, _ = plan_resizes([job("4", user="bob")], [NODE], "root", admin=True)
    assert [c.job_id for c in changes] == ["4"]


def test_a_share_is_never_larger_than_the_request_and_drained_nodes_give_no_room():
    small_mem = job("1", cpus=8, mem=10_000)
    changes, _ = plan_resizes([small_mem], [NODE], "ann", admin=False)
    assert (changes[0].cpus_after, changes[0].mem_after_mb) == (3, 10_000)
    drained = NodeUse("n1", "drained", 24, 0, 500_000, 0, 8, 0)
    assert plan_resizes([job("1")], [drained], "ann", admin=False)[0] == []


def test_a_job_that_fits_as_asked_keeps_its_room_from_the_next():
    # 4 cores free: job 1 starts as asked there, so job 2 is not shrunk onto them.
    changes, notes = plan_resizes([job("1", cpus=4, mem=1000), job("2")], [NODE], "ann", admin=False)
    assert changes == []
    assert notes[0].startswith("1: fits as asked") and notes[1].startswith("2: no node has")


def test_jobs_whose_share_cannot_be_worked_out_here_are_left_alone():
    queue = [job("1", array=True), job("2", partition="big"), job("3", features="ib"),
             job("4", gres="gres:gpu:a100:1"), job("5", mem=0), job("6")]
    changes, notes = plan_resizes(queue, [NODE], "ann", admin=False, partition="gpu", tuned={"6"})
    assert changes == []
    assert [n.split(": ", 1)[1] for n in notes] == [
        "a job array: one change would resize every pending task",
        "waits for partition big, not gpu",
        "asks for node features (ib)",
        "asks for GPU type(s) a100",
        "asks for all of a node's memory",
        "tuned before and not put back; --revert it first"]
    # A job allowed on several partitions, one of them this one, may be tuned.
    assert plan_resizes([job("7", partition="big,gpu")], [NODE], "ann", False, "gpu")[0]


def test_memory_per_cpu_is_asked_only_of_jobs_that_would_change_and_keeps_them():
    asked = []

    def per_cpu(job_id):
        asked.append(job_id)
        return True

    changes, notes = plan_resizes([job("1", reason="JobHeldUser"), job("2")], [NODE], "ann", False,
                          memory_per_cpu=per_cpu)
    assert changes == [] and asked == ["2"]
    assert notes[1] == "2: its memory is per CPU; fewer cores would cut it"


class _Canned(Slurm):
    def __init__(self, out):
        super().__init__()
        self.out = out

    def run(self, args, timeout=60):
        return self.out


def _line(*v):
    return "|".join(f"{x:<200}" for x in v) + "|"


def test_the_queue_is_read_without_free_text_and_a_repeated_job_is_refused():
    out = "\n".join([
        _line("12", "N/A", "ann", "PENDING", "Resources", "4", "1", "4G", "gres:gpu:a100:2",
              "1", "gpu,big", "(null)"),
        _line("13_[3-9]", "3-9", "bob", "PENDING", "Priority", "1", "1", "1000M", "N/A", "1",
              "gpu", "ib")])
    q = _Canned(out).queue()
    assert [(j.job_id, j.mem_mb, j.gpus, j.gres, j.features, j.array) for j in q] == [
        ("12", 4096, 2, "gres:gpu:a100:2", "", False), ("13_[3-9]", 1000, 0, "", "ib", True)]
    with pytest.raises(SlurmError, match="listed job 12 twice"):
        _Canned(out + "\n" + out.splitlines()[0]).queue()
