"""A synthetic but real JPEG dataset in ImageFolder layout: root/<class>/<n>.jpg.

Real files, so that reading and decoding cost what they cost on a real dataset; the
content is random shapes over gradients plus noise, drawn from the seed, so two runs
with the same settings write the same images.

Several Slurm jobs may ask for the same folder at once. The first to take the lock
beside the folder builds it in a temporary sibling and renames it into place, so a
reader never sees half a dataset. The manifest, written last, marks a dataset as ours
and complete; a folder without one is somebody's data and is never touched.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image, ImageDraw

MANIFEST = ".synthetic-dataset.json"
JPEG_QUALITY = 90


class DatasetMismatch(ValueError):
    """The folder holds a synthetic dataset made with other settings."""


def class_name(label: int) -> str:
    # Zero-padded so that sorted folder names (how loaders number classes) keep order.
    return f"class_{label:03d}"


def _lock_path(root: Path) -> Path:
    return root.parent / f".{root.name}.lock"


def _temp_prefix(root: Path) -> str:
    return f".{root.name}.tmp-"


def read_manifest(root: Path) -> dict[str, int] | None:
    """The manifest of a dataset this module made, or None if there is none."""
    try:
        with open(root / MANIFEST, encoding="utf-8") as f:
            data = json.load(f)
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def draw_image(rng: np.random.Generator, label: int, num_classes: int, size: int) -> Image.Image:
    """One image: a class-tinted gradient, a few random shapes, then pixel noise."""
    # The tint depends on the class so a model has something to learn.
    hue = np.array([np.cos(2 * np.pi * (label / num_classes + k / 3)) for k in range(3)])
    base = 127 + 90 * hue
    ramp = np.linspace(-1.0, 1.0, size)
    angle = rng.uniform(0, 2 * np.pi)
    grad = np.cos(angle) * ramp[None, :] + np.sin(angle) * ramp[:, None]
    pixels = base[None, None, :] + 60 * grad[:, :, None] * rng.uniform(0.3, 1.0, 3)
    img = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")

    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(3, 8))):
        x0, y0 = rng.integers(0, size, 2)
        w, h = rng.integers(size // 8 + 1, size // 2 + 2, 2)
        box = (int(x0), int(y0), int(x0 + w), int(y0 + h))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        kind = int(rng.integers(0, 3))
        if kind == 0:
            draw.ellipse(box, fill=colour)
        elif kind == 1:
            draw.rectangle(box, fill=colour)
        else:
            points = [tuple(int(v) for v in rng.integers(0, size, 2)) for _ in range(3)]
            draw.polygon(points, fill=colour)

    # Noise makes the JPEGs as hard to compress and decode as photographs.
    noisy = np.asarray(img, dtype=np.int16) + rng.integers(-20, 21, (size, size, 3))
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8), "RGB")


def _generate(into: Path, num_images: int, image_size: int, num_classes: int,
              seed: int) -> None:
    for label in range(num_classes):
        (into / class_name(label)).mkdir()
    for n in range(num_images):
        label = n % num_classes
        # One generator per image: the content of image n depends only on (seed, n).
        rng = np.random.default_rng([seed, n])
        img = draw_image(rng, label, num_classes, image_size)
        img.save(into / class_name(label) / f"{n:06d}.jpg", "JPEG", quality=JPEG_QUALITY)
    manifest = {"num_images": num_images, "image_size": image_size,
                "num_classes": num_classes, "seed": seed}
    # Written last: its presence means every image before it is in place.
    with open(into / MANIFEST, "w", encoding="utf-8") as f:
        json.dump(manifest, f)
        f.flush()
        os.fsync(f.fileno())


def _check_args(num_images: int, image_size: int, num_classes: int) -> None:
    if num_classes < 1:
        raise ValueError(f"num_classes must be at least 1, not {num_classes}")
    if num_images < num_classes:
        raise ValueError(f"num_images ({num_images}) must be at least num_classes "
                         f"({num_classes}) so that every class has an image")
    if image_size < 8:
        raise ValueError(f"image_size must be at least 8 px, not {image_size}")


def _usable(root: Path, wanted: dict[str, int]) -> bool:
    """True if root is a complete dataset to use as it is; raise if it must not be."""
    if not root.exists():
        return False
    if not root.is_dir():
        raise NotADirectoryError(f"{root} exists and is not a folder")
    found = read_manifest(root)
    if found is None:
        # No manifest: a user's own data (used as it is) or an empty folder (filled).
        return any(root.iterdir())
    if {k: found.get(k) for k in wanted} != wanted:
        raise DatasetMismatch(
            f"{root} holds a synthetic dataset made with {found}, not the requested "
            f"{wanted}; remove it or point to another folder")
    return True


def ensure_image_dataset(root: Path, num_images: int = 512, image_size: int = 96,
                         num_classes: int = 10, seed: int = 0) -> Path:
    """Make sure root holds the dataset; build it if missing. Returns root.

    A folder that exists with content but no manifest is returned untouched.
    """
    _check_args(num_images, image_size, num_classes)
    root = Path(root).resolve()   # through symlinks: rename() would replace the link
    wanted = {"num_images": num_images, "image_size": image_size,
              "num_classes": num_classes, "seed": seed}
    if _usable(root, wanted):
        return root

    root.parent.mkdir(parents=True, exist_ok=True)
    with open(_lock_path(root), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # Someone may have finished it while this caller waited for the lock.
        if _usable(root, wanted):
            return root
        # Temporaries are only made under the lock, so any found now are left by a
        # killed job.
        for stale in root.parent.glob(_temp_prefix(root) + "*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=_temp_prefix(root), dir=root.parent))
        try:
            _generate(tmp, num_images, image_size, num_classes, seed)
            os.chmod(tmp, 0o755)        # mkdtemp makes it 0700; others' jobs read it too
            # rename() also replaces an empty folder, and is atomic for readers.
            os.rename(tmp, root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return root


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m profiler.datagen",
        description="Write a synthetic JPEG dataset in ImageFolder layout (if missing).")
    parser.add_argument("root", type=Path, help="the dataset folder")
    parser.add_argument("--num-images", type=int, default=512)
    parser.add_argument("--image-size", type=int, default=96)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        root = ensure_image_dataset(args.root, args.num_images, args.image_size,
                                    args.classes, args.seed)
    except (ValueError, OSError) as e:
        print(f"datagen: error: {e}", file=sys.stderr)
        return 2
    state = "synthetic dataset" if read_manifest(root) else "existing folder without a " \
        "manifest, left as it is"
    print(f"datagen: {root}: {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
