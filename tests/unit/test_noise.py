"""How far apart runs lie, and when they cannot tell two core counts apart."""

import pytest

from slurm_synergy.model.noise import cannot_tell, spread_of, unsettled


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
    assert unsettled(runs, 0.05, 0.10, 0.25) == {2, 4}
    # Trusting tight runs (no floor) settles it: 92 * 1.043 < 0.95 * 100.5 * 0.995.
    assert unsettled({4: [100.0, 101.0], 2: [91.0, 93.0]}, 0.05, 0.0, 0.25) == set()
    # Within the tolerance by the medians: the fewer cores win whatever the noise.
    assert unsettled({2: [100.0, 101.0], 1: [97.0, 98.0]}, 0.05, 0.10, 0.25) == set()
    # Runs further apart than max_spread: the decision would refuse them.
    assert 1 in unsettled({2: [100.0, 101.0], 1: [40.0, 100.0]}, 0.05, 0.10, 0.25)
    # A single run has no spread: nothing to weigh.
    assert unsettled({2: [100.0], 1: [90.0]}, 0.05, 0.10, 0.25) == set()
