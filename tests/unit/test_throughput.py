"""The throughput model: each bound of min(F, k/(p+h), W/p, G), and its fits."""

import math
from dataclasses import replace

import pytest

from slurm_synergy.model.profile import FetchRates, Point, ThroughputModel
from slurm_synergy.model.throughput import (cached_fraction, fetch_rate, fit_components,
                                      fit_steps, predict, workers_for)


def model(p=0.01, h=0.002, g=None, fetch=None, basis="components"):
    return ThroughputModel(basis, p, h, g, 1000.0, fetch)


def test_workers_leave_one_core_to_the_trainer():
    assert [workers_for(k) for k in (1, 2, 3, 8)] == [1, 1, 2, 7]
    assert [workers_for(k, 2) for k in (2, 4, 8)] == [1, 1, 3]


def test_gpu_job_hungry_for_cores_rises_until_the_device_limits_it():
    # p = 10 ms of decoding per sample, a GPU doing 500 samples/s.
    m = model(p=0.01, h=0.001, g=500.0)
    speeds = [predict(m, k) for k in range(1, 9)]
    assert speeds[0] == pytest.approx(1 / 0.011)            # one core does everything
    assert speeds[1] == pytest.approx(100.0)                # one worker: 1/p
    assert speeds[4] == pytest.approx(400.0)                # four workers
    assert speeds[6] == speeds[7] == 500.0                  # the GPU is the limit
    assert speeds == sorted(speeds)


def test_cpu_light_job_is_flat():
    m = model(p=0.0001, h=0.001, g=950.0)
    assert predict(m, 1) == pytest.approx(1 / 0.0011)
    assert predict(m, 2) == predict(m, 16) == 950.0


def test_on_a_cpu_node_the_trainer_threads_are_the_device():
    m = model(p=0.004, h=0.01, g=None)
    # 2 cores: 1 worker, 1 torch thread: the thread (1/h = 100) limits.
    assert predict(m, 2) == pytest.approx(100.0)
    # Explicit workers: 2 cores, 0 workers -> serial in one process.
    assert predict(m, 2, workers=0) == pytest.approx(1 / 0.014)


def test_fetch_rate_is_dsanalyzer_harmonic_mix():
    f = FetchRates(cache_mb_s=1000.0, storage_mb_s=100.0, dataset_mb=1000.0,
                   sample_mb=0.1, files_read=10)
    assert fetch_rate(f, 1.0) == pytest.approx(10000.0)
    assert fetch_rate(f, 0.0) == pytest.approx(1000.0)
    assert fetch_rate(f, 0.5) == pytest.approx(1 / (0.5 / 10000 + 0.5 / 1000))
    assert cached_fraction(f, footprint_mb=500, mem_mb=1000) == 0.5
    assert cached_fraction(f, 500, 100) == 0.0 and cached_fraction(f, 0, 10**6) == 1.0


def test_memory_only_matters_when_it_binds():
    f = FetchRates(1000.0, 10.0, 2000.0, 0.1, 10)      # slow storage: 100 samples/s cold
    m = model(p=0.001, h=0.001, g=800.0, fetch=f)
    assert predict(m, 8, mem_mb=None) == 800.0             # None: all cached
    assert predict(m, 8, mem_mb=1000.0 + 2000.0) == 800.0  # footprint + whole dataset
    starved = predict(m, 8, mem_mb=1000.0)                 # nothing cached
    assert starved == pytest.approx(100.0)
    half = predict(m, 8, mem_mb=2000.0)
    assert starved < half < 800.0


def test_the_dataset_competes_with_all_but_the_unreclaimable_memory():
    # A footprint of 1000 MB (the tree's RSS) of which 400 MB are anonymous and shared:
    # the libraries' file pages are the page cache's too, so at 1400 MB a fifth of the
    # 2000 MB dataset is cached, not none of it.
    f = FetchRates(1000.0, 10.0, 2000.0, 0.1, 10)
    whole = model(p=0.001, h=0.001, g=800.0, fetch=f)
    split = ThroughputModel("components", 0.001, 0.001, 800.0, 1000.0, f, anon_mb=400.0)
    assert whole.resident_mb == 1000.0 and split.resident_mb == 400.0
    assert predict(whole, 8, mem_mb=1400.0) == pytest.approx(fetch_rate(f, 0.2))
    assert predict(split, 8, mem_mb=1400.0) == pytest.approx(fetch_rate(f, 0.5))


def pt(measure, cores, workers, speed, h=0.0, rss=500.0, anon=None):
    return Point(measure, cores, workers, 4096, speed, 0.0, h, rss, 5.0, anon_mb=anon)


def test_fit_steps_puts_a_loaderless_scripts_cost_in_its_step():
    # 1 core: 200 samples/s at 5 ms of the trainer's CPU a sample; 2 cores hardly faster.
    train = [pt("train", 2, 1, 210.0, h=0.0048, rss=800.0), pt("train", 1, 1, 200.0, h=0.005)]
    m = fit_steps(train, on_gpu=False)
    assert m.basis == "steps" and m.prep_core_s == 0 and m.host_core_s == 0.005
    assert m.device_rate is None and m.footprint_mb == 800.0
    assert [(e.cores, e.measured) for e in m.held_out] == [(2, 210.0), (1, 200.0)]
    assert m.held_out[1].predicted == pytest.approx(200.0)
    assert m.held_out[0].predicted == pytest.approx(200.0)   # one worker leaves 1 core
    assert fit_steps(train, on_gpu=True).device_rate == 210.0
    # The CPU time unknown: the steps' own time at the fewest cores.
    unknown = fit_steps([pt("train", 2, 1, 210.0), pt("train", 1, 1, 200.0)], False)
    assert unknown.host_core_s == pytest.approx(1 / 200.0)


def test_fit_components_holds_out_every_training_point():
    loader = pt("loader", 2, 1, 100.0)                   # one worker: p = 0.01
    compute = pt("compute", 1, 0, 250.0, h=0.004)        # h = 0.004
    train = [pt("train", 2, 1, 70.0, rss=900.0), pt("train", 1, 1, 72.0)]
    m = fit_components(loader, compute, train, on_gpu=False, fetch=None)
    assert m.prep_core_s == pytest.approx(0.01) and m.host_core_s == 0.004
    assert m.device_rate is None and m.footprint_mb == 900.0
    assert m.anon_mb is None                 # not measured: the whole footprint counts
    split = [pt("train", 2, 1, 70.0, rss=900.0, anon=300.0), pt("train", 1, 1, 72.0, anon=350.0)]
    assert fit_components(loader, compute, split, False, None).anon_mb == 350.0
    assert [(e.cores, e.measured) for e in m.held_out] == [(2, 70.0), (1, 72.0)]
    assert m.held_out[1].predicted == pytest.approx(1 / 0.014)
    assert m.mean_error == pytest.approx(sum(e.error for e in m.held_out) / 2)
    on_gpu = fit_components(loader, compute, train, on_gpu=True, fetch=None)
    assert on_gpu.device_rate == 250.0


def test_each_held_out_error_carries_what_the_noise_alone_could_make_of_it():
    # The input-only runs lie ±5% apart, the compute-only runs ±4%, the one-core point's
    # own runs ±2.8%: the two-core point is input-bound (1/p), so only p's noise moves
    # it; the one-core point's 1/(p+h) moves with both, each by its share, and with its
    # own runs' spread on top.
    loader = replace(pt("loader", 2, 1, 100.0), repeats=(95.0, 105.0))
    compute = replace(pt("compute", 1, 0, 250.0, h=0.004), repeats=(240.0, 260.0))
    train = [pt("train", 2, 1, 99.0), replace(pt("train", 1, 1, 72.0), repeats=(70.0, 74.0))]
    two, one = fit_components(loader, compute, train, on_gpu=False, fetch=None).held_out
    assert two.noise == pytest.approx(1 - 1 / 1.05)
    p_share = 1 - 0.014 / (0.01 * 1.05 + 0.004)
    h_share = 1 - 0.014 / (0.01 + 0.004 * 1.04)
    assert one.noise == pytest.approx(2 / 72 + p_share + h_share)
    # Components run once: their noise is unknown and counts as none.
    alone = fit_components(pt("loader", 2, 1, 100.0), pt("compute", 1, 0, 250.0, h=0.004),
                           train, on_gpu=False, fetch=None)
    assert [e.noise for e in alone.held_out] == [0.0, pytest.approx(2 / 72)]
    assert alone.mean_noise == pytest.approx(1 / 72)


def test_the_one_core_pair_sets_the_cost_where_worker_and_trainer_share_a_core():
    # Apart: p = 0.01, h = 0.004. The input-only step alone on one core gives 95/s, and
    # the trainer beside it needs 0.0046 s a sample: together 0.01513 s on one core.
    loader, compute = pt("loader", 2, 1, 100.0), pt("compute", 1, 0, 250.0, h=0.004)
    alone, beside = pt("loader", 1, 1, 95.0), pt("shared", 1, 1, 120.0, h=0.0046)
    train = [pt("train", 2, 1, 99.0), pt("train", 1, 1, 66.0)]
    m = fit_components(loader, compute, train, False, None, shared=(alone, beside))
    assert m.shared_core_s == pytest.approx(1 / 95 + 0.0046)
    assert predict(m, 1) == pytest.approx(1 / m.shared_core_s)      # worker + trainer on 1
    assert predict(m, 2) == pytest.approx(100.0)                     # each on its own core
    assert predict(m, 1, workers=0) == pytest.approx(1 / 0.014)      # one process: no turns
    assert m.held_out[1].predicted == pytest.approx(1 / m.shared_core_s)
    # Not measured (srun steps started anew, torchrun): the components apart count.
    assert fit_components(loader, compute, train, False, None).shared_core_s is None


def test_predict_refuses_zero_cores():
    with pytest.raises(ValueError, match="at least 1"):
        predict(model(), 0)
    assert math.isfinite(predict(model(p=0.0, h=0.0, g=10.0), 4))
