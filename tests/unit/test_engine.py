"""The decision engine: cores, memory, GPUs, workers and power limit from a profile."""

import dataclasses

import pytest

from slurm_synergy.model.engine import NoDecision, NodeShape, decide, shape_of
from slurm_synergy.model.policy import Policy
from slurm_synergy.model.profile import (CommandFile, FetchRates, MemoryRaise,
                                         Point, PointError, PowerPoint, combine)
from slurm_synergy.slurm import Node
from tests.helpers import profile

NODE = NodeShape(cores=16, mem_mb=64000, gpus=4, gpu_types=("a100",))


def test_cpu_hungry_and_cpu_light_workloads_get_different_cores():
    # Hungry: input costs 10 ms a sample on a core, the GPU takes 400/s.
    hungry = decide(profile({2: 190.0, 1: 100.0}, p=0.01, g=400.0), NODE, Policy())
    light = decide(profile({2: 101.0, 1: 100.0}, p=0.0005, g=100.0), NODE, Policy())
    assert light.cpus == 1 and light.workers == 1
    # 400/s needs 4 loader cores plus the trainer's; the cap (2 x 4 cores) allows it.
    assert hungry.cpus == 5 and hungry.workers == 4
    assert any("tolerance" in r for r in hungry.reasons)
    assert any("(model)" in r for r in hungry.reasons), "extrapolated counts are marked"


def test_fairness_cap_bounds_cores_over_the_proportional_share():
    hungry = profile({2: 190.0, 1: 100.0}, p=0.01, g=10_000.0)
    d = decide(hungry, NODE, Policy(fairness_cap=1.5))
    assert (d.share_cpus, d.cpus) == (4, 6)
    assert any("fairness cap 1.5x" in r for r in d.reasons)


def test_never_more_than_a_node_has():
    d = decide(profile({2: 190.0, 1: 100.0}, p=0.01, g=10_000.0, gpus=4), NODE, Policy())
    assert d.cpus == NODE.cores and d.mem_mb <= NODE.mem_mb


def test_measured_points_win_over_the_model():
    # The model says two cores help; the sweep measured that they did not.
    d = decide(profile({2: 95.0, 1: 100.0}, p=0.01, g=400.0), NodeShape(2, 8000, 1), Policy())
    assert d.cpus == 1


def test_tolerance_trades_a_little_speed_for_cores():
    p = profile({2: 100.0, 1: 96.0}, p=0.0005, g=100.0)
    assert decide(p, NodeShape(2, 8000, 1), Policy(tolerance=0.05)).cpus == 1
    assert decide(p, NodeShape(2, 8000, 1), Policy(tolerance=0.0)).cpus == 2


TWO = NodeShape(2, 8000, 1)


def test_repeats_that_cannot_place_fewer_cores_outside_the_tolerance_keep_fewer():
    # 1 core is 8% slower by the medians, but their runs spread ±4%: the runs
    # cannot tell whether it is within 5%, so the cheaper count is kept, and said so.
    noisy = decide(profile({2: [100.0, 104.0, 96.0], 1: [92.0, 97.0, 88.0]}, p=0.0005,
                           g=100.0), TWO, Policy(min_spread=0.0))
    assert noisy.cpus == 1
    assert any(r.startswith("noise: 1 core(s) measured 92.0 ±4%") for r in noisy.reasons)
    # Tight runs are still counted as ±10% (min_spread): 8% is not told apart...
    tight = profile({2: [100.0, 100.5, 99.5], 1: [92.0, 92.4, 91.6]}, p=0.0005, g=100.0)
    assert decide(tight, TWO, Policy()).cpus == 1
    assert any(r.startswith("noise: 1 core(s) measured 92.0 ±10%")
               for r in decide(tight, TWO, Policy()).reasons)
    # ... unless the site trusts a minute's runs fully,
    trusted = decide(tight, TWO, Policy(min_spread=0.0))
    assert trusted.cpus == 2 and not any(r.startswith("noise") for r in trusted.reasons)
    # 15% under is within what the runs cannot tell (15% * 1.1 reaches the line drawn
    # from the bottom of the best's band), but more than max_noise_loss excuses: the
    # noise moves a decision across the tolerance line, never to a loss of 15%.
    middling = profile({2: [100.0, 100.5, 99.5], 1: [85.0, 85.4, 84.6]}, p=0.0005, g=100.0)
    assert decide(middling, TWO, Policy()).cpus == 2
    assert decide(middling, TWO, Policy(max_noise_loss=0.05)).cpus == 2
    assert decide(middling, TWO, Policy(max_noise_loss=0.2)).cpus == 1
    # and 25% is clearly outside either way.
    slow = profile({2: [100.0, 100.5, 99.5], 1: [75.0, 75.4, 74.6]}, p=0.0005, g=100.0)
    assert decide(slow, TWO, Policy()).cpus == 2
    # One disturbed run of three does not widen the band (the median absolute
    # deviation, not the range): 1 core's 99 leaves it clearly slower.
    outlier = profile({2: [100.0, 100.5, 99.5], 1: [75.0, 99.0, 74.6]}, p=0.0005, g=100.0)
    assert decide(outlier, TWO, Policy()).cpus == 2
    # A single run per point has no spread: the medians decide, as before repeats.
    single = decide(profile({2: 100.0, 1: 92.0}, p=0.0005, g=100.0), TWO, Policy())
    assert single.cpus == 2


def test_runs_too_far_apart_decide_nothing():
    # 1 core is as fast as 2 by its median, but its runs lie ±30% apart.
    scattered = profile({2: [100.0, 101.0], 1: [70.0, 130.0]}, p=0.0005, g=100.0)
    with pytest.raises(NoDecision) as e:
        decide(scattered, TWO, Policy())
    assert "1 core(s) lie ±30% apart" in e.value.reasons[-1]
    assert "max_spread" in str(e.value)
    # A wider limit lets it through, to the cheaper count.
    assert decide(scattered, TWO, Policy(max_spread=0.5)).cpus == 1


def test_the_noise_never_excuses_a_loss_past_max_noise_loss():
    # 1 core's runs lie ±33% apart around a median 25% under 2 cores': they cannot tell
    # whether it is within 5%, but the noise excuses at most max_noise_loss (10%), so
    # the job keeps 2 cores (measured tightly: nothing to refuse); a site that allows
    # that much gets 1 core, where the scattered runs then decide nothing.
    wide = profile({2: [100.0, 101.0], 1: [50.0, 100.0]}, p=0.0005, g=100.0)
    kept = decide(wide, TWO, Policy())
    assert kept.cpus == 2
    assert any("25% under, more than the policy's max_noise_loss of 10%" in r
               for r in kept.reasons)
    with pytest.raises(NoDecision):
        decide(wide, TWO, Policy(max_noise_loss=0.3))
    assert decide(wide, TWO, Policy(max_noise_loss=0.3, max_spread=0.5)).cpus == 1


def test_a_wrong_model_decides_nothing_it_would_have_to_predict():
    base = profile({2: 190.0, 1: 100.0}, p=0.01, g=400.0)
    wrong = dataclasses.replace(base, model=dataclasses.replace(
        base.model, held_out=(PointError(2, 1, 190.0, 100.0),)))      # 47% off
    # On a 16-core node the pick (5 cores) was never measured: the model would decide.
    with pytest.raises(NoDecision) as e:
        decide(wrong, NODE, Policy())
    assert "held-out error of 47.4%" in str(e.value) and "5 cores" in str(e.value)
    # On two cores every candidate was measured: the model is not asked.
    assert decide(wrong, TWO, Policy()).cpus == 2


def test_memory_covers_the_peak_with_headroom():
    d = decide(profile({2: 100.0, 1: 100.0}, rss=1000.0), NODE, Policy(mem_headroom=0.25))
    assert d.mem_mb == 1536          # 1000 MB + 5% for its noise + 25%, up to 256 MB
    d = decide(profile({2: 100.0, 1: 100.0}, rss=1000.0), NODE,
               Policy(mem_headroom=0.25, min_mem_spread=0.0))
    assert d.mem_mb == 1280          # 1000 MB + 25%


def test_memory_buys_page_cache_when_storage_is_slow():
    # 2 GB dataset of 1 MB samples; storage gives 20 samples/s, cache 5000.
    slow = FetchRates(cache_mb_s=5000.0, storage_mb_s=20.0, dataset_mb=2048.0, sample_mb=1.0,
                      files_read=100)
    d = decide(profile({2: 100.0, 1: 100.0}, rss=1000.0, fetch=slow), NODE, Policy())
    assert d.mem_mb >= 1000 + 2048 * 0.75
    fast = dataclasses.replace(slow, storage_mb_s=4000.0)
    assert decide(profile({2: 100.0, 1: 100.0}, rss=1000.0, fetch=fast), NODE,
                  Policy()).mem_mb == 1536


def test_a_footprint_above_the_cap_still_gets_its_memory():
    d = decide(profile({2: 100.0, 1: 100.0}, rss=40_000.0), NODE, Policy(fairness_cap=1.0))
    assert d.mem_mb == 55040         # 40 GB + 10% noise + 25% needed, 16 GB share, 64 GB node
    assert any("rather than fail" in r for r in d.reasons)


def one_gpu_point(speed):
    return (Point("train", 2, 1, 4096, speed, 0.1, 0.001, 900.0, 10.0, gpus=1),)


def test_extra_gpus_that_add_little_are_dropped():
    d = decide(profile({2: 100.0, 1: 60.0}, gpus=2, extra=one_gpu_point(97.0)), NODE, Policy())
    assert d.gpus == 1 and d.gres == "gpu:1"
    kept = decide(profile({2: 180.0, 1: 100.0}, gpus=2, extra=one_gpu_point(100.0)), NODE,
                  Policy())
    assert kept.gpus == 2
    unknown = decide(profile({2: 100.0, 1: 60.0}, gpus=2), NODE, Policy())
    assert unknown.gpus == 2 and any("no run at fewer GPUs" in r for r in unknown.reasons)


def test_gpu_type_follows_the_gpu_the_profile_ran_on():
    d = decide(profile({2: 100.0, 1: 100.0}, gpu_name="NVIDIA A100-SXM4-80GB"), NODE, Policy())
    assert d.gpu_type == "a100" and d.gres == "gpu:a100:1"


SWEEP = (PowerPoint(400.0, 100.0, 380.0), PowerPoint(300.0, 95.0, 280.0),
         PowerPoint(200.0, 70.0, 195.0))


@pytest.mark.parametrize("eta,limit", [(0.0, 400), (0.5, 300), (1.0, 200)])
def test_power_limit_minimises_zeus_cost(eta, limit):
    # Energy per sample: 3.80, 2.95, 2.79 J; time per sample: 10, 10.5, 14.3 ms.
    d = decide(profile({2: 100.0, 1: 100.0}, sweep=SWEEP), NODE, Policy(zeus_eta=eta))
    costs = {p.limit_w: eta * p.avg_power_w / p.samples_per_s
             + (1 - eta) * 400.0 / p.samples_per_s for p in SWEEP}
    assert d.power_limit_w == int(min(costs, key=costs.get)) == limit


def test_site_cap_bounds_the_power_limit_and_no_sweep_leaves_it():
    d = decide(profile({2: 100.0, 1: 100.0}, sweep=SWEEP), NODE,
               Policy(zeus_eta=0.0, power_cap_w=250.0))
    assert d.power_limit_w == 250
    none = decide(profile({2: 100.0, 1: 100.0}), NODE, Policy())
    assert none.power_limit_w == 0 and any("no power sweep" in r for r in none.reasons)


def test_job_without_gpus_may_have_a_whole_node():
    d = decide(profile({2: 190.0, 1: 100.0}, p=0.01, g=10_000.0, gpus=0), NODE, Policy())
    assert d.cpus == NODE.cores and d.gres == ""


def test_shape_of_a_partition_is_its_smallest_node():
    nodes = [Node("a", "idle", 64, 512000, "gpu:a100:8(S:0-1)"),
             Node("b", "idle", 32, 256000, "gpu:a100:4,gpu:h100:4")]
    assert shape_of(nodes) == NodeShape(32, 256000, 8, ("a100", "h100"))
    assert shape_of([Node("c", "idle", 2, 1000, "(null)")]).gpus == 0


def test_summary_is_what_the_comment_carries():
    d = decide(profile({2: 100.0, 1: 100.0}, sweep=SWEEP), NODE, Policy(zeus_eta=0.0))
    assert d.summary() == f"c{d.cpus},m{d.mem_mb},g1,w{d.workers},p400"


def _peaks(peaks):
    """A profile whose two core counts' runs peaked at `peaks` (two runs each)."""
    base = profile({2: [100.0, 100.0], 1: [60.0, 60.0]}, p=0.01, g=100.0, rss=max(peaks))
    points = tuple(dataclasses.replace(pt, peaks_mb=tuple(peaks[2 * i:2 * i + 2]))
                   for i, pt in enumerate(base.points))
    return dataclasses.replace(base, points=points)


def test_a_memory_peak_near_a_step_gives_the_same_size_from_profile_to_profile():
    # mobilenet's three profiles peaked at 803, 809 and 822 MB: +25% lands either side of
    # 1024 MB. Counted +10% for the noise between profiles first, all three get 1280 MB.
    sizes = {decide(_peaks([803.0, 789.0, 788.0, 757.0]), TWO, Policy()).mem_mb,
             decide(_peaks([809.0, 809.0, 796.0, 763.0]), TWO, Policy()).mem_mb,
             decide(_peaks([787.0, 805.0, 822.0, 793.0]), TWO, Policy()).mem_mb}
    assert sizes == {1280}
    # Without the margin the sizes differed, as they did in the three profiles.
    assert decide(_peaks([803.0, 789.0, 788.0, 757.0]), TWO,
                  Policy(min_mem_spread=0.0)).mem_mb == 1024
    d = decide(_peaks([809.0, 809.0, 796.0, 763.0]), TWO, Policy())
    assert any("peak use 809 MB, its runs 763-809 MB; counted +10% for the noise between "
               "runs" in r for r in d.reasons), d.reasons
    # m5's three profiles on 2026-11-26 peaked at 771, 796 and 847 MB, each from one run
    # per count started anew (so no spread of their own): at +5% the first got 1024 MB,
    # the others 1280 MB; the default +10% (profiles minutes apart differ by up to ±5%)
    # gives all three 1280 MB.
    m5 = [[761.0, 761.0, 771.0, 771.0], [796.0, 796.0, 775.0, 775.0],
          [847.0, 847.0, 770.0, 770.0]]
    assert {decide(_peaks(p), TWO, Policy()).mem_mb for p in m5} == {1280}
    assert [decide(_peaks(p), TWO, Policy(min_mem_spread=0.05)).mem_mb for p in m5] == \
        [1024, 1280, 1280]


def test_a_memory_peak_that_varies_more_than_the_minimum_counts_its_own_spread():
    # Runs 600 and 1000 MB apart: ±20%, so 1000 x 1.2 x 1.25 = 1500 -> 1536 MB.
    d = decide(_peaks([1000.0, 600.0, 900.0, 900.0]), TWO, Policy())
    assert d.mem_mb == 1536
    assert any("counted +20%" in r for r in d.reasons)


def test_an_in_run_profile_says_why_it_has_no_memory_model():
    # Its points share the whole run's peak: one figure, no range of runs.
    base = profile({2: [100.0, 101.0, 99.0], 1: [97.0, 98.0, 96.0]}, p=0.0005, g=100.0)
    inrun = dataclasses.replace(base, model=dataclasses.replace(
        base.model, basis="in-run", held_out=(PointError(1, 0, 97.0, 98.0),)))
    (memory,) = [r for r in decide(inrun, TWO, Policy()).reasons if r.startswith("memory:")]
    assert "no page-cache model: a sweep in the run varies the cores only" in memory
    assert "peak use 900 MB;" in memory and "its runs" not in memory
    (offline,) = [r for r in decide(base, TWO, Policy()).reasons if r.startswith("memory:")]
    assert "the profile has no memory model (no dataset folder)" in offline


def test_a_profile_raised_by_a_later_run_explains_the_raise():
    # Profiled at 900 MB; job 12's whole run peaked at 1300 MB (Follow): the decision
    # covers 1300 MB and says where the figure came from.
    base = profile({2: [100.0, 101.0, 99.0], 1: [97.0, 98.0, 96.0]}, p=0.0005, g=100.0)
    raised = dataclasses.replace(
        base, model=dataclasses.replace(base.model, footprint_mb=1300.0),
        raised=(MemoryRaise("12", 900.0, 1300.0, "t2"),))
    d = decide(raised, TWO, Policy())
    assert d.mem_mb == 1792                                  # 1300 x 1.1 x 1.25 -> 1792
    (memory,) = [r for r in d.reasons if r.startswith("memory:")]
    assert "peak use 1300 MB; 900 MB as profiled, raised by the whole run of job 12;" in memory


def test_explain_names_the_program_its_measured_run_read():
    base = profile({2: [100.0, 101.0, 99.0], 1: [97.0, 98.0, 96.0]}, p=0.0005, g=100.0)
    ran = dataclasses.replace(base, command_files=(CommandFile("/w/train.py", "ab" * 32),))
    (line,) = [r for r in decide(ran, TWO, Policy()).reasons if r.startswith("profile:")]
    assert line.endswith("; its program /w/train.py (abababababab): a run that reads "
                         "another content there drops the decision")
    assert not any("program" in r for r in decide(base, TWO, Policy()).reasons)


def test_memory_counts_each_page_once_where_the_probe_measured_it():
    # The torchloader style with two loader workers (2026-11-27): its processes' RSS
    # summed 884 MB, each page once 397 MB; a worker shares most of its trainer's pages.
    # Its own memory (its libraries' pages whole, however many jobs map them) 420 MB.
    summed = profile({2: [100.0, 100.0], 1: [60.0, 60.0]}, p=0.01, g=100.0, rss=884.0)

    def measured(**peaks: float):
        points = tuple(combine([dataclasses.replace(run, **peaks) for run in (pt, pt)])
                       for pt in summed.points)
        return dataclasses.replace(summed, points=points, model=dataclasses.replace(
            summed.model, footprint_mb=max(pt.footprint_mb for pt in points)))
    assert decide(summed, TWO, Policy()).mem_mb == 1280     # 884 x 1.1 x 1.25 -> 1280
    # A kernel before 5.9, or a profile from before the own figure: each page once.
    d = decide(measured(peak_pss_mb=397.0), TWO, Policy())
    assert d.mem_mb == 768                                   # 397 x 1.1 x 1.25 -> 768
    (memory,) = [r for r in d.reasons if r.startswith("memory:")]
    assert ("peak use 397 MB; each page once, where its processes' resident memory summed "
            "comes to 884 MB;") in memory
    d = decide(measured(peak_pss_mb=397.0, peak_own_mb=420.0), TWO, Policy())
    assert d.mem_mb == 768                                   # 420 x 1.1 x 1.25 -> 768
    (memory,) = [r for r in d.reasons if r.startswith("memory:")]
    assert ("peak use 420 MB; its own pages once and its libraries' counted whole, which no "
            "other job on the node changes, where its processes' resident memory summed "
            "comes to 884 MB;") in memory


def test_workers_are_those_the_chosen_count_was_measured_with():
    # Measured in the run: the job's own 3 workers at every count the sweep narrowed it
    # to. One core is within tolerance; the decision keeps the 3 workers it was measured
    # with, not the rule's 1, which nothing measured.
    light = profile({2: 101.0, 1: 100.0}, p=0.0005, g=100.0)
    inrun = dataclasses.replace(light, points=tuple(
        dataclasses.replace(p, workers=3) for p in light.points))
    d = decide(inrun, NODE, Policy())
    assert (d.cpus, d.workers) == (1, 3)
    assert any("3 data-loader worker(s), as measured at 1 core(s)" in r for r in d.reasons)
    # Two processes: a point counts the workers of both, the decision gives each its own.
    ddp = dataclasses.replace(inrun, allocation=dataclasses.replace(inrun.allocation, procs=2),
                              points=tuple(dataclasses.replace(p, workers=6)
                                           for p in light.points))
    d = decide(ddp, NODE, Policy())
    assert d.workers == 3 and any("3 data-loader worker(s) in each of 2 processes" in r
                                  for r in d.reasons), d.reasons
    # A count the sweep did not measure (the model's): the rule, one core to the trainer.
    hungry = decide(profile({2: 190.0, 1: 100.0}, p=0.01, g=400.0), NODE, Policy())
    assert (hungry.cpus, hungry.workers) == (5, 4)
    assert any("one core left to the trainer" in r for r in hungry.reasons)


def test_a_profile_that_counts_steps_decides_alike_and_says_steps():
    # A run whose batches showed no size is measured in steps/s: the ratios between
    # core counts, all the decision reads, are the same, and its words say steps.
    samples = profile({2: 100.0, 1: 96.0}, p=0.0005, g=100.0)
    steps = dataclasses.replace(samples, per_step=True)
    by_samples, by_steps = decide(samples, TWO, Policy()), decide(steps, TWO, Policy())
    assert (by_steps.cpus, by_steps.mem_mb) == (by_samples.cpus, by_samples.mem_mb)
    assert any("steps/s by cores" in r for r in by_steps.reasons)
    assert not any("samples/s" in r for r in by_steps.reasons)
    assert "1c 96.0 steps/s" in steps.summary() and "1c 96.0/s" in samples.summary()
