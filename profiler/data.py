"""Input pipelines for the three data kinds.

jpeg: an ImageFolder tree (root/<class>/<image>), in PyTorch or DALI. Both decode
JPEGs, take a random resized crop, flip at random and normalise with the ImageNet
statistics, so they do the same work and their timings compare.
text: root/corpus.txt, read as windows of bytes at random offsets (cheap per sample).
audio: WAV clips in root/<class>/<clip>.wav, decoded, shifted, scaled (moderate).
"""

from __future__ import annotations

import math
import random
import wave
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from profiler.datagen import TEXT_FILE

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".tif", ".tiff", ".webp")
AUDIO_EXTENSIONS = (".wav",)
AUDIO_GAIN_DB = (-6.0, 6.0)     # random gain range: louder and quieter takes of a sound
# The usual random-resized-crop ranges: 8%..100% of the area, aspect ratio 3/4..4/3.
CROP_SCALE = (0.08, 1.0)
CROP_RATIO = (3 / 4, 4 / 3)

Sample = tuple[torch.Tensor, torch.Tensor]


def list_class_files(root: Path, extensions: tuple[str, ...], kind: str,
                     item: str) -> tuple[list[str], list[tuple[Path, int]]]:
    """Class names (sorted sub-folders) and (file, label) pairs, sorted, for the files
    of root/<class>/ with one of these extensions; kind and item name them in errors.

    FileNotFoundError or ValueError naming root if it is missing or holds none.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{kind} folder {root} does not exist or is not a folder")
    # Hidden entries are skipped: the synthetic dataset's manifest, editor droppings.
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    samples = [(path, label) for label, name in enumerate(classes)
               for path in sorted((root / name).iterdir())
               if path.suffix.lower() in extensions and path.is_file()]
    if not samples:
        raise ValueError(f"{kind} folder {root} holds no {item}s: expected "
                         f"{root}/<class>/<{item}>{extensions[0]}")
    return classes, samples


def list_images(root: Path) -> tuple[list[str], list[tuple[Path, int]]]:
    """Class names and (image, label) pairs of the ImageFolder tree at `root`."""
    return list_class_files(root, IMAGE_EXTENSIONS, "image", "image")


def list_clips(root: Path) -> tuple[list[str], list[tuple[Path, int]]]:
    """Class names and (clip, label) pairs of the WAV clips at root/<class>/."""
    return list_class_files(root, AUDIO_EXTENSIONS, "audio", "clip")


Box = tuple[int, int, int, int]


def random_resized_crop_box(width: int, height: int, rng: random.Random) -> Box:
    """A (left, top, right, bottom) box of random area and aspect ratio inside the image."""
    area = width * height
    log_ratio = (math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1]))
    for _ in range(10):
        target = area * rng.uniform(*CROP_SCALE)
        ratio = math.exp(rng.uniform(*log_ratio))
        w = round(math.sqrt(target * ratio))
        h = round(math.sqrt(target / ratio))
        if 0 < w <= width and 0 < h <= height:
            left = rng.randint(0, width - w)
            top = rng.randint(0, height - h)
            return left, top, left + w, top + h
    # Rarely no draw fits (very elongated images): fall back to the central square-ish box.
    w = min(width, round(height * CROP_RATIO[1]))
    h = min(height, round(width / CROP_RATIO[0]))
    left, top = (width - w) // 2, (height - h) // 2
    return left, top, left + w, top + h


def augment_rng() -> random.Random:
    """A generator for one sample's augmentations, seeded from torch's."""
    # Drawn from torch's generator, which DataLoader seeds per worker and the trainer
    # seeds from --seed, so augmentations are reproducible.
    return random.Random(int(torch.randint(2**62, ()).item()))


class ImageFolder(Dataset[Sample]):
    """Decodes with PIL and augments on the fly; returns (CHW float tensor, label)."""

    def __init__(self, root: Path, crop: int) -> None:
        self.root = Path(root)
        self.crop = crop
        self.classes, self.samples = list_images(self.root)
        self.files = [path for path, _ in self.samples]
        self.mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
        self.std = torch.tensor(IMAGENET_STD).view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> Sample:
        path, label = self.samples[index]
        rng = augment_rng()
        with Image.open(path) as src:
            img = src.convert("RGB")
            box = random_resized_crop_box(img.width, img.height, rng)
            # resize() with a box crops and scales in one pass.
            img = img.resize((self.crop, self.crop), Image.Resampling.BILINEAR, box=box)
        if rng.random() < 0.5:
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        pixels = torch.from_numpy(np.asarray(img, dtype=np.uint8).copy())
        tensor = pixels.permute(2, 0, 1).float().div_(255)
        return (tensor - self.mean) / self.std, torch.tensor(label)


class TextWindows(Dataset[Sample]):
    """Windows of seq_len + 1 bytes of root/corpus.txt: (first seq_len, last seq_len) as
    int64 token ids, the target being the input shifted by one byte.

    An epoch is as many windows as fit end to end, each at a random offset (the index is
    ignored), so every epoch sees the corpus cut differently.
    """

    def __init__(self, root: Path, seq_len: int) -> None:
        self.root = Path(root)
        self.path = self.root / TEXT_FILE
        if not self.path.is_file():
            raise FileNotFoundError(f"text folder {self.root} holds no {TEXT_FILE}")
        self.seq_len = seq_len
        self.size = self.path.stat().st_size
        if self.size < seq_len + 1:
            raise ValueError(f"{self.path} holds {self.size} bytes, fewer than one sequence "
                             f"of {seq_len} + 1")
        self.files = [self.path]

    def __len__(self) -> int:
        return self.size // (self.seq_len + 1)

    def __getitem__(self, index: int) -> Sample:
        offset = augment_rng().randint(0, self.size - self.seq_len - 1)
        # Read from the file each time, as a loader over a corpus too big for memory must.
        with open(self.path, "rb") as f:
            f.seek(offset)
            window = torch.frombuffer(bytearray(f.read(self.seq_len + 1)), dtype=torch.uint8)
        tokens = window.long()
        return tokens[:-1], tokens[1:]


def read_wav(path: Path) -> np.ndarray:
    """A 16-bit PCM WAV as float32 in [-1, 1), channels averaged to mono."""
    with wave.open(str(path), "rb") as w:
        if w.getsampwidth() != 2:
            raise ValueError(f"{path}: {8 * w.getsampwidth()}-bit audio; only 16-bit PCM "
                             "is read")
        channels = w.getnchannels()
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    return pcm.reshape(-1, channels).mean(axis=1, dtype=np.float32) / 32768


def shift_crop(signal: np.ndarray, length: int, rng: random.Random) -> np.ndarray:
    """length samples from a random offset; a shorter clip lands at a random place in
    silence instead, so the model never sees where clips start."""
    if len(signal) >= length:
        start = rng.randint(0, len(signal) - length)
        return signal[start:start + length]
    out = np.zeros(length, dtype=np.float32)
    start = rng.randint(0, length - len(signal))
    out[start:start + len(signal)] = signal
    return out


class AudioClips(Dataset[Sample]):
    """Decodes WAVs with `wave` and numpy; returns ((1, length) float tensor, label) after
    a random shift/crop to length samples and a random gain of AUDIO_GAIN_DB."""

    def __init__(self, root: Path, length: int) -> None:
        self.root = Path(root)
        self.length = length
        self.classes, self.samples = list_clips(self.root)
        self.files = [path for path, _ in self.samples]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> Sample:
        path, label = self.samples[index]
        rng = augment_rng()
        clip = shift_crop(read_wav(path), self.length, rng)
        gain = 10 ** (rng.uniform(*AUDIO_GAIN_DB) / 20)
        return torch.from_numpy(clip * np.float32(gain)).unsqueeze(0), torch.tensor(label)


AnyDataset = ImageFolder | TextWindows | AudioClips
# What a sample of each data kind is called in messages.
SAMPLE_UNITS = {"jpeg": "images", "text": "sequences", "audio": "clips"}


def open_dataset(kind: str, root: Path, length: int) -> AnyDataset:
    """The PyTorch dataset of a data kind ("jpeg", "text", "audio"). length is the crop
    side in px, the sequence length in bytes or the clip length in waveform samples."""
    kinds: dict[str, Callable[[Path, int], AnyDataset]] = {
        "jpeg": ImageFolder, "text": TextWindows, "audio": AudioClips}
    return kinds[kind](root, length)


def check_batch(root: Path, samples: int, batch: int, unit: str = "images") -> None:
    """ValueError naming `root` where its `samples` are fewer than one batch."""
    if samples < batch:
        raise ValueError(f"data folder {root} holds {samples} {unit}, fewer than one "
                         f"batch of {batch}")


def torch_loader(dataset: Dataset[Sample], batch: int, workers: int,
                 seed: int = 0) -> DataLoader[Sample]:
    """A shuffling DataLoader with `workers` processes that drops the last partial batch."""
    return DataLoader(dataset, batch_size=batch, shuffle=True, drop_last=True,
                      num_workers=workers,
                      # Pinned memory only speeds up copies to a GPU.
                      pin_memory=torch.cuda.is_available(),
                      # Keeping workers between epochs avoids re-forking them each epoch.
                      persistent_workers=workers > 0,
                      generator=torch.Generator().manual_seed(seed))


def make_loader(root: Path, batch: int, workers: int, crop: int,
                seed: int = 0) -> DataLoader[Sample]:
    """The JPEG loader over the ImageFolder at root."""
    dataset = ImageFolder(root, crop)
    check_batch(root, len(dataset), batch)
    return torch_loader(dataset, batch, workers, seed)


class DaliLoader:
    """Iterates (images, labels) torch tensors from a DALI pipeline, dropping the last
    partial batch; iterating again starts the next epoch."""

    def __init__(self, iterator: object, batches: int) -> None:
        self._iterator = iterator
        self._batches = batches

    def __len__(self) -> int:
        return self._batches

    def __iter__(self) -> Iterator[Sample]:
        for outputs in self._iterator:  # type: ignore[attr-defined]
            data = outputs[0]    # one pipeline
            yield data["images"], data["labels"].view(-1).long()


def make_dali_loader(root: Path, batch: int, workers: int, crop: int,
                     device: str | torch.device = "cpu", seed: int = 0) -> DaliLoader:
    """The same pipeline in NVIDIA DALI: on the CPU for device "cpu", else on the GPU
    (decode split between host and GPU: the "mixed" decoder).

    RuntimeError saying why if DALI is missing or cannot run here.
    """
    root = Path(root)
    _, samples = list_images(root)    # DALI's own error for an empty folder is obscure
    check_batch(root, len(samples), batch)
    try:
        from nvidia.dali import fn, pipeline_def, types
        from nvidia.dali.plugin.base_iterator import LastBatchPolicy
        from nvidia.dali.plugin.pytorch import DALIGenericIterator
    except ImportError as e:
        raise RuntimeError(f"the DALI loader needs NVIDIA DALI (nvidia-dali-cuda120): {e}") from e

    dev = torch.device(device)
    on_gpu = dev.type == "cuda"
    if on_gpu and not torch.cuda.is_available():
        raise RuntimeError(f"DALI loader asked for {dev} but no CUDA GPU is visible")
    device_id = (dev.index or 0) if on_gpu else None   # None: a CPU-only pipeline
    op_device = "gpu" if on_gpu else "cpu"

    @pipeline_def
    def pipeline():  # type: ignore[no-untyped-def]
        """The DALI graph: read, decode, random resized crop, flip and normalise; (images, labels)."""
        # The file list and labels from list_images(), so both loaders see the same
        # samples and class numbers (DALI's own folder walk would count hidden folders).
        jpegs, labels = fn.readers.file(files=[str(path) for path, _ in samples],
                                        labels=[label for _, label in samples],
                                        random_shuffle=True, name="Reader")
        images = fn.decoders.image(jpegs, device="mixed" if on_gpu else "cpu",
                                   output_type=types.RGB)
        images = fn.random_resized_crop(images, size=(crop, crop), device=op_device,
                                        random_area=CROP_SCALE, random_aspect_ratio=CROP_RATIO)
        images = fn.crop_mirror_normalize(
            images, device=op_device, dtype=types.FLOAT, output_layout="CHW",
            mean=[m * 255 for m in IMAGENET_MEAN], std=[s * 255 for s in IMAGENET_STD],
            mirror=fn.random.coin_flip(probability=0.5))
        if on_gpu:
            labels = labels.gpu()
        return images, labels

    try:
        pipe = pipeline(batch_size=batch, num_threads=max(1, workers), device_id=device_id,
                        seed=seed)
        pipe.build()
        iterator = DALIGenericIterator(pipe, ["images", "labels"], reader_name="Reader",
                                       last_batch_policy=LastBatchPolicy.DROP,
                                       auto_reset=True)
    except RuntimeError as e:
        where = f"GPU {device_id}" if on_gpu else "the CPU only"
        raise RuntimeError(f"DALI cannot run its pipeline on {where} here: {e}") from e
    return DaliLoader(iterator, len(samples) // batch)
