"""`synergy tune`'s plan: which pending jobs fall back to their share, and which never."""

from __future__ import annotations

from slurm_synergy.slurm import NodeUse, QueuedJob
from slurm_synergy.tune.plan import plan

NODE = NodeUse("n1", "mixed", 24, 20, 500_000, 100_000, 8, 4)     # 4 cores, 4 GPUs free


def job(job_id, user="ann", state="PENDING", reason="Resources", cpus=12, mem=125_000,
        gpus=1, tasks=1, nodes=1):
    return QueuedJob(job_id, user, state, reason, cpus, tasks, mem, gpus, nodes, "gpu", "")


def test_a_job_that_cannot_start_at_its_ideal_falls_back_to_its_share():
    changes, _ = plan([job("1")], [NODE], "ann", admin=False)
    assert [(c.job_id, c.cpus_after, c.mem_after_mb, c.node) for c in changes] == \
        [("1", 3, 62_500, "n1")]


def test_the_room_a_change_takes_is_not_planned_twice():
    changes, notes = plan([job("1"), job("2")], [NODE], "ann", admin=False)
    assert [c.job_id for c in changes] == ["1"]          # 4 cores free: one share of 3
    assert any(n.startswith("2: no node has room") for n in notes)


def test_running_held_multi_node_and_other_users_jobs_are_left_alone():
    queue = [job("1", state="RUNNING"), job("2", reason="JobHeldUser"), job("3", nodes=2),
             job("4", user="bob"), job("5", gpus=0), job("6", cpus=2, mem=1000)]
    changes, notes = plan(queue, [NODE], "ann", admin=False)
    assert changes == []
    assert [n.split(":")[0] for n in notes] == ["2", "3", "4", "5", "6"]
    assert "bob's job; only an admin may tune it" in notes[2]
    assert "fits as asked" in notes[4]


def test_an_admin_tunes_every_users_jobs():
    changes, _ = plan([job("4", user="bob")], [NODE], "root", admin=True)
    assert [c.job_id for c in changes] == ["4"]


def test_a_share_is_never_larger_than_the_request_and_drained_nodes_give_no_room():
    small_mem = job("1", cpus=8, mem=10_000)
    changes, _ = plan([small_mem], [NODE], "ann", admin=False)
    assert (changes[0].cpus_after, changes[0].mem_after_mb) == (3, 10_000)
    drained = NodeUse("n1", "drained", 24, 0, 500_000, 0, 8, 0)
    assert plan([job("1")], [drained], "ann", admin=False)[0] == []
