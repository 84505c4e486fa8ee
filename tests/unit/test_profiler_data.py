"""The input pipelines: for JPEGs PyTorch (PIL decode) and DALI on the CPU, same samples
and labels; for text, windows of the corpus; for audio, decoded and augmented WAV clips."""

from __future__ import annotations

import random
import wave
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from profiler.data import (TEXT_FILE, AudioClips, ImageFolder, TextWindows, list_images,
                           make_dali_loader, make_loader, open_dataset, random_resized_crop_box,
                           read_wav, shift_crop, torch_loader)
from profiler.datagen import ensure_audio_dataset, ensure_image_dataset, ensure_text_dataset

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


# --- text -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_text_dataset(tmp_path_factory.mktemp("text") / "ds", num_sequences=40,
                               seq_len=31)


def test_text_windows_are_shifted_slices_of_the_corpus(corpus: Path) -> None:
    dataset = TextWindows(corpus, seq_len=31)
    assert len(dataset) == 40          # the corpus holds 40 windows of 32 bytes
    assert dataset.files == [corpus / TEXT_FILE]
    text = (corpus / TEXT_FILE).read_bytes()
    torch.manual_seed(0)
    starts = set()
    for i in range(20):
        inputs, targets = dataset[i]
        assert inputs.shape == targets.shape == (31,)
        assert inputs.dtype == targets.dtype == torch.int64
        # The target is the input moved on by one byte.
        assert torch.equal(inputs[1:], targets[:-1])
        window = bytes(inputs.tolist()) + bytes([int(targets[-1])])
        starts.add(text.find(window))
    assert -1 not in starts
    assert len(starts) > 10            # random offsets, not a fixed cut


@pytest.mark.parametrize("workers", [0, 1])
def test_text_loader_batches(corpus: Path, workers: int) -> None:
    loader = torch_loader(open_dataset("text", corpus, 15), batch=8, workers=workers, seed=1)
    assert len(loader) == 10           # 40 * 32 bytes = 80 windows of 16, batches of 8
    assert loader.num_workers == workers
    for inputs, targets in loader:
        assert inputs.shape == targets.shape == (8, 15)
        assert inputs.dtype == torch.int64
        assert 0 <= int(inputs.min()) and int(inputs.max()) < 128      # ASCII text


def test_text_folder_without_a_corpus_or_too_short(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=f"{tmp_path}.*{TEXT_FILE}"):
        TextWindows(tmp_path, 16)
    (tmp_path / TEXT_FILE).write_bytes(b"tiny")
    with pytest.raises(ValueError, match="fewer than one sequence"):
        TextWindows(tmp_path, 16)


# --- audio ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_audio_dataset(tmp_path_factory.mktemp("audio") / "ds", num_clips=12,
                                clip_seconds=0.5, num_classes=3)


def test_read_wav_scales_to_unit_range_and_averages_channels(tmp_path: Path) -> None:
    path = tmp_path / "stereo.wav"
    pcm = np.array([[-32768, 32767], [16384, 16384], [0, -16384]], dtype="<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(pcm.tobytes())
    signal = read_wav(path)
    assert signal.dtype == np.float32
    assert signal.tolist() == pytest.approx([-0.5 / 32768, 0.5, -0.25])
    with wave.open(str(path), "wb") as w:     # 8-bit: refused, not misread
        w.setnchannels(1)
        w.setsampwidth(1)
        w.setframerate(8000)
        w.writeframes(bytes(10))
    with pytest.raises(ValueError, match="16-bit"):
        read_wav(path)


def test_shift_crop_cuts_or_pads_at_random_places() -> None:
    signal = np.arange(1, 11, dtype=np.float32)
    cuts = {tuple(shift_crop(signal, 4, random.Random(s))) for s in range(50)}
    assert all(np.array_equal(c, np.arange(c[0], c[0] + 4)) for c in cuts)
    assert len(cuts) > 3
    padded = [shift_crop(signal, 16, random.Random(s)) for s in range(50)]
    assert all(p.shape == (16,) and p.sum() == signal.sum() for p in padded)
    assert len({int(np.argmax(p > 0)) for p in padded}) > 3


def test_audio_clips_decode_shift_and_scale(clips: Path) -> None:
    dataset = AudioClips(clips, length=3000)
    assert len(dataset) == 12 and dataset.classes == ["class_000", "class_001", "class_002"]
    assert len(dataset.files) == 12 and all(p.suffix == ".wav" for p in dataset.files)
    torch.manual_seed(0)
    peaks = []
    for i in range(len(dataset)):
        clip, label = dataset[i]
        assert clip.shape == (1, 3000) and clip.dtype == torch.float32
        assert int(label) == dataset.samples[i][1]
        peaks.append(float(clip.abs().max()))
    # Normalised to [-1, 1) then scaled by at most +6 dB.
    assert 0.01 < min(peaks) and max(peaks) < 2.0


@pytest.mark.parametrize("workers", [0, 1])
def test_audio_loader_batches(clips: Path, workers: int) -> None:
    loader = torch_loader(open_dataset("audio", clips, 2000), batch=4, workers=workers, seed=0)
    assert len(loader) == 3
    labels = []
    for waves, batch_labels in loader:
        assert waves.shape == (4, 1, 2000) and waves.dtype == torch.float32
        assert batch_labels.shape == (4,) and batch_labels.dtype == torch.int64
        labels += batch_labels.tolist()
    assert sorted(labels) == [0] * 4 + [1] * 4 + [2] * 4


def test_audio_folder_without_clips_names_it(tmp_path: Path) -> None:
    (tmp_path / "cls").mkdir()
    with pytest.raises(ValueError, match=f"{tmp_path}.*clips"):
        AudioClips(tmp_path, 2000)
