"""The built-in models: shapes on small inputs, the ResNet depth formula, errors."""

from __future__ import annotations

import pytest
import torch

from profiler.models import (DATA_KINDS, M5_MIN_SAMPLES, MAX_SEQ_LEN, MODELS, VOCAB_SIZE,
                             BasicBlock, build_model, model_name, resnet_blocks,
                             resnet_stage_blocks)
from slurm_synergy.model.jobspec import BUILTIN_ARCHS, BUILTIN_DATA_KIND


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


def _example(arch: str) -> tuple[torch.Tensor, torch.Tensor, int]:
    """A small batch of the model's kind of input, its targets and the class count."""
    kind = DATA_KINDS[arch]
    if kind == "text":
        tokens = torch.randint(0, VOCAB_SIZE, (4, 17))
        return tokens[:, :-1], tokens[:, 1:], VOCAB_SIZE
    labels = torch.tensor([0, 1, 2, 0])
    if kind == "audio":
        return torch.randn(4, 1, 2000), labels, 3
    return torch.randn(4, 3, 40, 40), labels, 3


@pytest.mark.parametrize("arch", MODELS)
def test_models_train_one_step(arch: str) -> None:
    torch.manual_seed(0)
    inputs, targets, classes = _example(arch)
    model = build_model(arch, 8 if arch == "resnet" else None, num_classes=classes)
    out = model(inputs)
    # Language models score every position; the trainer flattens them for the loss.
    loss = torch.nn.functional.cross_entropy(out.flatten(0, -2), targets.flatten())
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads if g is not None)


def test_models_and_data_kinds_match_the_job_validator() -> None:
    assert set(MODELS) == {"resnet", "mobilenet", "alexnet", "transformer", "lstm", "m5"}
    assert DATA_KINDS == BUILTIN_DATA_KIND
    assert tuple(MODELS) == tuple(BUILTIN_ARCHS)
    assert set(DATA_KINDS.values()) == {"jpeg", "text", "audio"}


@pytest.mark.parametrize("arch", ["transformer", "lstm"])
@pytest.mark.parametrize("length", [1, 37, 128])
def test_language_models_give_next_byte_logits_per_position(arch: str, length: int) -> None:
    model = build_model(arch, None, VOCAB_SIZE)
    out = model(torch.randint(0, VOCAB_SIZE, (3, length)))
    assert out.shape == (3, length, VOCAB_SIZE)


@pytest.mark.parametrize("arch", ["transformer", "lstm"])
def test_language_models_are_causal(arch: str) -> None:
    torch.manual_seed(0)
    model = build_model(arch, None, VOCAB_SIZE).eval()     # no dropout noise
    tokens = torch.randint(0, VOCAB_SIZE, (2, 24))
    changed = tokens.clone()
    changed[:, 12:] = (changed[:, 12:] + 1) % VOCAB_SIZE
    with torch.no_grad():
        a, b = model(tokens), model(changed)
    # A position sees only the bytes up to itself: changing later ones changes nothing.
    assert torch.allclose(a[:, :12], b[:, :12], atol=1e-5)
    assert not torch.allclose(a[:, 12:], b[:, 12:])


def test_language_model_sizes() -> None:
    transformer = build_model("transformer", None, VOCAB_SIZE)
    assert transformer.tokens.embedding_dim == 128
    assert len(transformer.encoder.layers) == 2
    assert transformer.encoder.layers[0].self_attn.num_heads == 4
    lstm = build_model("lstm", None, VOCAB_SIZE)
    assert (lstm.embed.embedding_dim, lstm.lstm.hidden_size, lstm.lstm.num_layers) == \
        (128, 256, 2)


def test_transformer_refuses_sequences_longer_than_its_positions() -> None:
    model = build_model("transformer", None, VOCAB_SIZE)
    assert model(torch.zeros(1, MAX_SEQ_LEN, dtype=torch.long)).shape[1] == MAX_SEQ_LEN
    with pytest.raises(ValueError, match=str(MAX_SEQ_LEN)):
        model(torch.zeros(1, MAX_SEQ_LEN + 1, dtype=torch.long))


@pytest.mark.parametrize("samples", [M5_MIN_SAMPLES, 7200, 16000])
def test_m5_classifies_waveforms_of_any_length_from_its_minimum(samples: int) -> None:
    model = build_model("m5", None, num_classes=6)
    assert model(torch.randn(2, 1, samples)).shape == (2, 6)
    first = model.features[0]
    assert (first.kernel_size, first.stride) == ((80,), (4,))
    with pytest.raises(ValueError, match=str(M5_MIN_SAMPLES)):
        model(torch.randn(2, 1, M5_MIN_SAMPLES - 1))


@pytest.mark.parametrize("arch,depth,classes,words", [
    ("vgg", None, 10, ["vgg", "resnet"]),
    ("resnet", 0, 10, ["depth", "0"]),
    ("resnet", -3, 10, ["depth", "-3"]),
    ("resnet", 1001, 10, ["depth", "1001"]),
    ("resnet", "18", 10, ["depth", "'18'"]),
    ("mobilenet", 18, 10, ["mobilenet", "depth"]),
    ("alexnet", 8, 10, ["alexnet", "depth"]),
    ("transformer", 2, 256, ["transformer", "depth"]),
    ("lstm", 2, 256, ["lstm", "depth"]),
    ("m5", 5, 10, ["m5", "depth"]),
    ("resnet", 18, 0, ["num_classes"]),
])
def test_bad_arguments_raise_clear_value_error(arch: str, depth: object, classes: int,
                                               words: list[str]) -> None:
    with pytest.raises(ValueError) as err:
        build_model(arch, depth, classes)  # type: ignore[arg-type]
    for word in words:
        assert word in str(err.value)
