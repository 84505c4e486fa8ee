"""Run times predicted from a workload's ended jobs and the time_min set from them
(model/runtime.py), worked by hand."""

import pytest

from slurm_synergy.model.runtime import Finished, TimeRule, predict, time_min_minutes

FP = "0123456789abcdef"
RULE = TimeRule()


def ended(job_id, elapsed_s, cpus=1, state="COMPLETED"):
    return Finished(job_id, 1000, FP, state, elapsed_s, cpus)


def test_one_job_predicts_its_time_with_twice_the_margin():
    p = predict([ended(7, 80)], decided_cpus=1, slowdown=1.5, rule=RULE)
    assert (p.seconds, p.jobs, p.spread, p.margin) == (80, 1, 0.0, 1.0)
    assert p.limit_s == 160
    assert time_min_minutes(p, 20, RULE) == 3          # 160 s -> 3 minutes


def test_a_job_on_more_cores_than_decided_counts_slowdown_times_longer():
    # The measured first job ran on 2 cores; the decision is 1 core at 1/1.25 the best rate.
    p = predict([ended(7, 80, cpus=2)], decided_cpus=1, slowdown=1.25, rule=RULE)
    assert p.seconds == 100
    # One on fewer cores than decided is not shortened.
    assert predict([ended(7, 80, cpus=1)], 2, 1.25, RULE).seconds == 80


def test_the_longest_of_the_last_five_and_three_times_their_spread():
    jobs = [ended(i, s) for i, s in enumerate([500, 100, 100, 110, 90, 100], start=1)]
    p = predict(jobs, 1, 1.0, RULE)          # job 1 (500 s) is past the last five
    assert (p.seconds, p.jobs) == (110, 5)
    assert p.spread == pytest.approx(0.2)
    assert p.margin == pytest.approx(0.6)     # 3 x 20% over the 50% margin


def test_no_prediction_after_a_timeout_or_without_enough_completed_jobs():
    assert predict([ended(1, 80), ended(2, 600, state="TIMEOUT")], 1, 1.0, RULE) is None
    assert predict([ended(1, 80, state="FAILED")], 1, 1.0, RULE) is None
    assert predict([ended(1, 80)], 1, 1.0, TimeRule(min_jobs=2)) is None
    assert predict([], 1, 1.0, RULE) is None


def test_time_min_is_at_least_the_floor_and_only_below_the_jobs_own_limit():
    p = predict([ended(1, 10), ended(2, 10)], 1, 1.0, RULE)
    assert time_min_minutes(p, 20, RULE) == 2                        # 15 s -> the floor
    assert time_min_minutes(p, 2, RULE) is None                      # not below --time
    long = predict([ended(1, 3600), ended(2, 3600)], 1, 1.0, RULE)
    assert time_min_minutes(long, 60, RULE) is None                  # 90 min > 60
    assert time_min_minutes(long, 120, RULE) == 90


def test_known_work_scales_a_run_of_less_and_leaves_out_other_work():
    jobs = [Finished(1, 1000, FP, "COMPLETED", 60, 1, ("i", 100)),
            Finished(2, 1000, FP, "COMPLETED", 100, 1, ("i", 1000)),
            Finished(3, 1000, FP, "COMPLETED", 900, 1, ("e", 3)),
            Finished(4, 1000, FP, "COMPLETED", 900, 1)]
    # 500 iterations: the 100-iteration run counts 5x (300 s), the longer one as it ran.
    p = predict(jobs, 1, 1.0, RULE, ("i", 500))
    assert (p.seconds, p.jobs) == (300, 2)
    # A job of no known work rests on the run of none alone.
    assert predict(jobs, 1, 1.0, RULE).jobs == 1
