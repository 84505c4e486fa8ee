"""The Slurm queue model: priority order, the main scheduler's stop at a blocked job,
backfill against time limits, and a workload right-sized once its first job is measured.
Every expected figure is worked out by hand from the rules in slurmqueue.py."""

from dataclasses import replace

import pytest

from slurm_synergy.simulate.priority import Priority
from slurm_synergy.simulate.slurmqueue import (Node, QueueJob, Scheduler, Size, figures,
                                               run_queue, run_site)

NODE = Node(cpus=2, mem_mb=20000, gpus=4)
WIDE = Size(2, 3072, 100.0)        # a CPU-hungry job: 100 s on its 2 cores
LIMIT = 1200.0                     # what users ask: 20 minutes


def job(i, workload="w", submit=0.0, asked=WIDE, decided=None, limit=LIMIT, measuring=0.0):
    return QueueJob(i, workload, submit, limit, asked, decided, measuring)


def starts(ran):
    return {r.job_id: (r.start_s, r.end_s) for r in ran}


def test_jobs_asking_the_whole_node_run_one_after_another_in_submission_order():
    ran = run_queue([job(2, submit=1.0), job(1)], NODE)
    assert starts(ran) == {1: (0.0, 100.0), 2: (100.0, 200.0)}
    f = figures(ran)
    assert (f.makespan_s, f.mean_jct_s, f.mean_wait_s) == (200.0, (100 + 199) / 2, 99 / 2)


def test_jobs_half_as_wide_share_the_node():
    half = Size(1, 1024, 75.0)
    ran = run_queue([job(i, asked=half) for i in range(1, 5)], NODE)
    assert starts(ran) == {1: (0, 75), 2: (0, 75), 3: (75, 150), 4: (75, 150)}


def test_a_blocked_job_stops_the_main_scheduler_and_a_long_limit_stops_backfill():
    # 1 holds one core; 2 needs both and waits for 1; 3 needs one core, free now, but its
    # 20-minute limit would delay 2's start (1's limit ends at 1200 s): it waits too.
    one = Size(1, 1024, 300.0)
    ran = run_queue([job(1, "a", asked=one), job(2, "b"), job(3, "c", asked=Size(1, 1024, 50))],
                    NODE)
    assert starts(ran) == {1: (0, 300), 2: (300, 400), 3: (400, 450)}


def test_backfill_starts_a_job_whose_limit_ends_before_the_blocked_jobs_start():
    # The same queue with job 3 limited to 2 minutes: backfill's first pass (30 s) starts
    # it, as it ends (by its limit, rounded to bf_resolution) before 1's limit does.
    one = Size(1, 1024, 300.0)
    ran = run_queue([job(1, "a", asked=one), job(2, "b"),
                     job(3, "c", asked=Size(1, 1024, 50), limit=120)], NODE)
    assert starts(ran) == {1: (0, 300), 3: (30, 80), 2: (300, 400)}


def test_a_workload_is_measured_by_its_first_job_then_right_sized_in_the_queue():
    light = Size(1, 1024, 80.0)
    jobs = [job(i, asked=Size(2, 3072, 60.0), decided=light, measuring=70.0)
            for i in range(1, 4)]
    ran = run_queue(jobs, NODE)
    # 1 measures as asked (70 s); then 2 and 3 start right-sized, together.
    assert starts(ran) == {1: (0, 70), 2: (70, 150), 3: (70, 150)}
    assert [r.cpus for r in ran] == [2, 1, 1]


def test_without_decisions_the_same_queue_runs_as_asked():
    jobs = [job(i, asked=Size(2, 3072, 60.0)) for i in range(1, 4)]
    assert starts(run_queue(jobs, NODE)) == {1: (0, 60), 2: (60, 120), 3: (120, 180)}


def test_a_job_wider_than_the_node_is_refused():
    with pytest.raises(ValueError, match="job 1 asks more than any node of its partition has"):
        run_queue([job(1, asked=Size(4, 1024, 10.0))], NODE)


def _gap_queue(short_run_s: float) -> list[QueueJob]:
    """A's first job ends at 20 s; at 100 s B holds a core for 150 s (limit 3 min), C's
    two-core job waits for it at the top, and A's next job (limit 20 min) waits behind."""
    one = lambda run: Size(1, 100, run)           # noqa: E731
    return [QueueJob(1, "A", 0.0, 1200.0, one(20.0)),
            QueueJob(2, "B", 100.0, 180.0, one(150.0)),
            QueueJob(3, "C", 100.0, 600.0, Size(2, 100, 1.0)),
            QueueJob(4, "A", 100.0, 1200.0, one(short_run_s))]


def test_time_min_lets_backfill_start_a_job_whose_time_does_not_fit_the_gap():
    node = Node(2, 1000, 4)
    asked = {r.job_id: r for r in run_queue(_gap_queue(30.0), node)}
    # As asked: job 4 waits for B's end (250 s) and C's second (251 s).
    assert asked[4].start_s == 251.0
    ours = {r.job_id: r for r in run_queue(_gap_queue(30.0), node, limits="ours")}
    # Its time_min (20 s x 2 -> the 2-minute floor) ends before C's start at 280 s
    # (B's limit): the backfill pass at 120 s starts it; it runs its 30 s, never killed.
    assert (ours[4].start_s, ours[4].end_s, ours[4].killed) == (120.0, 150.0, False)
    assert ours[3].start_s == 250.0
    # A history-based --time (the mean of the last two runs: 20 s) starts it as soon,
    # and kills it at 20 s.
    history = {r.job_id: r for r in run_queue(_gap_queue(30.0), node, limits="history")}
    assert (history[4].start_s, history[4].end_s, history[4].killed) == (120.0, 140.0, True)
    assert figures(list(history.values())).killed == 1


def test_a_run_past_its_time_min_keeps_the_node_in_slurms_view_until_it_ends():
    # Job 4 runs 200 s, past its 2-minute time_min: its limit goes back to 20 minutes
    # 60 s before it would end it, and C (two cores) starts only once it ends.
    ran = {r.job_id: r for r in run_queue(_gap_queue(200.0), Node(2, 1000, 4), limits="ours")}
    assert ran[4].past_time_min and not ran[4].killed
    assert ran[4].end_s == 320.0 and ran[3].start_s == 320.0


# Many nodes, partitions, priority/multifactor, bf_window and --mem-update. Sizes are
# (cores, MB, run s, GPUs); the expected starts are worked out by hand.

def test_a_job_goes_to_the_first_node_with_room():
    nodes = [Node(2, 4000, 1), Node(2, 4000, 1)]
    ran = run_queue([job(i, asked=Size(2, 1000, 100.0)) for i in (1, 2, 3)], nodes)
    assert [(r.node, r.start_s) for r in ran] == [(0, 0.0), (1, 0.0), (0, 100.0)]


def test_a_blocked_partition_does_not_stop_another_ones_jobs():
    nodes = [Node(2, 4000, 1, ("a",)), Node(2, 4000, 1, ("b",))]
    jobs = [QueueJob(1, "x", 0.0, LIMIT, WIDE, partition="a"),
            QueueJob(2, "x", 0.0, LIMIT, WIDE, partition="a"),
            QueueJob(3, "y", 0.0, LIMIT, WIDE, partition="b")]
    got = {r.job_id: (r.node, r.start_s) for r in run_queue(jobs, nodes)}
    assert got == {1: (0, 0.0), 2: (0, 100.0), 3: (1, 0.0)}


def test_a_job_no_node_of_its_partition_can_hold_is_refused():
    with pytest.raises(ValueError, match="job 1 asks more than any node of its partition"):
        run_queue([QueueJob(1, "x", 0.0, LIMIT, Size(1, 10, 1.0), partition="b")],
                  [Node(2, 4000, 1, ("a",))])


def test_fair_share_runs_the_user_who_used_less_first():
    # u1's job runs 0-100 s and u3's 100-300 s; u1 (at 150 s) and u2 (at 160 s) submit
    # one job each. With fair-share weighing, u2's job, submitted later, starts first: u1
    # has used its share (factor 1/8), u2 nothing (1). priority/basic runs u1's first.
    sched = Scheduler(priority=Priority(weight_fairshare=1000))
    jobs = [QueueJob(1, "a", 0.0, LIMIT, WIDE, user="u1"),
            QueueJob(5, "c", 100.0, LIMIT, replace(WIDE, run_s=200.0), user="u3"),
            QueueJob(2, "a", 150.0, LIMIT, WIDE, user="u1"),
            QueueJob(3, "b", 160.0, LIMIT, WIDE, user="u2")]
    got = {r.job_id: r.start_s for r in run_site(jobs, NODE, sched).ran}
    assert (got[3], got[2]) == (300.0, 400.0)
    basic = {r.job_id: r.start_s for r in run_queue(jobs, NODE)}
    assert (basic[2], basic[3]) == (300.0, 400.0)


def test_backfill_gives_no_reservation_past_its_window():
    # 1 holds one of two GPUs with a 3-day limit; 2 needs both, so its start lies past
    # bf_window (1 day) and it gets no reservation: 3 (one GPU, a 4-day limit) starts at
    # the first pass. With a 5-day window 2's reservation at 3 days stops 3, which then
    # waits for 2 to run once 1 ends.
    jobs = [QueueJob(1, "a", 0.0, 3 * 86400.0, Size(1, 100, 500.0, 1)),
            QueueJob(2, "b", 0.0, 3600.0, Size(1, 100, 50.0, 2)),
            QueueJob(3, "c", 0.0, 4 * 86400.0, Size(1, 100, 50.0, 1))]
    node = Node(4, 1000, 2)
    ran = {r.job_id: r.start_s for r in run_site(jobs, node).ran}
    assert (ran[3], ran[2]) == (30.0, 500.0)
    wide = Scheduler(bf_window_s=5 * 86400.0)
    ran = {r.job_id: r.start_s for r in run_site(jobs, node, wide).ran}
    assert (ran[2], ran[3]) == (500.0, 550.0)


def test_mem_update_frees_what_a_running_job_no_longer_holds():
    # 1 asks all the node's memory, lowered after 60 s to 1000 MB: 2 starts then.
    jobs = [QueueJob(1, "a", 0.0, LIMIT, Size(1, 20000, 300.0), mem_update=(60.0, 1000)),
            QueueJob(2, "b", 0.0, LIMIT, Size(1, 5000, 10.0))]
    ran = {r.job_id: r.start_s for r in run_queue(jobs, NODE)}
    assert ran[2] == 60.0
    jobs[0] = replace(jobs[0], mem_update=None)
    assert {r.job_id: r.start_s for r in run_queue(jobs, NODE)}[2] == 300.0


def test_gpus_left_idle_for_want_of_memory_are_counted_while_jobs_wait():
    # 1 holds 1 of 4 GPUs and all the memory for 300 s; 2 waits: 3 GPUs idle for want of
    # memory, sampled at each backfill pass (30 s apart) until 1 ends.
    jobs = [QueueJob(1, "a", 0.0, LIMIT, Size(1, 20000, 300.0)),
            QueueJob(2, "b", 0.0, LIMIT, Size(1, 5000, 10.0))]
    out = run_site(jobs, NODE)
    assert out.stranded_gpu_s == out.idle_gpu_s == 3 * 30.0 * 9
