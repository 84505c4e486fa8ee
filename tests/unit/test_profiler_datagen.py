"""The synthetic datasets (JPEG, text, audio): real files, the loaders' layouts, safe to
share."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import wave
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from PIL import Image

from profiler.datagen import (AUDIO_RATE, MANIFEST, TEXT_FILE, DatasetMismatch,
                              ensure_audio_dataset, ensure_image_dataset, ensure_text_dataset,
                              tone_hz)

REPO = Path(__file__).resolve().parents[2]


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _images(root: Path) -> list[Path]:
    return sorted(root.glob("*/*.jpg"))


def test_writes_decodable_jpegs_in_imagefolder_layout(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    assert ensure_image_dataset(root, num_images=23, image_size=40, num_classes=4) == root
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == \
        ["class_000", "class_001", "class_002", "class_003"]
    images = _images(root)
    assert len(images) == 23
    # Spread over the classes round-robin: 6, 6, 6, 5.
    assert sorted(len(list(d.glob("*.jpg"))) for d in root.iterdir() if d.is_dir()) == \
        [5, 6, 6, 6]
    for path in images:
        with Image.open(path) as img:
            assert img.format == "JPEG"
            assert img.size == (40, 40)
            img.load()                   # a full decode, not just the header
            assert img.mode == "RGB"
            # Not blank: random content, so decoding is real work.
            assert max(img.getextrema(), key=lambda e: e[1] - e[0])[1] > 100
    assert json.loads((root / MANIFEST).read_text()) == \
        {"num_images": 23, "image_size": 40, "num_classes": 4, "seed": 0}
    # Nothing but the dataset and its lock beside it.
    assert sorted(p.name for p in tmp_path.iterdir()) == [".ds.lock", "ds"]


def test_same_seed_same_bytes_other_seed_other_images(tmp_path: Path) -> None:
    a = ensure_image_dataset(tmp_path / "a", 12, 32, 3, seed=5)
    b = ensure_image_dataset(tmp_path / "b", 12, 32, 3, seed=5)
    c = ensure_image_dataset(tmp_path / "c", 12, 32, 3, seed=6)
    assert _files(a) == _files(b)
    images_a = {k: v for k, v in _files(a).items() if k.endswith(".jpg")}
    images_c = {k: v for k, v in _files(c).items() if k.endswith(".jpg")}
    assert images_a.keys() == images_c.keys()
    assert all(images_a[k] != images_c[k] for k in images_a)


def test_is_idempotent(tmp_path: Path) -> None:
    root = ensure_image_dataset(tmp_path / "ds", 10, 32, 2)
    before = {p: p.stat().st_mtime_ns for p in root.rglob("*")}
    inode = root.stat().st_ino
    assert ensure_image_dataset(tmp_path / "ds", 10, 32, 2) == root
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*")} == before
    assert root.stat().st_ino == inode


def test_never_touches_a_folder_without_its_manifest(tmp_path: Path) -> None:
    root = tmp_path / "mine"
    (root / "cats").mkdir(parents=True)
    (root / "cats" / "tom.jpg").write_bytes(b"not really a jpeg")
    (root / "notes.txt").write_text("my data")
    before = _files(root)
    assert ensure_image_dataset(root, 10, 32, 2) == root
    assert _files(root) == before
    assert not (root / MANIFEST).exists()


def test_other_settings_on_an_existing_dataset_are_refused(tmp_path: Path) -> None:
    root = ensure_image_dataset(tmp_path / "ds", 10, 32, 2)
    before = _files(root)
    with pytest.raises(DatasetMismatch, match=str(root)):
        ensure_image_dataset(root, 20, 32, 2)
    assert _files(root) == before


def test_fills_an_empty_folder(tmp_path: Path) -> None:
    root = tmp_path / "empty"
    root.mkdir()
    ensure_image_dataset(root, 6, 24, 2)
    assert len(_images(root)) == 6


def test_clears_temporaries_left_by_a_killed_job(tmp_path: Path) -> None:
    stale = tmp_path / ".ds.tmp-dead"
    stale.mkdir()
    (stale / "half.jpg").write_bytes(b"")
    ensure_image_dataset(tmp_path / "ds", 6, 24, 2)
    assert not stale.exists()


@pytest.mark.parametrize("args", [(0, 32, 2), (10, 4, 2), (3, 32, 5)])
def test_bad_settings_raise(tmp_path: Path, args: tuple[int, int, int]) -> None:
    with pytest.raises(ValueError):
        ensure_image_dataset(tmp_path / "ds", *args)
    assert not (tmp_path / "ds").exists()


def _jpeg(root: Path) -> Path:
    return ensure_image_dataset(root, num_images=60, image_size=48, num_classes=5)


def _text(root: Path) -> Path:
    return ensure_text_dataset(root, num_sequences=300, seq_len=63)


def _audio(root: Path) -> Path:
    return ensure_audio_dataset(root, num_clips=60, clip_seconds=0.25, num_classes=5)


def _generate_after(barrier: Any, make: Callable[[Path], Path], root: Path,
                    inodes: Any) -> None:
    # All three start together, so they really race for the lock.
    barrier.wait()
    make(root)
    inodes.put(root.stat().st_ino)


@pytest.mark.parametrize("make,files,count", [(_jpeg, "*/*.jpg", 60), (_text, TEXT_FILE, 1),
                                              (_audio, "*/*.wav", 60)])
def test_concurrent_callers_leave_one_complete_dataset(
        tmp_path: Path, make: Callable[[Path], Path], files: str, count: int) -> None:
    ctx = multiprocessing.get_context("fork")
    root = tmp_path / "shared" / "ds"
    barrier = ctx.Barrier(3)
    inodes = ctx.Queue()
    procs = [ctx.Process(target=_generate_after, args=(barrier, make, root, inodes))
             for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    # All three saw the same folder: none was replaced after another caller returned.
    seen = {inodes.get(timeout=5) for _ in range(3)}
    assert seen == {root.stat().st_ino}
    assert len(list(root.glob(files))) == count
    assert (root / MANIFEST).exists()
    assert sorted(p.name for p in root.parent.iterdir()) == [".ds.lock", "ds"]


def test_cli(tmp_path: Path) -> None:
    root = tmp_path / "cli"
    cmd = [sys.executable, "-m", "profiler.datagen", str(root), "--num-images", "9",
           "--image-size", "30", "--classes", "3"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert str(root) in done.stdout
    assert len(_images(root)) == 9
    with Image.open(_images(root)[0]) as img:
        assert img.size == (30, 30)
    bad = subprocess.run(cmd[:3] + [str(tmp_path / "bad"), "--num-images", "5",
                          "--classes", "30"], cwd=REPO, capture_output=True,
                         text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr and "num_classes" in bad.stderr


# --- text -------------------------------------------------------------------------------

def test_text_corpus_is_readable_english_like_words_of_the_asked_size(tmp_path: Path) -> None:
    root = tmp_path / "text"
    assert ensure_text_dataset(root, num_sequences=400, seq_len=127) == root
    corpus = root / TEXT_FILE
    # Exactly one window of seq_len + 1 bytes per sequence.
    assert corpus.stat().st_size == 400 * 128
    text = corpus.read_text(encoding="ascii")
    assert sorted(p.name for p in root.iterdir()) == [MANIFEST, TEXT_FILE]
    assert json.loads((root / MANIFEST).read_text()) == \
        {"num_sequences": 400, "seq_len": 127, "seed": 0}
    words = [w.strip(",.").lower() for w in text.split()]
    assert all(w.isalpha() for w in words[:-1])     # the last may be cut mid-word
    assert text.count(".") > 20 and any(s[:1].isupper() for s in text.split(". "))
    # Zipf: a few short words are very common, most words are rare.
    counts = Counter(words).most_common()
    assert counts[0][1] > 20 * counts[len(counts) // 2][1]
    assert len(counts[0][0]) <= 3


def test_text_is_reproducible_and_idempotent(tmp_path: Path) -> None:
    a = ensure_text_dataset(tmp_path / "a", 50, 31, seed=4)
    b = ensure_text_dataset(tmp_path / "b", 50, 31, seed=4)
    c = ensure_text_dataset(tmp_path / "c", 50, 31, seed=5)
    assert _files(a) == _files(b)
    assert (a / TEXT_FILE).read_bytes() != (c / TEXT_FILE).read_bytes()
    before = {p: p.stat().st_mtime_ns for p in a.rglob("*")}
    inode = a.stat().st_ino
    assert ensure_text_dataset(tmp_path / "a", 50, 31, seed=4) == a
    assert {p: p.stat().st_mtime_ns for p in a.rglob("*")} == before
    assert a.stat().st_ino == inode
    with pytest.raises(DatasetMismatch, match="seq_len"):
        ensure_text_dataset(a, 50, 63, seed=4)
    # Another kind's dataset in the folder is a mismatch too, never overwritten.
    with pytest.raises(DatasetMismatch):
        ensure_image_dataset(a, 10, 32, 2)
    assert _files(a) == _files(b)


@pytest.mark.parametrize("args", [(0, 32), (10, 0)])
def test_text_bad_settings_raise(tmp_path: Path, args: tuple[int, int]) -> None:
    with pytest.raises(ValueError):
        ensure_text_dataset(tmp_path / "ds", *args)
    assert not (tmp_path / "ds").exists()


# --- audio ------------------------------------------------------------------------------

def _clips(root: Path) -> list[Path]:
    return sorted(root.glob("*/*.wav"))


def _read(path: Path) -> tuple[Any, np.ndarray]:
    with wave.open(str(path), "rb") as w:
        return w.getparams(), np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")


def test_audio_writes_16bit_mono_wavs_in_class_folders(tmp_path: Path) -> None:
    root = tmp_path / "audio"
    assert ensure_audio_dataset(root, num_clips=14, num_classes=4) == root
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == \
        ["class_000", "class_001", "class_002", "class_003"]
    clips = _clips(root)
    assert len(clips) == 14
    assert sorted(len(list(d.glob("*.wav"))) for d in root.iterdir() if d.is_dir()) == \
        [3, 3, 4, 4]
    for path in clips:
        params, pcm = _read(path)
        # The defaults: 8 kHz, one second, 16-bit PCM mono.
        assert (params.nchannels, params.sampwidth, params.framerate, params.nframes) == \
            (1, 2, AUDIO_RATE, AUDIO_RATE)
        assert path.stat().st_size == 44 + 2 * AUDIO_RATE
        assert 1000 < np.abs(pcm).max() < 32767      # audible, not clipped
    assert json.loads((root / MANIFEST).read_text()) == \
        {"num_clips": 14, "clip_seconds": 1.0, "sample_rate": AUDIO_RATE,
         "num_classes": 4, "seed": 0}


def test_audio_classes_are_told_apart_by_their_tone(tmp_path: Path) -> None:
    root = ensure_audio_dataset(tmp_path / "audio", num_clips=24, clip_seconds=0.5,
                                num_classes=6)
    for label in range(6):
        for path in _clips(root / f"class_{label:03d}"):
            _, pcm = _read(path)
            spectrum = np.abs(np.fft.rfft(pcm.astype(float)))
            peak_hz = np.argmax(spectrum) * AUDIO_RATE / len(pcm)
            # The loudest frequency is the class tone, give or take the random detune.
            assert peak_hz == pytest.approx(tone_hz(label, 6), rel=0.05)


def test_audio_is_reproducible_and_idempotent(tmp_path: Path) -> None:
    a = ensure_audio_dataset(tmp_path / "a", 6, 0.2, 3, seed=1)
    b = ensure_audio_dataset(tmp_path / "b", 6, 0.2, 3, seed=1)
    assert _files(a) == _files(b)
    before = {p: p.stat().st_mtime_ns for p in a.rglob("*")}
    assert ensure_audio_dataset(tmp_path / "a", 6, 0.2, 3, seed=1) == a
    assert {p: p.stat().st_mtime_ns for p in a.rglob("*")} == before
    with pytest.raises(DatasetMismatch, match="clip_seconds"):
        ensure_audio_dataset(a, 6, 0.5, 3, seed=1)


@pytest.mark.parametrize("args", [(3, 1.0, 5), (6, 0.00001, 3), (6, 1.0, 0)])
def test_audio_bad_settings_raise(tmp_path: Path, args: tuple[int, float, int]) -> None:
    with pytest.raises(ValueError):
        ensure_audio_dataset(tmp_path / "ds", *args)
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("kind,extra,check", [
    ("text", ["--seq-len", "15"], lambda root: (root / TEXT_FILE).stat().st_size == 9 * 16),
    ("audio", ["--clip-seconds", "0.1", "--classes", "3"],
     lambda root: len(_clips(root)) == 9),
])
def test_cli_other_kinds(tmp_path: Path, kind: str, extra: list[str],
                         check: Callable[[Path], bool]) -> None:
    root = tmp_path / kind
    done = subprocess.run([sys.executable, "-m", "profiler.datagen", str(root), "--kind", kind,
                           "--num-samples", "9", *extra], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert check(root)
