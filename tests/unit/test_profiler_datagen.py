"""The synthetic JPEG dataset: real files, ImageFolder layout, safe to share."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from profiler.datagen import MANIFEST, DatasetMismatch, ensure_image_dataset

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


def _generate_after(barrier: Any, root: Path, inodes: Any) -> None:
    # All three start together, so they really race for the lock.
    barrier.wait()
    ensure_image_dataset(root, num_images=60, image_size=48, num_classes=5)
    inodes.put(root.stat().st_ino)


def test_concurrent_callers_leave_one_complete_dataset(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    root = tmp_path / "shared" / "ds"
    barrier = ctx.Barrier(3)
    inodes = ctx.Queue()
    procs = [ctx.Process(target=_generate_after, args=(barrier, root, inodes))
             for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    # All three saw the same folder: none was replaced after another caller returned.
    seen = {inodes.get(timeout=5) for _ in range(3)}
    assert seen == {root.stat().st_ino}
    assert len(_images(root)) == 60
    assert json.loads((root / MANIFEST).read_text())["num_images"] == 60
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
