"""A right-sized run's pace against its decision's prediction (measure/inrun/pace.py), and
what a slower run changes in the workload's later decisions (model/engine.py)."""

from __future__ import annotations

import dataclasses

from slurm_synergy.measure.inrun.follow import cut_cores
from slurm_synergy.measure.inrun.pace import SPANS, Pace, RunRate, predicted_at, slower
from slurm_synergy.model.engine import NodeShape, decide
from slurm_synergy.model.policy import Policy
from slurm_synergy.model.profile import SlowRun
from slurm_synergy.model.profile_read import profile_from_json
from slurm_synergy.probe.records import ProcessRecord
from tests.helpers import profile

TWO = NodeShape(2, 8000, 1)
# 1 core within 3% of 2 (their runs ±1%): decided at 1 core.
BASE = profile({2: [100.0, 101.0, 99.0], 1: [97.0, 98.0, 96.0]}, p=0.0005, g=100.0)


def record(pid: int, clock: float, samples: int) -> ProcessRecord:
    return ProcessRecord(pid, None, ["train.py"], clock=clock, total_steps=samples // 16 + 1,
                         total_samples=samples)


def paced(pid: int, rates: list[float], start: float = 0.0, every: float = 5.0,
          warm: float = 10.0) -> list[list[ProcessRecord]]:
    """What a look finds each time: one trainer's records at `rates` span by span, after
    a first span at `warm` samples/s (start-up)."""
    clock, samples = start, 0
    out = [[record(pid, clock, samples)]]
    for rate in [warm, *rates]:
        clock, samples = clock + every, samples + int(rate * every)
        out.append([record(pid, clock, samples)])
    return out


def test_a_run_s_rate_is_the_median_of_its_spans_past_the_first():
    pace = Pace()
    # A validation pass (one span at 5/s) and a slow start leave the median alone.
    for looked in paced(7, [40.0, 40.0, 5.0, 40.0, 40.0, 40.0, 40.0], warm=2.0):
        pace.look(looked)
        pace.look(looked)       # a record seen twice is kept once
    run = pace.rate()
    assert run is not None and run.rate == 40.0 and run.spans == 7 and run.spread == 0.0


def test_too_few_spans_judge_nothing():
    pace = Pace()
    for looked in paced(7, [40.0] * (SPANS - 1)):
        pace.look(looked)
    assert pace.rate() is None


def test_ranks_side_by_side_add_up_and_a_program_run_before_them_does_not():
    pace = Pace()
    for looked in paced(1, [90.0] * 8, start=0.0):       # a first program, ended
        pace.look(looked)
    for a, b in zip(paced(2, [30.0] * 12, start=100.0), paced(3, [20.0] * 12, start=101.0)):
        pace.look(a + b)
    run = pace.rate()
    assert run is not None and run.rate == 50.0, run


def test_a_run_slower_than_predicted_by_more_than_the_noise_is_a_slow_run():
    # Predicted 97/s at 1 core, its runs ±1%, counted as the policy's ±10%.
    predicted, noise = predicted_at(BASE, 1, 4096, 0.10)
    assert (predicted, noise) == (97.0, 0.10)
    slow = slower(predicted, noise, 1, RunRate(70.0, 0.02, 8), "31", "t3")
    assert slow == SlowRun("31", 1, 97.0, 70.0, 0.02, "t3")
    assert round(slow.factor, 3) == round(70 / 97, 3)
    # 90/s: within the noise of both (90 x 1.02 >= 97 x 0.9).
    assert slower(predicted, noise, 1, RunRate(90.0, 0.02, 8), "31", "t3") is None
    # A noisy run needs more: 80/s ±10% may still be 87.3.
    assert slower(predicted, noise, 1, RunRate(80.0, 0.10, 8), "31", "t3") is None


def test_a_slow_run_sends_later_decisions_to_more_cores_and_says_why():
    assert decide(BASE, TWO, Policy()).cpus == 1
    slowed = dataclasses.replace(BASE, slowed=(SlowRun("31", 1, 97.0, 70.0, 0.02, "t3"),))
    d = decide(slowed, TWO, Policy())
    assert d.cpus == 2
    assert any("slower than predicted: job 31 trained at 70.0 samples/s (±2%) at its decided "
               "1 core(s), where 97.0 was predicted: 1 core(s) and fewer are counted 28% "
               "slower from then on" in r for r in d.reasons), d.reasons
    # A run slower at 2 cores counts for 1 too: fewer cores are no faster.
    both = dataclasses.replace(BASE, slowed=(SlowRun("32", 2, 100.0, 50.0, 0.0, "t4"),))
    assert both.slowdown(1) == both.slowdown(2) == 0.5


def test_a_slow_run_is_kept_in_the_profile_file():
    slowed = dataclasses.replace(BASE, slowed=(SlowRun("31", 1, 97.0, 70.0, 0.02, "t3"),))
    assert profile_from_json(slowed.to_json(), "p").slowed == slowed.slowed
    # A profile of version 2, which has none, reads as one without.
    old = BASE.to_json().replace('"version": 3', '"version": 2').replace(
        '  "slowed": [],\n', "")
    assert profile_from_json(old, "p").slowed == ()


def test_only_a_run_given_fewer_cores_than_it_asked_is_timed():
    fp = "synergy:fp=0123456789abcdef asked=c4,m3072,g1"
    assert cut_cores(f"{fp} decision=c2,m1024,g1,w1").cpus == 2
    assert cut_cores(f"{fp} decision=c4,m1024,g1,w3") is None      # memory cut alone
    assert cut_cores(f"{fp} decision=c2,m1024,g1,w1 rescued=oom@3s") is None
    assert cut_cores(fp) is None
