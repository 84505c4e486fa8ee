"""The training script, run as Slurm jobs run it: a subprocess on a tiny dataset."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.datagen import ensure_image_dataset

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "profiler" / "train.py"
COLUMNS = ["iteration", "epoch", "data_s", "h2d_s", "compute_s", "total_s", "loss"]
# Small and shallow so each run takes a few seconds on two cores.
FAST = ["--arch", "resnet", "--depth", "6", "--batch", "8", "--crop", "32"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_image_dataset(tmp_path_factory.mktemp("data") / "ds", num_images=32,
                                image_size=48, num_classes=4)


def _train(args: list[str], cwd: Path, module: bool = False) -> subprocess.CompletedProcess[str]:
    entry = ["-m", "profiler.train"] if module else [str(TRAIN)]
    return subprocess.run([sys.executable, *entry, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)}
                          if module else None)


def _rows(out: Path) -> list[dict[str, str]]:
    with open(out / "iterations.csv", newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == COLUMNS
        return list(reader)


def test_path_form_writes_iterations_and_summary(dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "stats" / "run1"          # created by the script
    # From another folder, as a Slurm job would run it.
    done = _train([*FAST, "--workers", "1", "--max-iterations", "5", "--warmup", "2",
                   "--data", str(dataset), "--output", str(out)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 2
    assert "resnet6" in lines[0] and "1 torch threads" in lines[0] and str(dataset) in lines[0]
    assert lines[1].startswith("train: resnet6 b=8 j=1 cpu: 5 iterations, ")
    assert "samples/s, data stall" in lines[1]

    rows = _rows(out)
    assert [int(r["iteration"]) for r in rows] == [1, 2, 3, 4, 5]
    # 32 images / batch 8 = 4 iterations an epoch, so the fifth starts epoch 1.
    assert [int(r["epoch"]) for r in rows] == [0, 0, 0, 0, 1]
    for r in rows:
        parts = float(r["data_s"]) + float(r["h2d_s"]) + float(r["compute_s"])
        assert float(r["compute_s"]) > 0
        assert parts == pytest.approx(float(r["total_s"]), abs=1e-5)

    summary = json.loads((out / "summary.json").read_text())
    assert summary["samples_per_s"] > 0
    assert summary["iterations"] == 5 and summary["measured_iterations"] == 3
    measured = rows[2:]
    total = sum(float(r["total_s"]) for r in measured)
    assert summary["samples_per_s"] == pytest.approx(3 * 8 / total, rel=1e-3)
    assert summary["data_stall_fraction"] == pytest.approx(
        sum(float(r["data_s"]) for r in measured) / total, rel=1e-3, abs=1e-5)
    assert summary["mean_compute_s"] == pytest.approx(
        sum(float(r["compute_s"]) for r in measured) / 3, rel=1e-3)
    assert {"arch": "resnet", "depth": 6, "batch": 8, "workers": 1, "loader": "pytorch",
            "device": "cpu", "warmup": 2, "num_classes": 4}.items() <= summary.items()
    assert summary["cpus"] == len(os.sched_getaffinity(0))
    assert summary["torch_threads"] == max(1, summary["cpus"] - 1)
    assert summary["wall_s"] >= summary["train_s"] > 0
    assert summary["started"] <= summary["finished"]
    # Written atomically: no temporaries left beside the results.
    assert sorted(p.name for p in out.iterdir()) == ["iterations.csv", "summary.json"]


def test_module_form_generates_data_and_runs_epochs(tmp_path: Path) -> None:
    data = tmp_path / "generated"
    done = _train(["--arch", "alexnet", "-b", "4", "-j", "0", "--epochs", "2", "--crop", "32",
                   "--data", str(data), "--generate-data", "--dataset-size", "10",
                   "--image-size", "40", "--output", str(tmp_path / "out"), "--port", "29123"],
                  cwd=REPO, module=True)
    assert done.returncode == 0, done.stderr
    assert len(list(data.glob("*/*.jpg"))) == 10
    rows = _rows(tmp_path / "out")
    # 10 images, batch 4: two full batches an epoch.
    assert [int(r["epoch"]) for r in rows] == [0, 0, 1, 1]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["samples_per_s"] > 0 and summary["epochs"] == 2


def test_dali_loader_run(dataset: Path, tmp_path: Path) -> None:
    done = _train([*FAST, "--workers", "1", "--max-iterations", "3", "--loader", "dali",
                   "--data", str(dataset), "--output", str(tmp_path)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(_rows(tmp_path)) == 3
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["loader"] == "dali" and summary["samples_per_s"] > 0


def test_missing_data_folder_exits_2_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "data"
    done = _train([*FAST, "--max-iterations", "1", "--data", str(missing),
                   "--output", str(tmp_path / "out")], cwd=tmp_path)
    assert done.returncode == 2
    assert str(missing) in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "summary.json").exists()


@pytest.mark.parametrize("args,words", [
    (["--batch", "0"], ["--batch", "0"]),
    (["--arch", "resnet", "--depth", "x"], ["--depth", "'x'"]),
    (["--loader", "tf"], ["--loader", "tf"]),
    (["--arch", "mobilenet", "--depth", "18"], ["mobilenet", "depth"]),
    (["--batch", "64"], ["fewer than one batch", "32 images"]),
])
def test_bad_arguments_exit_2_with_one_line(dataset: Path, tmp_path: Path, args: list[str],
                                            words: list[str]) -> None:
    done = _train(["--data", str(dataset), "--max-iterations", "1",
                   "--output", str(tmp_path), *args], cwd=tmp_path)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    for word in words:
        assert word in done.stderr
