"""The profiler's command line, its checks, and whole sweeps of a tiny script run as
local processes (the Slurm-step runs are in tests/integration/test_profiling.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from profiler import offline_profiler as op
from profiler.gpu import power_limits_to_try, visible_indices
from slurm_synergy.profile import ProfileStore
from slurm_synergy.profile_table import markdown, plot, table

ROOT = Path(__file__).resolve().parents[2]

# A stand-in training script: speed grows with the cores it may use, as a loader-bound
# job's would. FAKE_MODE picks a misbehaviour.
FAKE = r'''
import argparse, json, os, sys, time
p = argparse.ArgumentParser()
p.add_argument("--workers", type=int); p.add_argument("--max-iterations", type=int)
p.add_argument("--batch", type=int, default=8); p.add_argument("--data")
if os.environ.get("FAKE_MODE") != "no-measure":
    p.add_argument("--measure", default="train")
a = p.parse_args()
mode = os.environ.get("FAKE_MODE", "")
cores = len(os.sched_getaffinity(0))
if mode == "crash-at-1" and cores == 1:
    sys.exit("boom: out of memory in the loader")
if mode == "hang":
    time.sleep(600)
if mode != "no-summary":
    measure = getattr(a, "measure", "train")
    speed = {"train": 40.0 * cores, "loader": 50.0, "compute": 200.0}[measure]
    json.dump({"samples_per_s": speed, "host_cpu_s_per_sample": 0.005,
               "peak_rss_mb": 100.0, "data_stall_fraction": 0.1, "dataset_samples": 10,
               "argv": sys.argv[1:]}, open("summary.json", "w"))
'''


@pytest.fixture
def fake(tmp_path) -> Path:
    path = tmp_path / "fake_train.py"
    path.write_text(FAKE)
    return path


def profile(tmp_path, *args, mode="", cores=None):
    env = dict(os.environ, FAKE_MODE=mode, SYNERGY_PROFILES=str(tmp_path / "store"))
    for key in [k for k in env if k.startswith("SLURM_")]:
        del env[key]
    cmd = [sys.executable, str(ROOT / "profiler" / "offline_profiler.py"),
           "--launcher", "local", "--workdir", str(tmp_path / "work"), *args]
    if cores:
        cmd = ["taskset", "-c", cores, *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)


def stored(tmp_path):
    return ProfileStore(tmp_path / "store").fingerprints()


def test_strip_options_drops_what_the_profiler_sets():
    argv = ["--data", "/d", "-b", "64", "--workers=3", "-j2", "--output", "/o", "--lr", "0.1",
            "--max-iterations", "9", "--measure", "train"]
    assert op.strip_options(argv, op.CONTROLLED) == ["--data", "/d", "--lr", "0.1"]
    assert op.option_value(argv, "--batch", "-b") == "64"
    assert op.option_value(["--data=/x"], "--data") == "/x"
    assert op.option_value([], "--data") is None


def test_core_sweep_halves_while_within_the_plateau():
    seen = []

    def measure(k):
        seen.append(k)
        return min(10.0 * k, 60.0)
    assert op.core_sweep(16, measure, 0.10) == [16, 8, 4] == seen
    assert op.core_sweep(2, lambda k: 5.0, 0.10) == [2, 1]    # flat: down to one core


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
                   "-b", "99", str(fake), "--batch", "4", cores="0,1")
    assert proc.returncode == 0, proc.stderr
    assert stored(tmp_path) == ["00000000000000aa"]
    p = ProfileStore(tmp_path / "store").load("00000000000000aa")
    assert [(x.measure, x.cores, x.workers) for x in p.points] == [
        ("train", 2, 1), ("train", 1, 1), ("loader", 2, 1), ("compute", 1, 0)]
    assert p.model.basis == "components" and len(p.model.held_out) == 2
    assert p.model.prep_core_s == pytest.approx(1 / 50.0)
    assert p.allocation.launcher == "local" and p.allocation.cores == 2
    assert not p.gpu.available and "no GPU" in p.gpu.reason
    assert p.profiling_s > 0 and p.batch == 99
    # The profiler's -b wins over the script's --batch; the profiler sets workers.
    argv = json.loads((tmp_path / "work" / "step01-train-2c" / "summary.json").read_text())["argv"]
    assert argv.count("--batch") == 1 and argv[argv.index("--batch") + 1] == "99"
    assert argv[argv.index("--workers") + 1] == "1"
    assert "step 4: compute only" in proc.stderr   # a line per step in a batch log
    again = profile(tmp_path, "--fingerprint", "00000000000000aa", str(fake), cores="0,1")
    assert again.returncode == 0 and "already profiled" in again.stderr


def test_scripts_without_component_modes_get_an_end_to_end_fit(tmp_path, fake):
    proc = profile(tmp_path, "--fingerprint", "00000000000000bb", str(fake), mode="no-measure",
                   cores="0,1")
    assert proc.returncode == 0, proc.stderr
    p = ProfileStore(tmp_path / "store").load("00000000000000bb")
    assert p.model.basis == "end-to-end" and any("--measure" in n for n in p.notes)


@pytest.mark.parametrize("mode,args,rc,words", [
    ("crash-at-1", [], 1, ["training 1-core step failed with exit status 1",
                           "boom: out of memory", "nothing was stored"]),
    ("hang", ["--step-timeout", "3"], 1, ["past its 3s limit", "--max-iterations"]),
    ("no-summary", [], 1, ["wrote no summary.json"]),
])
def test_failing_scripts_store_nothing(tmp_path, fake, mode, args, rc, words):
    proc = profile(tmp_path, *args, str(fake), mode=mode, cores="0,1")
    assert proc.returncode == rc, proc.stderr
    for word in words:
        assert word in proc.stderr
    assert stored(tmp_path) == []


@pytest.mark.parametrize("args,words", [
    (["/no/such/train.py"], ["/no/such/train.py does not exist"]),
    (["--docker-img", "img", "builtin:train"], ["--docker-img", "srun step"]),
    (["--nnodes", "2", "builtin:train"], ["one node"]),
    (["--cpu", "64", "builtin:train"], ["--cpu 64", "core(s) this allocation has"]),
    (["--fingerprint", "../x", "builtin:train"], ["not a workload fingerprint"]),
    (["--launcher", "srun", "builtin:train"], ["needs a Slurm allocation"]),
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
                   str(fake), cores="0,1").returncode == 0
    profiles = list(ProfileStore(tmp_path / "store"))
    text = table(profiles)
    assert "fake" in text and "2c:80.0" in text and "1c:40.0" in text
    assert markdown(profiles).startswith("| job |")
    png = plot(profiles, tmp_path / "p.png")
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_a_workload_another_job_is_profiling_exits_3(tmp_path, fake):
    import fcntl

    fp = "00000000000000bb"
    (tmp_path / "store").mkdir()
    with open(tmp_path / "store" / f".{fp}.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = profile(tmp_path, "--fingerprint", fp, str(fake), cores="0,1")
    assert proc.returncode == 3 and "being profiled by another job" in proc.stderr
    assert stored(tmp_path) == []


def test_a_corrupt_profile_is_measured_again(tmp_path, fake):
    fp = "00000000000000cc"
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / f"{fp}.json").write_text("{ not json")
    proc = profile(tmp_path, "--fingerprint", fp, str(fake), cores="0,1")
    assert proc.returncode == 0 and "measuring again" in proc.stderr, proc.stderr
    assert ProfileStore(tmp_path / "store").load(fp).fingerprint == fp
