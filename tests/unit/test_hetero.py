"""The two-type planner: its step model, its search, its properties, and the traces."""

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_synergy.cli import main
from slurm_synergy.hetero.plan import (Group, PlanError, best_plan, evaluate, even_split,
                                       share_cost, zeus_cost)
from slurm_synergy.hetero.traces import TraceError, read_trace, trace_from
from slurm_synergy.hetero.zeus2 import zeus2_choice

ZEUS2 = Path(__file__).resolve().parents[2] / "data" / "zeus2"


def trace(name, rows):
    """{batch: [(limit, time, energy), ...]} as a trace."""
    return trace_from({str(b): [{"power_limit": p, "time": t, "energy": e} for p, t, e in runs]
                       for b, runs in rows.items()}, name, name)


def slowed(t, factor):
    """`t` with every run `factor` times as long, at the same power."""
    rows = {}
    for p, runs in t.points.items():
        for b, c in runs.items():
            rows.setdefault(b, []).append((p, c.time_s * factor, c.energy_j * factor))
    return trace(t.gpu_type, rows)


def linear(name, sizes, limits, base, per_sample, watts):
    """Time base + per_sample * b, a higher limit faster; power constant per limit."""
    return trace(name, {b: [(p, (base + per_sample * b) * (1 + 0.1 * (len(limits) - i)),
                             watts[i] * (base + per_sample * b) * (1 + 0.1 * (len(limits) - i)))
                            for i, p in enumerate(limits)] for b in sizes})


def test_between_measured_batches_it_interpolates_and_never_beyond():
    t = trace("t4", {32: [(70, 1.0, 50.0)], 64: [(70, 2.0, 120.0)]})
    assert t.at(48, 70).time_s == pytest.approx(1.5) and t.at(48, 70).energy_j == 85.0
    assert t.at(32, 70).time_s == 1.0
    assert t.at(16, 70) is None and t.at(65, 70) is None and t.at(48, 60) is None


def test_a_share_above_the_measured_runs_as_micro_batches_within_it():
    t = trace("t4", {32: [(70, 1.0, 50.0)], 64: [(70, 2.0, 100.0)]})
    cost, micro, steps = share_cost(t, 100, 70)       # 2 micro-batches of 50
    assert (micro, steps) == (50, 2) and cost.time_s == pytest.approx(2 * 1.5625)
    cost, micro, steps = share_cost(t, 101, 70)       # 51 + 50
    assert (micro, steps) == (51, 2)
    assert cost.time_s == pytest.approx(t.at(51, 70).time_s + t.at(50, 70).time_s)
    assert share_cost(t, 20, 70) is None              # below the smallest: not planned
    assert share_cost(t, 0, 70)[2] == 0


def test_the_step_waits_for_the_slowest_and_charges_the_wait_at_idle_power():
    fast = trace("a10", {64: [(150, 1.0, 100.0)]})
    slow = trace("t4", {64: [(70, 3.0, 150.0)]})
    plan = evaluate([Group(fast, 1, 15.0), Group(slow, 2, 10.0)], (64, 64), (150, 70), 0.5)
    assert plan.step_time_s == 3.0
    a10, t4 = plan.shares
    assert a10.energy_j == 100.0 + 15.0 * 2.0 and t4.energy_j == 150.0
    assert plan.energy_j == a10.energy_j + 2 * t4.energy_j
    assert plan.cost == zeus_cost(plan.energy_j, 3.0, 0.5, 150 + 2 * 70)


@st.composite
def jobs(draw):
    """Two GPU types with measured, rising costs, their GPU counts and a global batch."""
    groups = []
    for name in ("a10", "t4"):
        sizes = sorted(draw(st.sets(st.sampled_from([8, 16, 32, 64, 128, 256]), min_size=2,
                                    max_size=5)))
        limits = sorted(draw(st.sets(st.sampled_from([60, 100, 150, 250]), min_size=1,
                                     max_size=3)))
        idle = draw(st.floats(5, 30))
        watts = [idle + draw(st.floats(5, 200)) for _ in limits]
        groups.append(Group(linear(name, sizes, limits, draw(st.floats(0.01, 1)),
                                   draw(st.floats(1e-4, 1e-2)), watts),
                            draw(st.integers(1, 3)), idle))
    return groups, draw(st.integers(8, 1500)), draw(st.floats(0, 1))


# The same examples every run: CI checks what was checked here.
QUICK = settings(max_examples=150, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow])


@QUICK
@given(jobs())
def test_the_batches_add_up_and_stay_within_what_was_measured(job):
    groups, batch, eta = job
    try:
        plan = best_plan(groups, batch, eta)
    except PlanError:
        return          # no split within the measured sizes: said so, nothing planned
    assert sum(s.gpus * s.batch for s in plan.shares) == batch
    for g, s in zip(groups, plan.shares):
        if s.batch == 0:
            continue
        sizes = g.trace.batches(s.power_limit_w)
        assert sizes[0] <= s.micro_batch <= sizes[-1]
        assert s.micro_batch * s.accumulation >= s.batch > (s.micro_batch - 1) * s.accumulation
        assert (s.accumulation > 1) == (s.batch > sizes[-1])


@QUICK
@given(jobs(), st.floats(1.05, 4))
def test_a_slower_type_never_gets_more_samples(job, factor):
    # Provable with one limit per type (a slower type's extra cost rises with its share);
    # with several it held in 1,500 random jobs too.
    groups, batch, eta = job
    first, second = groups
    slower = Group(slowed(first.trace, factor), first.gpus, first.idle_w)
    try:
        before = best_plan(groups, batch, eta).shares[0].batch
    except PlanError:
        return
    assert best_plan([slower, second], batch, eta).shares[0].batch <= before


@pytest.mark.parametrize("dataset", ["cifar", "imagenet"])
@pytest.mark.parametrize("factor", [1.1, 1.5, 2.0, 4.0])
def test_on_the_published_traces_a_slower_a10_never_gets_more(dataset, factor):
    a10 = read_trace(ZEUS2 / f"{dataset}_a10.json", "a10")
    t4 = Group(read_trace(ZEUS2 / f"{dataset}_t4.json", "t4"), 1, 10.0)
    slower = slowed(a10, factor)
    for batch in (512, 1024, 4096):
        before = best_plan([Group(a10, 1, 15.0), t4], batch, 0.5).shares[0].batch
        assert best_plan([Group(slower, 1, 15.0), t4], batch, 0.5).shares[0].batch <= before


@QUICK
@given(jobs(), st.data())
def test_with_one_type_it_is_zeus_power_limit_choice(job, data):
    groups, _, eta = job
    g = Group(groups[0].trace, 1, groups[0].idle_w)
    limit = data.draw(st.sampled_from(g.trace.limits))
    batch = data.draw(st.sampled_from(g.trace.batches(limit)))
    def zeus(p):
        c = g.trace.at(batch, p)
        return float("inf") if c is None else zeus_cost(c.energy_j, c.time_s, eta,
                                                        g.trace.max_limit_w)
    plan = best_plan([g], batch, eta)
    assert plan.cost == pytest.approx(zeus(plan.shares[0].power_limit_w))
    assert plan.cost == pytest.approx(min(zeus(p) for p in g.trace.limits))


def test_on_the_published_traces_the_plan_beats_the_even_split_and_zeus2():
    for dataset in ("cifar", "imagenet"):
        a10, t4 = (read_trace(ZEUS2 / f"{dataset}_{t}.json", t) for t in ("a10", "t4"))
        groups = [Group(a10, 1, 15.0), Group(t4, 1, 10.0)]
        plan, even = best_plan(groups, 4096, 0.5), even_split(groups, 4096, 0.5)
        zeus2 = zeus2_choice(a10, t4, 4096)
        theirs = evaluate(groups, zeus2.batches, zeus2.limits, 0.5)
        assert plan.cost <= even.cost and plan.cost <= theirs.cost
        # The A10 is the faster card: it gets the larger share, Zeus² gives it less.
        assert plan.shares[0].batch > plan.shares[1].batch
        assert zeus2.batches[0] < zeus2.batches[1]


@pytest.mark.parametrize("data, message", [
    ([], "JSON object keyed by batch size"),
    ({"x": []}, "not a batch size"),
    ({"32": []}, "list of measurements"),
    ({"32": [{"power_limit": 70, "time": 1.0}]}, "expected power_limit, energy and time"),
    ({"32": [{"power_limit": 70, "time": -1.0, "energy": 1.0}]}, "time: must be above 0"),
    ({"32": [{"power_limit": 70, "time": 1.0, "energy": 1.0}] * 2}, "measured twice"),
])
def test_a_bad_trace_is_named_with_its_entry(data, message):
    with pytest.raises(TraceError, match=message):
        trace_from(data, "t4", "t4.json")


def test_the_command_prints_the_plan_and_its_baseline_as_json(tmp_path, capsys):
    args = ["hetero", "--trace", f"a10={ZEUS2 / 'cifar_a10.json'}",
            "--trace", f"t4={ZEUS2 / 'cifar_t4.json'}", "--global-batch", "1024",
            "--idle", "a10=15", "--idle", "t4=10", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert sum(s["batch"] * s["gpus"] for s in out["plan"]) == 1024
    assert set(out["plan"][0]) == {"gpu_type", "gpus", "batch", "micro_batch", "accumulation",
                                   "power_limit_w"}
    assert out["step_time_s"] > 0 and out["energy_j"] > 0 and "plan" in out["baseline"]
    assert main(["hetero", "--trace", f"v100={ZEUS2 / 'cifar_t4.json'}", "--global-batch",
                 "64", "--idle", "t4=10"]) == 1
    assert "--idle names t4, which has no --trace" in capsys.readouterr().err


def test_a_profiles_power_sweep_is_a_trace_the_planner_reads(tmp_path, capsys):
    from slurm_synergy.model.profile import PowerPoint
    from slurm_synergy.profiles import ProfileStore

    from tests.helpers import profile

    sweep = (PowerPoint(300, 400.0, 280.0), PowerPoint(250, 390.0, 230.0),
             PowerPoint(200, 340.0, 190.0))
    p = profile({2: 100.0, 1: 60.0}, sweep=sweep, gpu_name="NVIDIA A100")
    store = ProfileStore(tmp_path / "store")
    store.save(p)
    out = tmp_path / "a100.json"
    assert main(["profiles", p.fingerprint, "--store", str(store.root), "--zeus-trace",
                 str(out)]) == 0
    t = read_trace(out, "a100")
    # One step at the profile's batch (32): its time and energy at each limit.
    assert t.batches(300) == [32] and t.at(32, 250).time_s == pytest.approx(32 / 390)
    assert t.at(32, 200).energy_j == pytest.approx(190 * 32 / 340)
    plan = best_plan([Group(t, 1, 50.0)], 32, 0.5)
    assert plan.shares[0].power_limit_w == min(
        (300, 250, 200), key=lambda w: zeus_cost(t.at(32, w).energy_j, t.at(32, w).time_s,
                                                 0.5, 300))
    # Twice the batch: two micro-batches of the one measured size, nothing extrapolated.
    assert best_plan([Group(t, 1, 50.0)], 64, 0.5).shares[0].accumulation == 2
    capsys.readouterr()
    bare = profile({2: 100.0, 1: 60.0})
    store.save(bare)
    assert main(["profiles", bare.fingerprint, "--store", str(store.root), "--zeus-trace",
                 str(out)]) == 1
    assert "no power sweep" in capsys.readouterr().err
