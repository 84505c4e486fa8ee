"""The profiler's command line, its checks, and whole sweeps of a tiny script run as
local processes (the Slurm-step runs are in tests/integration/test_profiling.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_synergy.model.profile import Point, combine
from slurm_synergy.model.noise import unsettled
from slurm_synergy.model.policy import Policy
from slurm_synergy.probe.records import LEAST_STEPS
from slurm_synergy.measure.errors import NothingToMeasure, ProfilingError
from slurm_synergy.measure.offline.session import Session
from slurm_synergy.measure.offline.steps import Step
from slurm_synergy.measure.offline.sweep import core_sweep, repeat_sweep
from slurm_synergy.measure.offline.gpu import power_limits_to_try, visible_indices
from slurm_synergy.profiles import ProfileStore
from slurm_synergy.profile_table import markdown, plot, profiles_table

ROOT = Path(__file__).resolve().parents[2]

# A small but real training script: its loader does CPU work per sample, so its speed
# grows with workers and cores. FAKE_MODE picks a misbehaviour.
FAKE = r'''
import argparse, json, os, sys, time
import torch
from torch.utils.data import DataLoader, Dataset
p = argparse.ArgumentParser()
p.add_argument("--workers", type=int, default=0); p.add_argument("--max-iterations", type=int)
p.add_argument("--batch", type=int, default=8); p.add_argument("--data")
a = p.parse_args()
# Into the step's output folder: the step itself runs in the job's folder.
json.dump(sys.argv[1:], open(os.path.join(os.environ.get("SYNERGY_OUTPUT", "."), "argv.json"), "w"))
mode = os.environ.get("FAKE_MODE", "")
if mode == "crash-at-1" and len(os.sched_getaffinity(0)) == 1:
    sys.exit("boom: out of memory in the loader")
if mode == "hang":
    time.sleep(600)
if mode == "no-loader":
    sys.exit(0)

class Work(Dataset):
    def __len__(self):
        return 4096
    def __getitem__(self, i):
        x = torch.full((64,), float(i))
        for _ in range(30):
            x = torch.fft.fft(x).real / 64
        return x, i % 4

model = torch.nn.Linear(64, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in DataLoader(Work(), batch_size=a.batch, num_workers=a.workers):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
'''


@pytest.fixture
def fake(tmp_path) -> Path:
    path = tmp_path / "fake_train.py"
    path.write_text(FAKE)
    return path


def profile(tmp_path, *args, mode="", cores=None):
    (tmp_path / "store").mkdir(exist_ok=True)
    env = dict(os.environ, FAKE_MODE=mode, SYNERGY_PROFILES=str(tmp_path / "store"))
    for key in [k for k in env if k.startswith("SLURM_")]:
        del env[key]
    cmd = [sys.executable, str(ROOT / "profiler" / "offline_profiler.py"),
           "--launcher", "local", "--workdir", str(tmp_path / "work"), *args]
    if cores:
        cmd = ["taskset", "-c", cores, *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)


def own_store(tmp_path) -> ProfileStore:
    """This user's folder of the test's site store."""
    return ProfileStore(tmp_path / "store" / str(os.geteuid()))


def stored(tmp_path):
    return own_store(tmp_path).fingerprints()


def test_core_sweep_halves_then_steps_down_by_the_gpu_count():
    seen = []

    def measure(k):
        seen.append(k)
        return min(10.0 * k, 60.0)
    # 8 is within 10% of the best, 4 is not: then down from 8 in ones until 5 falls below.
    assert core_sweep(16, measure, 0.10) == [16, 8, 4, 7, 6, 5] == seen
    # In units of 2 GPUs: 6 lies between 8 and 4.
    assert core_sweep(16, lambda k: min(10.0 * k, 60.0), 0.10, step=2) == [16, 8, 4, 6]
    assert core_sweep(2, lambda k: 5.0, 0.10) == [2, 1]    # flat: down to one core
    assert core_sweep(2, lambda k: 5.0 * k, 0.10) == [2, 1]


def sweep_of(rates, budget=10, repeats=2, max_repeats=4):
    """repeat_sweep over counts whose n-th run measures rates[k][n], aimed by the
    decision's noise test at the default policy; the order run ("c": the step after)."""
    runs = {k: [v[0]] for k, v in rates.items()}
    order = []

    def measure(k):
        order.append(k)
        runs[k].append(rates[k][len(runs[k])])
        return runs[k][-1]

    policy = Policy()
    repeat_sweep(list(rates), lambda k: runs[k], measure,
                 lambda todo: len(order) + len(todo) <= budget, repeats, max_repeats,
                 unclear=lambda r: unsettled(r, policy.noise),
                 after=lambda: order.append("c"))
    return order, runs


def test_repeats_are_interleaved_and_added_only_where_the_noise_rule_cannot_decide():
    # Clearly apart after two runs each: nothing more.
    order, runs = sweep_of({4: [100, 101, 99, 100], 2: [60, 61, 60, 60], 1: [30, 31, 30, 30]})
    assert order == [4, 2, 1, "c"]
    # 2 cores are 8% below 4 by the medians, within the noise: 2 and 4 run again, in
    # turn, up to --max-repeats; 1 core, clearly slower, does not.
    order, runs = sweep_of({4: [100, 101, 99, 100], 2: [88, 96, 90, 92], 1: [50, 51, 50, 50]})
    assert order == [4, 2, 1, 4, 2, 4, 2, "c"]
    assert len(runs[4]) == len(runs[2]) == 4 and len(runs[1]) == 2
    # Within the tolerance by the medians: the fewer cores win anyway, no more runs.
    order, _ = sweep_of({2: [100, 101, 99, 100], 1: [97, 98, 97, 97]})
    assert order == [2, 1, "c"]
    # A count whose two runs lie too far apart runs again, and a third run settles it:
    # one disturbed run no longer counts.
    order, runs = sweep_of({2: [100, 101, 99, 100], 1: [50, 100, 52, 51]})
    assert order == [2, 1, 2, 1, "c"] and runs[1] == [50, 100, 52]
    # The budget stops the extra rounds (whole rounds only), never the first repeats.
    order, _ = sweep_of({4: [100, 101, 99, 100], 2: [88, 96, 90, 92], 1: [50, 51, 50, 50]},
                        budget=4)
    assert order == [4, 2, 1, "c"]


def test_combined_runs_keep_the_median_and_the_spread():
    runs = [Point("train", 2, 1, 4096, v, s, 0.01, rss, 5.0)
            for v, s, rss in ((90.0, 0.3, 800.0), (110.0, 0.1, 900.0), (100.0, 0.2, 850.0))]
    pt = combine(runs)
    assert pt.samples_per_s == 100.0 and pt.repeats == (90.0, 110.0, 100.0)
    assert pt.spread == pytest.approx(0.10) and pt.data_stall_fraction == 0.2
    assert pt.peak_rss_mb == 900.0 and pt.step_s == 15.0
    assert combine(runs[:1]).spread is None


def test_gpu_helpers():
    assert power_limits_to_try(100.0, 300.0, 5) == [300, 250, 200, 150, 100]
    assert power_limits_to_try(300.0, 300.0) == [300.0]
    os.environ["CUDA_VISIBLE_DEVICES"] = "2,0,9"
    try:
        assert visible_indices(4) == [2, 0]
    finally:
        del os.environ["CUDA_VISIBLE_DEVICES"]
    assert visible_indices(2) == [0, 1]


def test_a_whole_sweep_stores_a_profile_with_held_out_errors(tmp_path, fake):
    proc = profile(tmp_path, "--job-name", "fake", "--fingerprint", "00000000000000aa",
                   "--max-iterations", "5", "-b", "16", str(fake), "--batch", "4",
                   "--workers", "7", cores="0,1")
    assert proc.returncode == 0, proc.stderr
    assert stored(tmp_path) == ["00000000000000aa"]
    p = own_store(tmp_path).load("00000000000000aa")
    assert [(x.measure, x.cores, x.workers) for x in p.points] == [
        ("train", 2, 1), ("train", 1, 1), ("loader", 2, 1), ("compute", 1, 1),
        ("loader", 1, 1), ("shared", 1, 1)]
    # The one-core pair: the input-only step alone on one core, then the compute-only
    # and input-only steps at once, both on that one core; the model's one-core cost is
    # the first's CPU time per sample (one core flat out) plus the trainer's beside it.
    alone, beside = p.points[-2:]
    assert p.model.shared_core_s == pytest.approx(1 / alone.samples_per_s
                                                  + beside.host_cpu_s_per_sample)
    pair = next((tmp_path / "work").glob("step*-shared-1c"))
    for half in ("compute", "loader"):
        result = json.loads((pair / half / "probe.json").read_text())
        assert result["mode"] == half and result["processes"][0]["cpus"] == 1
    assert "compute only beside loader only, on 1 core" in proc.stderr
    assert all(x.samples_per_s > 0 and x.peak_rss_mb > 0 for x in p.points)
    # What the page cache cannot take back is measured too, and is less than the
    # processes' RSS (their libraries' file pages, and pages a worker shares with its
    # parent, counted there once per process).
    assert p.model.anon_mb is not None and 0 < p.model.anon_mb < p.model.footprint_mb
    # Each core count ran twice at least, the second time after the components.
    assert all(2 <= len(x.repeats) <= 4 for x in p.points if x.measure == "train")
    assert "2 cores, 1 worker(s) per process" in proc.stderr and ", run 2" in proc.stderr
    assert p.model.basis == "components" and len(p.model.held_out) == 2
    assert p.allocation.launcher == "local" and p.allocation.cores == 2
    assert not p.gpu.available and "no GPU" in p.gpu.reason
    assert p.profiling_s > 0 and p.batch == 16
    # The profiler's -b wins over the script's --batch; the step's workers replace the
    # script's, in the script's own spelling; its iteration limit is only a backstop,
    # left off in the first run, which trains on past its measurement for its memory.
    # Step 1 ran the script for its GPU memory; the sweep starts at step 2.
    argv = json.loads((tmp_path / "work" / "step02-train-2c" / "argv.json").read_text())
    assert argv.count("--batch") == 1 and argv[argv.index("--batch") + 1] == "16"
    assert argv.count("--workers") == 1 and argv[argv.index("--workers") + 1] == "1"
    assert "--max-iterations" not in argv
    argv = json.loads((tmp_path / "work" / "step03-train-1c" / "argv.json").read_text())
    assert argv[argv.index("--max-iterations") + 1] == "9"      # 3 warm-up + 5 + 1
    assert "step 5: compute only" in proc.stderr   # a line per step in a batch log
    # Both components ran again after the repeats (the budget allowed it: these steps
    # take a second or two), compute-only first, so their noise is known too, and each
    # held-out error carries what that noise and its own runs' could make of it.
    loader, compute = (next(x for x in p.points if x.measure == m) for m in ("loader",
                                                                          "compute"))
    assert len(compute.repeats) == 2 and compute.spread is not None
    assert len(loader.repeats) == 2 and loader.spread is not None
    steps = sorted(f.name for f in (tmp_path / "work").glob("step*"))
    assert [s.split("-", 1)[1] for s in steps[-2:]] == ["compute-1c", "loader-2c"]
    assert all(e.noise is not None and e.noise >= 0 for e in p.model.held_out)
    assert p.model.mean_noise is not None
    again = profile(tmp_path, "--fingerprint", "00000000000000aa", str(fake), cores="0,1")
    assert again.returncode == 0 and "already profiled" in again.stderr


def test_a_script_with_no_loader_is_profiled_from_its_training_steps(tmp_path):
    """A loop that slices its own tensors and updates its weights by hand (no loader, no
    optimizer: its steps are its backward passes) has nothing to drain or replay, so no
    component step: its model is its training steps', and it is profiled, not held."""
    script = ROOT / "tests" / "corpus" / "hand_updates.py"
    proc = profile(tmp_path, "--fingerprint", "00000000000000bb", str(script), "1000000",
                   "240", cores="0,1")
    assert proc.returncode == 0, proc.stderr
    p = own_store(tmp_path).load("00000000000000bb")
    assert {x.measure for x in p.points} == {"train"}
    assert {x.cores for x in p.points} == {1, 2}, p.notes
    assert p.model.basis == "steps" and p.model.prep_core_s == 0
    assert p.model.host_core_s > 0 and len(p.model.held_out) == 2
    assert any(n.startswith("no data loader") for n in p.notes), p.notes
    assert own_store(tmp_path).holds() == [] and "not marked" not in proc.stderr
    # Its memory step counts the same steps, and ends after them, not at the script's end.
    assert "memory-tracked 2-core step ran past" not in proc.stderr


@pytest.mark.parametrize("mode,args,rc,words", [
    ("crash-at-1", [], 1, ["training 1-core step measured nothing",
                           "fake_train.py exited with status 1 before its first batch",
                           "boom: out of memory", "nothing was stored"]),
    ("hang", ["--first-batch-timeout", "3"], 1,
     ["fake_train.py took no batch from a PyTorch DataLoader", "in 3s", "nothing was stored"]),
    ("hang", ["--step-timeout", "3"], 1, ["past its 3s limit", "nothing was stored"]),
    ("no-loader", [], 1, ["fake_train.py ended without taking a batch", "nothing was stored"]),
])
def test_failing_scripts_store_nothing(tmp_path, fake, mode, args, rc, words):
    proc = profile(tmp_path, "--max-iterations", "3", *args, str(fake), mode=mode, cores="0,1")
    assert proc.returncode == rc, proc.stderr
    for word in words:
        assert word in proc.stderr
    assert stored(tmp_path) == []
    # A script with no step the probe sees (no loader, none in 3 s) is held from being
    # marked again, with one line; one that crashed or outran its step limit is not.
    held = [fp for fp, _ in own_store(tmp_path).holds()]
    if mode == "no-loader" or "--first-batch-timeout" in args:
        assert len(held) == 1 and "its next jobs are not marked for measuring" in \
            proc.stderr, proc.stderr
    else:
        assert held == [], proc.stderr


@pytest.mark.parametrize("args,words", [
    (["/no/such/train.py"], ["/no/such/train.py does not exist"]),
    (["--docker-img", "img", "builtin:train"], ["--docker-img", "srun step"]),
    (["--nnodes", "2", "builtin:train"], ["one node"]),
    (["--cpu", "64", "builtin:train"], ["--cpu 64", "core(s) this allocation has"]),
    (["--fingerprint", "../x", "builtin:train"], ["not a workload fingerprint"]),
    (["--launcher", "srun", "builtin:train"], ["needs a Slurm allocation"]),
    (["--torchrun", "2", "builtin:train"], ["--torchrun runs a user's Python script"]),
])
def test_bad_command_lines_exit_2_with_one_clear_line(tmp_path, args, words):
    proc = profile(tmp_path, *args, cores="0,1")
    assert proc.returncode == 2
    for word in words:
        assert word in proc.stderr
    assert stored(tmp_path) == [] and not (tmp_path / "work").exists()


def test_one_core_is_too_small_to_sweep(tmp_path, fake):
    proc = profile(tmp_path, str(fake), cores="0")
    assert proc.returncode == 2 and "a CPU sweep needs at least 2" in proc.stderr
    assert stored(tmp_path) == []


def test_table_and_plot_of_stored_profiles(tmp_path, fake):
    assert profile(tmp_path, "--job-name", "fake", "--fingerprint", "00000000000000cc",
                   "--max-iterations", "3", str(fake), cores="0,1").returncode == 0
    profiles = list(own_store(tmp_path))
    text = profiles_table(profiles)
    assert "fake" in text and "2c:" in text and "1c:" in text
    assert markdown(profiles).startswith("| job |")
    png = plot(profiles, tmp_path / "p.png")
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_a_workload_another_job_is_profiling_exits_3(tmp_path, fake):
    import fcntl

    fp = "00000000000000bb"
    own_store(tmp_path).root.mkdir(parents=True)
    with open(own_store(tmp_path).root / f".{fp}.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = profile(tmp_path, "--fingerprint", fp, str(fake), cores="0,1")
    assert proc.returncode == 3 and "being profiled by another job" in proc.stderr
    assert stored(tmp_path) == []


def test_a_corrupt_profile_is_measured_again(tmp_path, fake):
    fp = "00000000000000cc"
    own_store(tmp_path).root.mkdir(parents=True)
    (own_store(tmp_path).root / f"{fp}.json").write_text("{ not json")
    proc = profile(tmp_path, "--fingerprint", fp, "--max-iterations", "3", str(fake),
                   cores="0,1")
    assert proc.returncode == 0 and "measuring again" in proc.stderr, proc.stderr
    assert own_store(tmp_path).load(fp).fingerprint == fp


def test_slow_steps_measure_a_window_of_seconds_not_all_their_iterations():
    from slurm_synergy.measure.offline.session import window_iterations
    # 20 steps in 12.5 s (m5 on one core): a 5 s window is 8 of them.
    assert window_iterations({"steps": 20, "seconds": 12.5}, 5.0, 20) == 8
    # Fast steps keep --max-iterations; very slow ones measure at least five.
    assert window_iterations({"steps": 20, "seconds": 2.0}, 5.0, 20) == 20
    assert window_iterations({"steps": 20, "seconds": 200.0}, 5.0, 20) == 5
    assert window_iterations({"steps": 20, "seconds": 200.0}, 5.0, 3) == 3
    # A measurement without a rate leaves the count as asked.
    assert window_iterations({}, 5.0, 20) == 20
    # Unless asked for a count, a fast workload measures at least a second: 20 of its
    # iterations would read the batches its loader fetched ahead.
    assert window_iterations({"steps": 10, "seconds": 0.1}, 4.0, 20, 1.0) == 100
    assert window_iterations({"steps": 10, "seconds": 0.1}, 0.5, 20, 1.0) == 50
    assert window_iterations({"steps": 20, "seconds": 2.0}, 4.0, 20, 1.0) == 20


def test_the_components_run_again_only_within_the_budget(tmp_path, fake):
    proc = profile(tmp_path, "--fingerprint", "00000000000000ab", "--max-iterations", "3",
                   "--budget", "0", str(fake), cores="0,1")
    assert proc.returncode == 0, proc.stderr
    p = own_store(tmp_path).load("00000000000000ab")
    # One run of each: the budget was spent; their noise is unknown, not counted.
    assert all(x.repeats == () for x in p.points if x.measure in ("loader", "compute"))
    assert all(len(x.repeats) == 2 for x in p.points if x.measure == "train")


def test_the_jobs_own_workers_are_measured_at_every_core_count(tmp_path, fake):
    # A row that sets its workers runs with them: the steps measure that job, as the
    # run does, so the decision keeps what was measured. The components keep one each.
    proc = profile(tmp_path, "--fingerprint", "00000000000000ad", "--max-iterations", "3",
                   "--budget", "0", "--workers", "3", str(fake), "--workers", "7",
                   cores="0,1")
    assert proc.returncode == 0, proc.stderr
    p = own_store(tmp_path).load("00000000000000ad")
    assert [(x.measure, x.cores, x.workers) for x in p.points if x.measure == "train"] == [
        ("train", 2, 3), ("train", 1, 3)]
    assert all(x.workers == 1 for x in p.points if x.measure != "train")
    for step in ("step01-memory-2c", "step02-train-2c", "step03-train-1c"):
        argv = json.loads((tmp_path / "work" / step / "argv.json").read_text())
        assert argv.count("--workers") == 1 and argv[argv.index("--workers") + 1] == "3"
    assert "1 cores, 3 worker(s) per process" in proc.stderr


class ScriptedRunner:
    """A step runner that answers each run with the next of `answers` (the probe's
    measurement) and notes how it was asked: how a session reads its runs, with no
    machine's speed in it."""

    def __init__(self, *answers: dict) -> None:
        self.answers, self.calls = list(answers), []
        self.iterations, self.steps_run = 20, 0

    def run(self, step, fresh=False, peak_s=0.0):
        self.calls.append((step, fresh, peak_s, self.iterations))
        self.steps_run += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer, 2.0


def scripted_session(runner: ScriptedRunner, lines: list[str]) -> Session:
    return Session(runner, top=2, procs=1, mem_mb=3072, gpus=[], workers_at=lambda k: 1,
                   window_s=30.0, max_iterations=20, least_s=1.0, budget_s=600.0, steps=4,
                   desc="test", log=lines.append, t0=0.0)


def test_a_first_run_too_short_to_count_is_measured_again_at_the_window():
    """No count asked for: a first run whose 10 measured iterations took 0.05 s is run
    again with as many as fill a second at its rate (200), not started anew; the rate is
    the second run's, the memory the first's (the script's own start)."""
    first = {"steps": 10, "seconds": 0.05, "samples_per_s": 1600.0, "peak_rss_mb": 900.0}
    again = {"steps": 200, "seconds": 1.1, "samples_per_s": 1450.0, "peak_rss_mb": 400.0,
             "forked": True}
    runner, lines = ScriptedRunner(first, again), []
    session = scripted_session(runner, lines)
    assert session.measure(2) == 1450.0
    (_, fresh, peak_s, counted), (step, fresh_again, peak_again, window) = runner.calls
    assert fresh and peak_s > 0 and counted == 20
    assert (step.cores, fresh_again, peak_again, window) == (2, False, 0.0, 200)
    (point,) = session.runs[2]
    assert point.peak_rss_mb == 900.0 and not point.forked and point.step_s == 4.0
    assert "the first run measured 0.05s, under 1s: its rate is a second run's, of 200 " \
        "iterations" in "\n".join(lines)
    # A first run long enough counts as it is; a slow one sets fewer iterations for the
    # next runs, as many as fill the window (30 s at 0.2 a second), never under LEAST_STEPS.
    runner, lines = ScriptedRunner({"steps": 10, "seconds": 50.0, "samples_per_s": 1.6}), []
    assert scripted_session(runner, lines).measure(2) == 1.6
    assert len(runner.calls) == 1 and runner.iterations == max(LEAST_STEPS, 6)
    assert not any("second run" in line for line in lines), lines


def test_only_the_first_step_measuring_nothing_is_nothing_to_measure():
    """A workload is held only where its first step saw no training step; a later step
    that sees none (a component the script cannot run) is a failed step, not a hold."""
    nothing = NothingToMeasure("train.py ended without a step")
    with pytest.raises(NothingToMeasure):
        scripted_session(ScriptedRunner(nothing), []).measure(2)
    measured = {"steps": 10, "seconds": 5.0, "samples_per_s": 100.0}
    session = scripted_session(ScriptedRunner(measured, nothing, nothing), [])
    assert session.measure(2) == 100.0
    for again in (lambda: session.measure(1), lambda: session.run(Step("loader", 2, 1))):
        with pytest.raises(ProfilingError) as failed:
            again()
        assert not isinstance(failed.value, NothingToMeasure)
        assert "its training steps were measured before" in str(failed.value)


def test_steps_started_anew_pair_on_one_core_too(tmp_path, fake):
    # Without the warm interpreter, local steps are new processes: the pair's two are
    # started at once, both pinned to the allocation's first core.
    proc = profile(tmp_path, "--fingerprint", "00000000000000ac", "--max-iterations", "3",
                   "--fresh-steps", str(fake), cores="0,1")
    assert proc.returncode == 0, proc.stderr
    p = own_store(tmp_path).load("00000000000000ac")
    assert [(x.measure, x.cores) for x in p.points[-2:]] == [("loader", 1), ("shared", 1)]
    assert p.model.shared_core_s is not None
    pair = next((tmp_path / "work").glob("step*-shared-1c"))
    for half in ("compute", "loader"):
        assert (pair / half / "step.log").read_text().startswith("$ ")   # a new process
        result = json.loads((pair / half / "probe.json").read_text())
        assert result["processes"][0]["cpus"] == 1
