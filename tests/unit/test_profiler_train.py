"""The training script, run as Slurm jobs run it: a subprocess on a tiny dataset (and, for
the matrix of models, in this process, to spare the imports)."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
import torch

from profiler import train
from profiler.datagen import ensure_audio_dataset, ensure_image_dataset, ensure_text_dataset

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "profiler" / "train.py"
COLUMNS = ["iteration", "epoch", "data_s", "h2d_s", "compute_s", "total_s", "cpu_s", "loss"]
# Small and shallow so each run takes a few seconds on two cores.
FAST = ["--arch", "resnet", "--depth", "6", "--batch", "8", "--crop", "32"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_image_dataset(tmp_path_factory.mktemp("data") / "ds", num_images=32,
                                image_size=48, num_classes=4)


def _train(args: list[str], cwd: Path, module: bool = False) -> subprocess.CompletedProcess[str]:
    entry = ["-m", "profiler.train"] if module else [str(TRAIN)]
    # Neither form needs the checkout on the path: the trainer is part of the install.
    return subprocess.run([sys.executable, *entry, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


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
        assert float(r["compute_s"]) > 0 and float(r["cpu_s"]) > 0
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
            "device": "cpu", "warmup": 2, "num_classes": 4,
            "data_kind": "jpeg", "dataset_samples": 32, "sample_shape": [3, 32, 32],
            "peak_gpu_mem_mb": None}.items() <= summary.items()
    assert summary["cpu_s"] == pytest.approx(sum(float(r["cpu_s"]) for r in measured),
                                             rel=1e-3, abs=1e-5)
    assert summary["dataset_bytes"] == sum(p.stat().st_size for p in dataset.glob("*/*.jpg"))
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
                  cwd=tmp_path, module=True)
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
    (["--arch", "transformer", "--loader", "dali"], ["the DALI loader reads JPEGs only"]),
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


# --- the text and audio models ----------------------------------------------------------

# Small enough that each run takes well under a second on two cores.
TINY = {"transformer": ["--seq-len", "32"], "lstm": ["--seq-len", "32"],
        "m5": ["--audio-crop", "2000"]}
NEW_SUMMARY_KEYS = {"data_kind", "cpu_s", "host_cpu_s_per_sample", "peak_rss_mb",
                    "dataset_bytes", "dataset_samples", "sample_bytes", "peak_gpu_mem_mb"}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kinds")
    text = ensure_text_dataset(root / "text", num_sequences=24, seq_len=32)
    audio = ensure_audio_dataset(root / "audio", num_clips=12, clip_seconds=0.3,
                                 num_classes=3)
    return {"transformer": text, "lstm": text, "m5": audio}


@pytest.fixture
def keep_torch_threads() -> Iterator[None]:
    # The trainer sets torch's thread count for its process; here that is pytest's.
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("keep_torch_threads")
@pytest.mark.parametrize("arch", ["transformer", "lstm", "m5"])
def test_text_and_audio_models_train(datasets: dict[str, Path], tmp_path: Path,
                                     arch: str) -> None:
    data = datasets[arch]
    assert train.main(["--arch", arch, "-b", "4", "-j", "1", "--max-iterations", "3",
                       "--data", str(data), "--output", str(tmp_path), *TINY[arch]]) == 0
    rows = _rows(tmp_path)
    assert len(rows) == 3
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert NEW_SUMMARY_KEYS <= summary.keys()
    kind = "audio" if arch == "m5" else "text"
    files = sorted(data.glob("*/*.wav")) if kind == "audio" else [data / "corpus.txt"]
    samples = 12 if kind == "audio" else 24
    assert {"data_kind": kind, "iterations": 3, "measured_iterations": 1,
            "dataset_samples": samples, "peak_gpu_mem_mb": None,
            "num_classes": 3 if kind == "audio" else 256,
            "sample_shape": [1, 2000] if kind == "audio" else [32]}.items() <= summary.items()
    assert summary["dataset_bytes"] == sum(p.stat().st_size for p in files) > 0
    assert summary["sample_bytes"] == pytest.approx(summary["dataset_bytes"] / samples)
    assert summary["samples_per_s"] > 0
    assert summary["cpu_s"] == pytest.approx(float(rows[2]["cpu_s"]), abs=1e-5)
    assert summary["cpu_s"] > 0
    assert summary["host_cpu_s_per_sample"] == pytest.approx(summary["cpu_s"] / 4)
    assert summary["peak_rss_mb"] > 50        # torch alone takes more than that
    assert math.isfinite(summary["final_loss"])
    assert all(float(r["compute_s"]) > 0 for r in rows)
    assert summary["torch_threads"] == max(1, summary["cpus"] - 1)


def test_generates_text_and_trains_a_language_model(tmp_path: Path) -> None:
    data = tmp_path / "text"
    done = _train(["--arch", "lstm", "-b", "4", "-j", "0", "--max-iterations", "2",
                   "--seq-len", "16", "--generate-data", "--dataset-size", "10",
                   "--data", str(data), "--output", str(tmp_path / "out")], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "10 sequences, 256 classes" in done.stdout
    assert (data / "corpus.txt").stat().st_size == 10 * 17
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["data_kind"] == "text" and summary["sample_bytes"] == 17


def test_generates_audio_for_m5(tmp_path: Path) -> None:
    data = tmp_path / "audio"
    done = _train(["--arch", "m5", "-b", "4", "-j", "1", "--max-iterations", "2",
                   "--generate-data", "--dataset-size", "8",
                   "--data", str(data), "--output", str(tmp_path / "out")], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(list(data.glob("*/*.wav"))) == 8
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    # Default clips: one second at 8 kHz, 16-bit, a 44-byte header; cropped to 7200.
    assert summary["sample_bytes"] == 16044 and summary["sample_shape"] == [1, 7200]


@pytest.mark.parametrize("args,words", [
    (["--arch", "m5", "--loader", "dali"],
     ["the DALI loader reads JPEGs only", "m5", "audio"]),
    (["--arch", "lstm", "--seq-len", "2000"], ["--seq-len", "2000", "1024"]),
    (["--arch", "m5", "--audio-crop", "100"], ["--audio-crop", "100", "1100"]),
    (["--loader", "everything"], ["--loader", "everything"]),
    (["--arch", "transformer", "--depth", "4"], ["transformer", "depth"]),
    (["--arch", "m5", "--batch", "20"], ["fewer than one batch", "12 clips"]),
])
def test_bad_new_arguments_exit_2(datasets: dict[str, Path], tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str], args: list[str],
                                  words: list[str]) -> None:
    data = datasets["m5" if "m5" in args else "lstm"]
    argv = ["--data", str(data), "--max-iterations", "1", "--output", str(tmp_path), *args]
    try:
        status = train.main(argv)
    except SystemExit as e:        # argparse's own errors
        status = e.code
    assert status == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    for word in words:
        assert word in err
    assert not (tmp_path / "summary.json").exists()
