"""Hostile or broken files are refused with a message naming the file, before anything
large is allocated."""

from __future__ import annotations

import json
import shutil
import time

import pytest
import torch
from safetensors.torch import load_file, save_file

import attnlab
from attnlab.training import load_training_state


@pytest.fixture
def model_dir(translation_model, tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(translation_model, copy)
    return copy


def _edit_config(directory, **changes):
    path = directory / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("changes, expected", [
    ({"num_encoder_layers": 1_000_000}, "num_encoder_layers"),
    ({"vocab_size": 20_000_000}, "cap"),
    ({"vocab_size": 10_000_000}, "implies .* parameters"),
    ({"d_model": 1_000_000_000}, "d_model"),
    ({"layer_norm_eps": -1}, "layer_norm_eps=-1 must be positive"),
    ({"dropout": 2.0}, "dropout"),
])
def test_hostile_config_sizes_are_refused_quickly(model_dir, changes, expected):
    path = _edit_config(model_dir, **changes)
    started = time.perf_counter()
    with pytest.raises(ValueError, match=expected) as error:
        attnlab.load_model(model_dir)
    assert str(path) in str(error.value)
    assert time.perf_counter() - started < 10  # no hang, no giant allocation


def test_integer_weights_are_refused(model_dir):
    weights = model_dir / "model.safetensors"
    tensors = load_file(str(weights))
    name = sorted(tensors)[0]
    tensors[name] = tensors[name].to(torch.int64)
    save_file(tensors, str(weights))
    with pytest.raises(ValueError, match=f"{name}.*dtype I64"):
        attnlab.load_model(model_dir)


def test_nan_weights_are_refused(model_dir):
    weights = model_dir / "model.safetensors"
    tensors = load_file(str(weights))
    name = next(n for n in sorted(tensors) if "embed" not in n)  # not a tied (shared) table
    tensors[name][0] = float("nan")
    save_file(tensors, str(weights))
    with pytest.raises(ValueError, match=f"{name}.*NaN"):
        attnlab.load_model(model_dir)


def test_deeply_nested_config_is_refused(model_dir):
    (model_dir / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="config.json"):
        attnlab.load_model(model_dir)


def test_absurd_checkpoint_step_is_refused(lm_run, tmp_path):
    checkpoint = tmp_path / "step"
    shutil.copytree(sorted((lm_run / "checkpoints").glob("step_*"))[-1], checkpoint)
    state_file = checkpoint / "training_state.json"
    header = json.loads(state_file.read_text())
    for bad in (1e30, -1, "7", 10**15):
        header["step"] = bad
        state_file.write_text(json.dumps(header))
        with pytest.raises(ValueError, match="step"):
            load_training_state(checkpoint)


def test_garbage_tokenizer_is_refused_naming_the_file(model_dir):
    from attnlab.families.translation.translator import Translator

    (model_dir / "tokenizer.model").write_bytes(b"\x00garbage" * 50)
    with pytest.raises(ValueError, match="tokenizer.model: not a sentencepiece model"):
        Translator.load(model_dir)
