"""The built-in models: shapes on small inputs, the ResNet depth formula, errors."""

from __future__ import annotations

import pytest
import torch

from profiler.models import (MODELS, BasicBlock, build_model, model_name, resnet_blocks,
                             resnet_stage_blocks)


def _blocks(model: torch.nn.Module) -> int:
    return sum(isinstance(m, BasicBlock) for m in model.modules())


@pytest.mark.parametrize("depth,expected", [(1, 1), (4, 1), (5, 1), (6, 2), (12, 5),
                                            (18, 8), (20, 9), (32, 15), (110, 54)])
def test_resnet_block_count_formula(depth: int, expected: int) -> None:
    assert resnet_blocks(depth) == expected == max(1, (depth - 2) // 2)
    stages = resnet_stage_blocks(depth)
    assert sum(stages) == expected
    # As even as possible, the remainder going to the earlier stages.
    assert max(stages) - min(stages) <= 1
    assert list(stages) == sorted(stages, reverse=True)


def test_resnet_stage_split_examples() -> None:
    assert resnet_stage_blocks(18) == (3, 3, 2)
    assert resnet_stage_blocks(20) == (3, 3, 3)
    assert resnet_stage_blocks(4) == (1, 0, 0)
    assert resnet_stage_blocks(8) == (1, 1, 1)


@pytest.mark.parametrize("depth,size", [(4, 32), (8, 32), (12, 64), (18, 48), (20, 32),
                                        (32, 32)])
def test_resnet_output_shape_and_blocks(depth: int, size: int) -> None:
    model = build_model("resnet", depth, num_classes=7)
    out = model(torch.randn(2, 3, size, size))
    assert out.shape == (2, 7)
    assert _blocks(model) == max(1, (depth - 2) // 2)


def test_resnet_default_depth_is_18() -> None:
    model = build_model("resnet", None, 10)
    assert _blocks(model) == 8
    assert model_name("resnet", None) == "resnet18"
    assert model_name("resnet", 12) == "resnet12"
    assert model_name("alexnet", None) == "alexnet"


@pytest.mark.parametrize("arch", ["mobilenet", "alexnet"])
@pytest.mark.parametrize("size", [32, 96, 128])
def test_fixed_models_output_shape(arch: str, size: int) -> None:
    model = build_model(arch, None, num_classes=5)
    assert model(torch.randn(2, 3, size, size)).shape == (2, 5)


@pytest.mark.parametrize("arch", MODELS)
def test_models_train_one_step(arch: str) -> None:
    torch.manual_seed(0)
    model = build_model(arch, 8 if arch == "resnet" else None, num_classes=3)
    loss = torch.nn.functional.cross_entropy(model(torch.randn(4, 3, 40, 40)),
                                             torch.tensor([0, 1, 2, 0]))
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads if g is not None)


def test_models_lists_the_three_builtins() -> None:
    assert {"resnet", "mobilenet", "alexnet"} <= set(MODELS)


@pytest.mark.parametrize("arch,depth,classes,words", [
    ("vgg", None, 10, ["vgg", "resnet"]),
    ("resnet", 0, 10, ["depth", "0"]),
    ("resnet", -3, 10, ["depth", "-3"]),
    ("resnet", 1001, 10, ["depth", "1001"]),
    ("resnet", "18", 10, ["depth", "'18'"]),
    ("mobilenet", 18, 10, ["mobilenet", "depth"]),
    ("alexnet", 8, 10, ["alexnet", "depth"]),
    ("resnet", 18, 0, ["num_classes"]),
])
def test_bad_arguments_raise_clear_value_error(arch: str, depth: object, classes: int,
                                               words: list[str]) -> None:
    with pytest.raises(ValueError) as err:
        build_model(arch, depth, classes)  # type: ignore[arg-type]
    for word in words:
        assert word in str(err.value)
