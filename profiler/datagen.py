"""Synthetic but real datasets for the built-in models, one kind per data kind:

- jpeg: ImageFolder layout, root/<class>/<n>.jpg: random shapes over class-tinted
  gradients plus noise;
- text: root/corpus.txt, English-like sentences of made-up words whose frequencies
  follow Zipf's law, as words in real text do;
- audio: root/<class>/<n>.wav, 16-bit PCM mono: a class-dependent tone with a random
  envelope, in noise.

Real files, so that reading and decoding cost what they cost on a real dataset; the
content is drawn from the seed, so two runs with the same settings write the same bytes.

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
import wave
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from PIL import Image, ImageDraw

MANIFEST = ".synthetic-dataset.json"
JPEG_QUALITY = 90
TEXT_FILE = "corpus.txt"
TEXT_VOCABULARY = 5000      # distinct words, about what a short novel uses
ZIPF_EXPONENT = 1.1         # word frequency ~ 1 / rank**s; s is close to 1 in English
WORDS_PER_CHUNK = 20000     # the corpus is written in chunks so memory stays flat
AUDIO_RATE = 8000           # Hz, as in the M5 paper
AUDIO_LOWEST_HZ, AUDIO_HIGHEST_HZ = 200.0, 2400.0   # class tones, below the 4 kHz Nyquist

Manifest = dict[str, int | float]


class DatasetMismatch(ValueError):
    """The folder holds a synthetic dataset made with other settings."""


def class_name(label: int) -> str:
    """The folder name of class `label`."""
    # Zero-padded so that sorted folder names (how loaders number classes) keep order.
    return f"class_{label:03d}"


def _lock_path(root: Path) -> Path:
    return root.parent / f".{root.name}.lock"


def _temp_prefix(root: Path) -> str:
    return f".{root.name}.tmp-"


def read_manifest(root: Path) -> Manifest | None:
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


def _write_images(into: Path, num_images: int, image_size: int, num_classes: int,
                  seed: int) -> None:
    for label in range(num_classes):
        (into / class_name(label)).mkdir()
    for n in range(num_images):
        label = n % num_classes
        # One generator per image: the content of image n depends only on (seed, n).
        rng = np.random.default_rng([seed, n])
        img = draw_image(rng, label, num_classes, image_size)
        img.save(into / class_name(label) / f"{n:06d}.jpg", "JPEG", quality=JPEG_QUALITY)


def make_vocabulary(rng: np.random.Generator, size: int) -> list[str]:
    """size distinct pronounceable words, shortest first: the most frequent words of a
    language are its short ones, and the corpus gives rank 1 the highest frequency."""
    onsets = ["", "b", "c", "d", "f", "g", "h", "l", "m", "n", "p", "r", "s", "t", "v", "w",
              "th", "st", "ch", "sh", "tr", "pl", "br", "gr"]
    vowels = ["a", "e", "i", "o", "u", "ea", "ou", "ai"]
    codas = ["", "", "n", "r", "s", "t", "l", "nd", "st", "ng"]
    words: dict[str, None] = {}     # insertion-ordered set: the order follows the seed
    while len(words) < size:
        # Drawn in bulk: a Python call per letter would make this the slow part.
        lengths = rng.choice([1, 2, 3, 4], size, p=[0.35, 0.4, 0.2, 0.05])
        picks = rng.integers(0, [len(onsets), len(vowels), len(codas)], (size, 4, 3))
        for syllables, parts in zip(lengths, picks):
            word = "".join(onsets[o] + vowels[v] + codas[c] for o, v, c in parts[:syllables])
            words[word] = None
            if len(words) == size:
                break
    return sorted(words, key=len)


def zipf_weights(size: int) -> np.ndarray:
    """The chances of `size` words by rank, 1 / rank**ZIPF_EXPONENT, summing to 1."""
    weights = 1.0 / np.arange(1, size + 1) ** ZIPF_EXPONENT
    return weights / weights.sum()


def write_sentences(rng: np.random.Generator, words: list[str], weights: np.ndarray,
                    count: int) -> str:
    """count words as sentences: capitalised, a comma now and then, a full stop, and a
    paragraph break every five sentences or so."""
    ids = rng.choice(len(words), count, p=weights)
    parts: list[str] = []
    at = 0
    while at < count:
        length = int(rng.integers(4, 19))
        sentence = [words[i] for i in ids[at:at + length]]
        at += length
        sentence[0] = sentence[0].capitalize()
        if len(sentence) > 6 and rng.random() < 0.4:
            pause = int(rng.integers(2, len(sentence) - 2))
            sentence[pause] += ","
        parts.append(" ".join(sentence) + (".\n" if rng.random() < 0.2 else ". "))
    return "".join(parts)


def _write_corpus(into: Path, num_bytes: int, seed: int) -> None:
    rng = np.random.default_rng([seed])
    words = make_vocabulary(rng, TEXT_VOCABULARY)
    weights = zipf_weights(len(words))
    written = 0
    with open(into / TEXT_FILE, "wb") as f:
        while written < num_bytes:
            # A word takes at least two bytes with its space, so a small corpus is one
            # chunk no bigger than it needs.
            count = min(WORDS_PER_CHUNK, (num_bytes - written) // 2 + 1)
            chunk = write_sentences(rng, words, weights, count).encode("ascii")
            chunk = chunk[:num_bytes - written]     # exactly num_bytes in all
            f.write(chunk)
            written += len(chunk)


def tone_hz(label: int, num_classes: int) -> float:
    """The class's tone: spaced evenly on a log scale, as pitch is heard."""
    if num_classes == 1:
        return AUDIO_LOWEST_HZ
    return AUDIO_LOWEST_HZ * (AUDIO_HIGHEST_HZ / AUDIO_LOWEST_HZ) ** (label / (num_classes - 1))


def synth_clip(rng: np.random.Generator, label: int, num_classes: int, samples: int,
               rate: int) -> np.ndarray:
    """One clip as int16 PCM: the class tone (slightly detuned) and its octave, switched
    on at a random time and decaying at a random rate, in white noise."""
    t = np.arange(samples) / rate
    hz = tone_hz(label, num_classes) * rng.uniform(0.97, 1.03)
    signal = np.sin(2 * np.pi * hz * t + rng.uniform(0, 2 * np.pi))
    if 2 * hz < rate / 2:
        signal += 0.5 * np.sin(2 * np.pi * 2 * hz * t + rng.uniform(0, 2 * np.pi))
    onset = rng.uniform(0, 0.3) * t[-1] if samples > 1 else 0.0
    envelope = np.where(t >= onset, np.exp(-(t - onset) / rng.uniform(0.2, 1.0)), 0.0)
    clip = rng.uniform(0.2, 0.5) * envelope * signal + rng.uniform(0.02, 0.08) * \
        rng.standard_normal(samples)
    return np.clip(np.round(clip * 32767), -32768, 32767).astype("<i2")


def write_wav(path: Path, pcm: np.ndarray, rate: int) -> None:
    """Write int16 PCM samples as a mono 16-bit WAV file at `rate` Hz."""
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.astype("<i2").tobytes())


def clip_samples(clip_seconds: float, rate: int) -> int:
    """Waveform samples in a clip of `clip_seconds` s at `rate` Hz."""
    return round(clip_seconds * rate)


def _write_clips(into: Path, num_clips: int, clip_seconds: float, num_classes: int,
                 seed: int, rate: int) -> None:
    for label in range(num_classes):
        (into / class_name(label)).mkdir()
    samples = clip_samples(clip_seconds, rate)
    for n in range(num_clips):
        label = n % num_classes
        rng = np.random.default_rng([seed, n])     # clip n depends only on (seed, n)
        write_wav(into / class_name(label) / f"{n:06d}.wav",
                  synth_clip(rng, label, num_classes, samples, rate), rate)


def _check_classes(count: int, what: str, num_classes: int) -> None:
    if num_classes < 1:
        raise ValueError(f"num_classes must be at least 1, not {num_classes}")
    if count < num_classes:
        raise ValueError(f"{what} ({count}) must be at least num_classes "
                         f"({num_classes}) so that every class has one")


def _usable(root: Path, wanted: Manifest) -> bool:
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


def _ensure(root: Path, wanted: Manifest, fill: Callable[[Path], None]) -> Path:
    """Make sure root holds the dataset `wanted` describes; fill(folder) writes its files
    when it must be built. Returns root, resolved.

    A folder that exists with content but no manifest is returned untouched.
    """
    root = Path(root).resolve()   # through symlinks: rename() would replace the link
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
            fill(tmp)
            # Written last: its presence means every file before it is in place.
            with open(tmp / MANIFEST, "w", encoding="utf-8") as f:
                json.dump(wanted, f)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o755)        # mkdtemp makes it 0700; others' jobs read it too
            # rename() also replaces an empty folder, and is atomic for readers.
            os.rename(tmp, root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return root


def ensure_image_dataset(root: Path, num_images: int = 512, image_size: int = 96,
                         num_classes: int = 10, seed: int = 0) -> Path:
    """Make sure root holds the JPEG dataset; build it if missing. Returns root."""
    _check_classes(num_images, "num_images", num_classes)
    if image_size < 8:
        raise ValueError(f"image_size must be at least 8 px, not {image_size}")
    wanted: Manifest = {"num_images": num_images, "image_size": image_size,
                        "num_classes": num_classes, "seed": seed}
    return _ensure(root, wanted, lambda into: _write_images(into, num_images, image_size,
                                                            num_classes, seed))


def ensure_text_dataset(root: Path, num_sequences: int = 512, seq_len: int = 128,
                        seed: int = 0) -> Path:
    """Make sure root holds root/corpus.txt of num_sequences windows of seq_len + 1 bytes
    (input and its one-byte-shifted target); build it if missing. Returns root."""
    if num_sequences < 1:
        raise ValueError(f"num_sequences must be at least 1, not {num_sequences}")
    if seq_len < 1:
        raise ValueError(f"seq_len must be at least 1, not {seq_len}")
    wanted: Manifest = {"num_sequences": num_sequences, "seq_len": seq_len, "seed": seed}
    return _ensure(root, wanted,
                   lambda into: _write_corpus(into, num_sequences * (seq_len + 1), seed))


def ensure_audio_dataset(root: Path, num_clips: int = 512, clip_seconds: float = 1.0,
                         num_classes: int = 10, seed: int = 0,
                         sample_rate: int = AUDIO_RATE) -> Path:
    """Make sure root holds the WAV dataset; build it if missing. Returns root."""
    _check_classes(num_clips, "num_clips", num_classes)
    if sample_rate < 1:
        raise ValueError(f"sample_rate must be at least 1 Hz, not {sample_rate}")
    if not clip_samples(clip_seconds, sample_rate) >= 1:
        raise ValueError(f"clip_seconds ({clip_seconds}) must hold at least one sample "
                         f"at {sample_rate} Hz")
    wanted: Manifest = {"num_clips": num_clips, "clip_seconds": clip_seconds,
                        "sample_rate": sample_rate, "num_classes": num_classes, "seed": seed}
    return _ensure(root, wanted, lambda into: _write_clips(into, num_clips, clip_seconds,
                                                           num_classes, seed, sample_rate))


def ensure_dataset(kind: str, root: Path, samples: int, *, image_size: int = 96,
                   seq_len: int = 128, clip_seconds: float = 1.0, classes: int = 10,
                   seed: int = 0) -> Path:
    """The dataset of `kind` (jpeg, text, audio) at root, written if missing."""
    if kind == "text":
        return ensure_text_dataset(root, samples, seq_len, seed)
    if kind == "audio":
        return ensure_audio_dataset(root, samples, clip_seconds, classes, seed)
    return ensure_image_dataset(root, samples, image_size, classes, seed)


def main(argv: Sequence[str] | None = None) -> int:
    """Write the dataset `argv` asks for where missing; returns 0, or 2 naming the error."""
    parser = argparse.ArgumentParser(
        prog="python -m profiler.datagen",
        description="Write a synthetic dataset (if missing): JPEGs in ImageFolder layout, "
                    "a text corpus, or WAV clips in class folders.")
    parser.add_argument("root", type=Path, help="the dataset folder")
    parser.add_argument("--kind", choices=("jpeg", "text", "audio"), default="jpeg")
    parser.add_argument("--num-samples", "--num-images", dest="num_samples", type=int,
                        default=512, help="images, text sequences or audio clips")
    parser.add_argument("--image-size", type=int, default=96, help="jpeg: side, px")
    parser.add_argument("--seq-len", type=int, default=128, help="text: bytes per sequence")
    parser.add_argument("--clip-seconds", type=float, default=1.0, help="audio: clip length")
    parser.add_argument("--classes", type=int, default=10, help="jpeg and audio")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        root = ensure_dataset(args.kind, args.root, args.num_samples,
                              image_size=args.image_size, seq_len=args.seq_len,
                              clip_seconds=args.clip_seconds, classes=args.classes,
                              seed=args.seed)
    except (ValueError, OSError) as e:
        print(f"datagen: error: {e}", file=sys.stderr)
        return 2
    state = "synthetic dataset" if read_manifest(root) else "existing folder without a " \
        "manifest, left as it is"
    print(f"datagen: {root}: {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
