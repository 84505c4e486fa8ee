"""The input pipelines: PyTorch (PIL decode) and DALI on the CPU, same samples and labels."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from PIL import Image

from profiler.data import (ImageFolder, list_images, make_dali_loader, make_loader,
                           random_resized_crop_box)
from profiler.datagen import ensure_image_dataset

# One solid colour per class: after any crop, flip and normalisation the strongest
# channel still tells the class, so labels can be checked against pixels.
COLOURS = {"a_red": (255, 0, 0), "b_green": (0, 255, 0), "c_blue": (0, 0, 255)}


@pytest.fixture(scope="module")
def solid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("solid")
    for name, colour in COLOURS.items():
        (root / name).mkdir()
        for i in range(5):
            Image.new("RGB", (40 + 8 * i, 36), colour).save(root / name / f"{i}.jpg")
    # Things a loader must skip: a hidden folder, a stray text file, a root-level file.
    (root / ".cache").mkdir()
    Image.new("RGB", (8, 8)).save(root / ".cache" / "x.jpg")
    (root / "a_red" / "README.txt").write_text("not an image")
    (root / "manifest.json").write_text("{}")
    return root


def _check_batch(images: torch.Tensor, labels: torch.Tensor, batch: int, crop: int) -> None:
    assert images.shape == (batch, 3, crop, crop)
    assert images.dtype == torch.float32
    assert labels.shape == (batch,)
    assert labels.dtype == torch.int64
    # Normalised: a saturated channel sits near +2.2..2.6, an empty one near -2.
    strongest = images.mean(dim=(2, 3)).argmax(dim=1)
    assert torch.equal(strongest, labels)
    assert images.max() > 2.0 and images.min() < -1.5


def test_list_images_sorted_classes_and_skips_non_images(solid: Path) -> None:
    classes, samples = list_images(solid)
    assert classes == ["a_red", "b_green", "c_blue"]
    assert len(samples) == 15
    assert [label for _, label in samples] == [0] * 5 + [1] * 5 + [2] * 5
    assert all(path.suffix == ".jpg" for path, _ in samples)


def test_missing_or_empty_folder_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "nope")):
        make_loader(tmp_path / "nope", 2, 0, 16, 0)
    (tmp_path / "empty" / "cls").mkdir(parents=True)
    with pytest.raises(ValueError, match=str(tmp_path / "empty")):
        make_loader(tmp_path / "empty", 2, 0, 16, 0)
    with pytest.raises(ValueError, match=str(tmp_path / "empty")):
        make_dali_loader(tmp_path / "empty", 2, 1, 16, "cpu")


def test_fewer_images_than_a_batch_is_an_error(solid: Path) -> None:
    with pytest.raises(ValueError, match="fewer than one batch"):
        make_loader(solid, 16, 0, 16, 0)
    with pytest.raises(ValueError, match="fewer than one batch"):
        make_dali_loader(solid, 16, 1, 16, "cpu")


def test_crop_box_stays_inside_and_follows_the_seed() -> None:
    for seed in range(200):
        w, h = 30 + seed % 50, 20 + seed % 70
        left, top, right, bottom = random_resized_crop_box(w, h, random.Random(seed))
        assert 0 <= left < right <= w and 0 <= top < bottom <= h
    assert random_resized_crop_box(64, 48, random.Random(3)) == \
        random_resized_crop_box(64, 48, random.Random(3))
    # Extreme aspect ratios fall back to a central box that still fits.
    left, top, right, bottom = random_resized_crop_box(400, 2, random.Random(0))
    assert 0 <= left < right <= 400 and 0 <= top < bottom <= 2


@pytest.mark.parametrize("workers", [0, 1])
def test_pytorch_loader_batches(solid: Path, workers: int) -> None:
    loader = make_loader(solid, batch=4, workers=workers, crop=24, seed=1)
    assert len(loader) == 3           # 15 images, the partial batch dropped
    assert loader.persistent_workers == (workers > 0)
    assert loader.pin_memory == torch.cuda.is_available()
    batches = list(loader)
    assert len(batches) == 3
    for images, labels in batches:
        _check_batch(images, labels, 4, 24)


def test_pytorch_loader_shuffles_reproducibly(solid: Path) -> None:
    def order(seed: int) -> list[int]:
        torch.manual_seed(0)
        return [int(x) for _, labels in make_loader(solid, 5, 0, 16, seed) for x in labels]

    assert order(3) == order(3)
    assert sorted(order(3)) == [0] * 5 + [1] * 5 + [2] * 5


def test_dataset_decodes_a_generated_jpeg(tmp_path: Path) -> None:
    root = ensure_image_dataset(tmp_path / "ds", 6, 48, 3)
    dataset = ImageFolder(root, crop=32)
    # Sorted by class, then file: index 4 is class_002/000002.jpg (image n is in class n % 3).
    assert dataset.samples[4][0].relative_to(root) == Path("class_002/000002.jpg")
    image, label = dataset[4]
    assert image.shape == (3, 32, 32) and image.dtype == torch.float32
    assert int(label) == 2
    # Roughly standardised values, not raw bytes.
    assert -3.0 < float(image.min()) < float(image.max()) < 3.0


def test_dali_loader_on_the_cpu(solid: Path) -> None:
    loader = make_dali_loader(solid, batch=4, workers=1, crop=24, device="cpu", seed=2)
    assert len(loader) == 3
    for _ in range(2):                 # a second pass is the next epoch
        batches = list(loader)
        assert len(batches) == 3
        for images, labels in batches:
            assert images.device.type == "cpu"
            _check_batch(images, labels, 4, 24)


def test_dali_and_pytorch_loaders_agree_on_labels(tmp_path: Path) -> None:
    root = ensure_image_dataset(tmp_path / "ds", 20, 40, 4)
    counts = []
    for loader in (make_loader(root, 5, 0, 32, 0),
                   make_dali_loader(root, 5, 1, 32, "cpu")):
        labels = torch.cat([labels for _, labels in loader])
        counts.append(torch.bincount(labels, minlength=4).tolist())
    assert counts == [[5, 5, 5, 5], [5, 5, 5, 5]]
