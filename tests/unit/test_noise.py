"""How far apart runs lie, and when they cannot tell two core counts apart."""

import dataclasses

import pytest

from slurm_synergy.model.noise import NoiseRule, cannot_tell, spread_of, unsettled

RULE = NoiseRule(tolerance=0.05, min_spread=0.10, max_spread=0.25, max_loss=0.10)


def test_the_spread_is_half_the_range_of_two_and_robust_from_three():
    assert spread_of([90.0, 110.0]) == pytest.approx(0.10)
    assert spread_of([90.0, 110.0, 100.0]) == pytest.approx(0.10)
    # mobilenet's 1-core runs of one bench round, and two more near its usual rate:
    # the range says ±11.8%, the median absolute deviation ±4.2%.
    assert spread_of([104.65, 83.35, 90.0, 91.0]) == pytest.approx(3.825 / 90.5)
    assert spread_of([100.0]) is None and spread_of([]) is None
    assert spread_of([0.0, 0.0]) is None


def test_cannot_tell_draws_the_tolerance_line_from_the_bottom_of_the_best():
    # 0.95 * 100 * 0.9 = 85.5: 78 * 1.1 = 85.8 reaches it, 77 * 1.1 = 84.7 does not.
    assert cannot_tell(78.0, 0.10, 100.0, 0.10, 0.05)
    assert not cannot_tell(77.0, 0.10, 100.0, 0.10, 0.05)


def test_unsettled_names_the_pairs_more_runs_could_change():
    runs = {4: [100.0, 101.0], 2: [88.0, 96.0], 1: [50.0, 51.0]}
    assert unsettled(runs, RULE) == {2, 4}
    # Trusting tight runs (no floor) settles it: 92 * 1.043 < 0.95 * 100.5 * 0.995.
    untrusting = dataclasses.replace(RULE, min_spread=0.0)
    assert unsettled({4: [100.0, 101.0], 2: [91.0, 93.0]}, untrusting) == set()
    # Within the tolerance by the medians: the fewer cores win whatever the noise.
    assert unsettled({2: [100.0, 101.0], 1: [97.0, 98.0]}, RULE) == set()
    # Runs further apart than max_spread: the decision would refuse them.
    assert 1 in unsettled({2: [100.0, 101.0], 1: [40.0, 100.0]}, RULE)
    # A single run has no spread: nothing to weigh.
    assert unsettled({2: [100.0], 1: [90.0]}, RULE) == set()


def test_runs_far_under_the_noise_allowance_are_settled():
    # 80 of 100.5 cannot be told from the tolerance line (80 * 1.1 >= 0.95 * 100.5 * 0.9)
    # but even the top of its band, 88, is 12% under: more runs cannot bring it within
    # max_noise_loss, so they would change nothing.
    far = {2: [100.0, 101.0], 1: [79.0, 81.0]}
    assert cannot_tell(80.0, 0.10, 100.5, 0.10, 0.05)
    assert unsettled(far, RULE) == set()
    # 85's band reaches 93.5, past the 90% line: more runs may move its median across.
    assert unsettled({2: [100.0, 101.0], 1: [84.0, 86.0]}, RULE) == {1, 2}
    # With max_loss at the tolerance the medians alone decide: nothing is unsettled.
    medians = dataclasses.replace(RULE, max_loss=0.05)
    assert unsettled({2: [100.0, 101.0], 1: [84.0, 86.0]}, medians) == set()


def test_the_noise_excuses_no_loss_past_max_loss():
    assert RULE.excused(90.0, 100.0) and not RULE.excused(89.9, 100.0)
    assert not dataclasses.replace(RULE, max_loss=0.0).excused(99.9, 100.0)
