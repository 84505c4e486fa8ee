"""The built-in models, defined here so the workload needs no torchvision.

All three end in adaptive average pooling, so any input from about 16 px up works
(the jobs use 32..128 px crops to stay cheap).
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
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


class AlexNet(nn.Module):
    """A small AlexNet/VGG-style stack: plain convs and max pooling, then an MLP head.

    Batch norm is added after each conv so the default lr of 0.1 does not diverge.
    """

    def __init__(self, num_classes: int) -> None:
        super().__init__()

        def conv(cin: int, cout: int, k: int) -> list[nn.Module]:
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
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


def _resnet(depth: int | None, num_classes: int) -> nn.Module:
    depth = DEFAULT_RESNET_DEPTH if depth is None else depth
    if isinstance(depth, bool) or not isinstance(depth, int) \
            or not MIN_DEPTH <= depth <= MAX_DEPTH:
        raise ValueError(f"resnet depth must be an integer from {MIN_DEPTH} to {MAX_DEPTH}, "
                         f"not {depth!r}")
    return ResNet(depth, num_classes)


Builder = Callable[[int | None, int], nn.Module]


def _fixed(name: str, factory: Callable[[int], nn.Module]) -> Builder:
    def build(depth: int | None, num_classes: int) -> nn.Module:
        if depth is not None:
            raise ValueError(f"{name} has a fixed depth; --depth applies only to resnet "
                             f"(got depth {depth!r})")
        return factory(num_classes)
    return build


_BUILDERS: dict[str, Builder] = {
    "resnet": _resnet,
    "mobilenet": _fixed("mobilenet", MobileNet),
    "alexnet": _fixed("alexnet", AlexNet),
}
MODELS: tuple[str, ...] = tuple(_BUILDERS)


def model_name(arch: str, depth: int | None) -> str:
    """How jobs name a model: 'resnet18', 'mobilenet'."""
    if arch == "resnet":
        return f"resnet{DEFAULT_RESNET_DEPTH if depth is None else depth}"
    return arch


def build_model(arch: str, depth: int | None, num_classes: int) -> nn.Module:
    """A freshly initialised model; ValueError naming the problem for bad arguments."""
    builder = _BUILDERS.get(arch)
    if builder is None:
        raise ValueError(f"unknown model {arch!r}; the built-in models are {', '.join(MODELS)}")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive integer, not {num_classes!r}")
    return builder(depth, num_classes)
