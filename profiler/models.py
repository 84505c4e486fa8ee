"""The built-in models, defined here so the workload needs no torchvision or torchaudio.

Three image classifiers (resnet, mobilenet, alexnet) end in adaptive average pooling,
so any input from about 16 px up works (the jobs use 32..128 px crops to stay cheap).
Two byte-level language models (transformer, lstm) predict the next byte at every
position. M5 classifies raw waveforms. DATA_KINDS says which data each one reads.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

DEFAULT_RESNET_DEPTH = 18
MIN_DEPTH = 1
MAX_DEPTH = 1000     # the same range the job-list validator accepts
RESNET_WIDTHS = (16, 32, 64)


def resnet_blocks(depth: int) -> int:
    """Basic blocks in a ResNet of this depth: max(1, (depth - 2) // 2).

    Each basic block holds two weighted layers; the stem conv and the classifier are
    the other two. So depth 18 -> 8 blocks, 20 -> 9, 32 -> 15, and anything below 6
    gets the smallest net, one block.
    """
    return max(1, (depth - 2) // 2)


def resnet_stage_blocks(depth: int) -> tuple[int, int, int]:
    """The blocks per stage: spread as evenly as possible, earlier stages get the rest.

    depth 18 -> (3, 3, 2); 20 -> (3, 3, 3); 4 -> (1, 0, 0) (empty stages are skipped).
    """
    blocks = resnet_blocks(depth)
    per_stage, extra = divmod(blocks, len(RESNET_WIDTHS))
    return tuple(per_stage + (1 if i < extra else 0)  # type: ignore[return-value]
                 for i in range(len(RESNET_WIDTHS)))


class BasicBlock(nn.Module):
    """Two 3x3 convs with a shortcut; a 1x1 conv shortcut where the shape changes."""

    def __init__(self, in_ch: int, out_ch: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride, bias=False),
                                          nn.BatchNorm2d(out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The block's output: both convs plus the shortcut, through ReLU."""
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    """CIFAR-style ResNet: 3x3 stem, three stages of 16/32/64 channels, pool, linear."""

    def __init__(self, depth: int, num_classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, RESNET_WIDTHS[0], 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(RESNET_WIDTHS[0]), nn.ReLU(inplace=True))
        layers: list[nn.Module] = []
        channels = RESNET_WIDTHS[0]
        for stage, (width, count) in enumerate(zip(RESNET_WIDTHS, resnet_stage_blocks(depth))):
            for i in range(count):
                # Stages after the first halve the resolution in their first block.
                stride = 2 if stage > 0 and i == 0 else 1
                layers.append(BasicBlock(channels, width, stride))
                channels = width
        self.blocks = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, 3, H, W) images -> (batch, classes) logits."""
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand, 3x3 depthwise, 1x1 linear projection."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = in_ch * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [nn.Conv2d(in_ch, hidden, 1, bias=False), nn.BatchNorm2d(hidden),
                       nn.ReLU6(inplace=True)]
        layers += [nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
                   nn.BatchNorm2d(hidden), nn.ReLU6(inplace=True),
                   # No activation after the projection: it would destroy information
                   # in the narrow bottleneck (the "linear bottleneck" of the paper).
                   nn.Conv2d(hidden, out_ch, 1, bias=False), nn.BatchNorm2d(out_ch)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and in_ch == out_ch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The block's output, with the input added where the shapes match."""
        out = self.body(x)
        return x + out if self.residual else out


# (expansion, output channels, blocks, stride of the first block): a slimmed-down
# MobileNetV2 table, with fewer downsamplings because the inputs are small.
MOBILENET_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 2, 2), (6, 64, 2, 2), (6, 96, 1, 1))


class MobileNet(nn.Module):
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        channels = 32
        layers: list[nn.Module] = [nn.Conv2d(3, channels, 3, 1, 1, bias=False),
                                   nn.BatchNorm2d(channels), nn.ReLU6(inplace=True)]
        for expand, width, count, stride in MOBILENET_STAGES:
            for i in range(count):
                layers.append(InvertedResidual(channels, width, stride if i == 0 else 1, expand))
                channels = width
        last = 256
        layers += [nn.Conv2d(channels, last, 1, bias=False), nn.BatchNorm2d(last),
                   nn.ReLU6(inplace=True)]
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, 3, H, W) images -> (batch, classes) logits."""
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


class AlexNet(nn.Module):
    """A small AlexNet/VGG-style stack: plain convs and max pooling, then an MLP head.

    Batch norm is added after each conv so the default lr of 0.1 does not diverge.
    """

    def __init__(self, num_classes: int) -> None:
        super().__init__()

        def conv(cin: int, cout: int, k: int) -> list[nn.Module]:
            """A conv of `k` taps (same padding), batch norm and ReLU."""
            return [nn.Conv2d(cin, cout, k, 1, k // 2, bias=False), nn.BatchNorm2d(cout),
                    nn.ReLU(inplace=True)]

        self.features = nn.Sequential(
            *conv(3, 64, 5), nn.MaxPool2d(2),
            *conv(64, 128, 3), nn.MaxPool2d(2),
            *conv(128, 192, 3), *conv(192, 128, 3), nn.MaxPool2d(2))
        # A fixed 2x2 grid keeps the head's size independent of the input size.
        self.pool = nn.AdaptiveAvgPool2d(2)
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Linear(128 * 4, 512),
                                        nn.ReLU(inplace=True), nn.Linear(512, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, 3, H, W) images -> (batch, classes) logits."""
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


VOCAB_SIZE = 256        # byte-level tokens: any file is valid input, no tokenizer needed
MAX_SEQ_LEN = 1024      # the transformer's positional table; longer inputs are refused
LM_WIDTH = 128


class TransformerLM(nn.Module):
    """A small causal Transformer: token + learned position embeddings, two pre-norm
    encoder layers under a causal mask, a linear head over the vocabulary.

    (batch, seq) token ids -> (batch, seq, vocab) next-token logits.
    """

    def __init__(self, vocab: int, d_model: int = LM_WIDTH, heads: int = 4, layers: int = 2,
                 max_len: int = MAX_SEQ_LEN) -> None:
        super().__init__()
        self.max_len = max_len
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(max_len, d_model)
        # Pre-norm trains stably at the trainer's SGD learning rate without warmup.
        layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.1,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """(batch, seq) token ids -> (batch, seq, vocab) next-token logits; ValueError past max_len."""
        length = tokens.shape[1]
        if length > self.max_len:
            raise ValueError(f"sequence of {length} tokens is longer than the transformer's "
                             f"{self.max_len} positions")
        x = self.tokens(tokens) + self.positions(torch.arange(length, device=tokens.device))
        mask = nn.Transformer.generate_square_subsequent_mask(length, device=tokens.device)
        x = self.encoder(x, mask=mask, is_causal=True)
        return self.head(self.norm(x))


class LSTMLM(nn.Module):
    """Embedding, a 2-layer LSTM, a linear head: (batch, seq) -> (batch, seq, vocab)."""

    def __init__(self, vocab: int, embed: int = LM_WIDTH, hidden: int = 256,
                 layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """(batch, seq) token ids -> (batch, seq, vocab) next-token logits."""
        out, _ = self.lstm(self.embed(tokens))
        return self.head(out)


M5_CHANNELS = (128, 128, 256, 512)
M5_POOL = 4
M5_FIRST_KERNEL, M5_FIRST_STRIDE = 80, 4
# The shortest waveform that leaves one step after the first conv and the four pools.
M5_MIN_SAMPLES = M5_FIRST_KERNEL + M5_FIRST_STRIDE * (M5_POOL ** len(M5_CHANNELS) - 1)


class M5(nn.Module):
    """M5 of Dai et al. 2017, "Very deep convolutional neural networks for raw waveforms":
    a wide strided first conv (80 taps, stride 4) then three 3-tap convs, each with batch
    norm, ReLU and 4x max pooling; global average pooling and a linear classifier.

    (batch, 1, samples) waveforms -> (batch, classes) logits.
    """

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = 1
        for i, width in enumerate(M5_CHANNELS):
            conv = (nn.Conv1d(channels, width, M5_FIRST_KERNEL, M5_FIRST_STRIDE) if i == 0
                    # Padded so that only the pools shrink the signal after the first conv.
                    else nn.Conv1d(channels, width, 3, padding=1))
            layers += [conv, nn.BatchNorm1d(width), nn.ReLU(inplace=True), nn.MaxPool1d(M5_POOL)]
            channels = width
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool1d(1)
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, waves: torch.Tensor) -> torch.Tensor:
        """(batch, 1, samples) waveforms -> (batch, classes) logits; ValueError when too short."""
        if waves.shape[-1] < M5_MIN_SAMPLES:
            raise ValueError(f"waveform of {waves.shape[-1]} samples is shorter than M5's "
                             f"minimum, {M5_MIN_SAMPLES}")
        return self.fc(torch.flatten(self.pool(self.features(waves)), 1))


Builder = Callable[[int | None, int], nn.Module]

_BUILDERS: dict[str, Builder] = {
    "resnet": lambda depth, classes: ResNet(DEFAULT_RESNET_DEPTH if depth is None else depth,
                                            classes),
    "mobilenet": lambda _, classes: MobileNet(classes),
    "alexnet": lambda _, classes: AlexNet(classes),
    # For the language models the classes are the vocabulary: VOCAB_SIZE for bytes.
    "transformer": lambda _, classes: TransformerLM(classes),
    "lstm": lambda _, classes: LSTMLM(classes),
    "m5": lambda _, classes: M5(classes),
}
MODELS: tuple[str, ...] = tuple(_BUILDERS)
# What each model reads: "jpeg" an ImageFolder of images, "text" a corpus of bytes,
# "audio" a folder of WAV clips per class. slurm_synergy.model.jobspec.BUILTIN_DATA_KIND
# repeats it without importing torch; a unit test keeps the two equal.
DATA_KINDS: dict[str, str] = {"resnet": "jpeg", "mobilenet": "jpeg", "alexnet": "jpeg",
                              "transformer": "text", "lstm": "text", "m5": "audio"}


def model_name(arch: str, depth: int | None) -> str:
    """How jobs name a model: 'resnet18', 'mobilenet'."""
    if arch == "resnet":
        return f"resnet{DEFAULT_RESNET_DEPTH if depth is None else depth}"
    return arch


def check_model(arch: str, depth: int | None) -> None:
    """ValueError naming the problem if arch is unknown or depth does not fit it; cheap,
    so the trainer checks before it spends time on data."""
    if arch not in _BUILDERS:
        raise ValueError(f"unknown model {arch!r}; the built-in models are {', '.join(MODELS)}")
    if depth is None:
        return
    if arch != "resnet":
        raise ValueError(f"{arch} has a fixed depth; --depth applies only to resnet "
                         f"(got depth {depth!r})")
    if isinstance(depth, bool) or not isinstance(depth, int) \
            or not MIN_DEPTH <= depth <= MAX_DEPTH:
        raise ValueError(f"resnet depth must be an integer from {MIN_DEPTH} to {MAX_DEPTH}, "
                         f"not {depth!r}")


def build_model(arch: str, depth: int | None, num_classes: int) -> nn.Module:
    """A freshly initialised model; ValueError naming the problem for bad arguments."""
    check_model(arch, depth)
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive integer, not {num_classes!r}")
    return _BUILDERS[arch](depth, num_classes)
