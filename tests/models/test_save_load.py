"""save_pretrained / load_model: a directory of config.json + model.safetensors, read back
exactly, without pickle, and with a clear ValueError for anything that is not such a pair."""

from __future__ import annotations

import json
import pickle
import re
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import attnlab
from attnlab.models.registry import load_config

VOCAB = 24


def tiny(**overrides):
    model = attnlab.create_model("transformer_tiny", vocab_size=VOCAB, **overrides)
    # Move every parameter away from its initial value (LayerNorms start at 1/0), so a
    # loader that silently kept fresh initialisation could not pass.
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    return model.eval()


SRC = torch.tensor([[3, 4, 5, 6, 7], [8, 9, 10, 0, 0]])
TGT = torch.tensor([[1, 11, 12, 13], [1, 14, 15, 0]])

CONFIGS = {
    "tied": dict(),
    "untied_separate": dict(share_embeddings=False, tie_output_projection=False, tgt_vocab_size=VOCAB + 5),
    "pre_ln_learned_gelu": dict(norm_first=True, positional="learned", max_positions=16, activation="gelu",
                                tie_output_projection=False),
}


@pytest.fixture
def saved(tmp_path):
    model = tiny()
    directory = model.save_pretrained(tmp_path / "model")
    return model, directory


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_round_trip_gives_identical_outputs_and_state(tmp_path, name):
    model = tiny(**CONFIGS[name])
    model.save_pretrained(tmp_path / name)
    loaded = attnlab.load_model(tmp_path / name)
    assert type(loaded) is type(model)
    assert loaded.config == model.config
    assert not loaded.training
    expected, actual = model.state_dict(), loaded.state_dict()
    assert list(actual) == list(expected)
    for key in expected:
        assert torch.equal(actual[key], expected[key]), key
    with torch.no_grad():
        assert torch.equal(loaded(SRC, TGT), model(SRC, TGT))


def test_tied_weights_stay_tied_after_loading(saved):
    _, directory = saved
    loaded = attnlab.load_model(directory)
    pointers = {loaded.src_embed.weight.data_ptr(), loaded.tgt_embed.weight.data_ptr(),
                loaded.output_proj.weight.data_ptr()}
    assert len(pointers) == 1
    assert loaded.src_embed.weight is loaded.output_proj.weight
    # Still tied for training: a change through one name shows through the others.
    with torch.no_grad():
        loaded.output_proj.weight[5, 0] = 123.0
    assert loaded.src_embed.weight[5, 0] == 123.0 == loaded.tgt_embed.weight[5, 0]


def test_untied_weights_stay_separate_after_loading(tmp_path):
    model = tiny(**CONFIGS["untied_separate"])
    loaded = attnlab.load_model(model.save_pretrained(tmp_path / "m"))
    pointers = {loaded.src_embed.weight.data_ptr(), loaded.tgt_embed.weight.data_ptr(),
                loaded.output_proj.weight.data_ptr()}
    assert len(pointers) == 3


def test_directory_layout_and_config_contents(saved):
    model, directory = saved
    assert sorted(p.name for p in Path(directory).iterdir()) == ["config.json", "model.safetensors"]  # no temp files
    config = json.loads((directory / "config.json").read_text())
    assert config["family"] == "transformer"
    assert config["vocab_size"] == VOCAB and config["d_model"] == 32
    assert load_config(directory) == model.config
    tensors = load_file(str(directory / "model.safetensors"))
    # The tied matrix is stored once; the sinusoid table is computed, not stored.
    embedding_keys = {k for k in tensors if k in ("encoder.embed.weight", "decoder.embed.weight", "decoder.head.weight")}
    assert len(embedding_keys) == 1
    assert not any("positions" in k for k in tensors)


def test_save_overwrites_and_writes_extra_files(saved):
    model, directory = saved
    other = tiny()
    other.save_pretrained(directory, extra_files={"tokenizer.model": b"spm bytes"})
    assert (directory / "tokenizer.model").read_bytes() == b"spm bytes"
    loaded = attnlab.load_model(directory)
    assert torch.equal(loaded.src_embed.weight, other.src_embed.weight)
    assert not torch.equal(loaded.src_embed.weight, model.src_embed.weight)


def test_loading_never_unpickles(saved, monkeypatch):
    _, directory = saved

    def refuse(*args, **kwargs):
        raise AssertionError("the load path must not unpickle")

    class RefusingUnpickler:
        def __init__(self, *args, **kwargs):
            refuse()

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "Unpickler", RefusingUnpickler)
    monkeypatch.setattr(torch, "load", refuse)
    with pytest.raises(AssertionError):  # the trap works
        pickle.loads(pickle.dumps(1))
    loaded = attnlab.load_model(directory)
    with torch.no_grad():
        assert torch.isfinite(loaded(SRC, TGT)).all()


# -- what is not a saved model ----------------------------------------------------------------
def corrupt_weights(directory: Path, kind: str, model) -> None:
    weights = directory / "model.safetensors"
    data = weights.read_bytes()
    if kind == "truncated":
        weights.write_bytes(data[: len(data) // 2])
    elif kind == "truncated_header":
        weights.write_bytes(data[:20])
    elif kind == "empty":
        weights.write_bytes(b"")
    elif kind == "random_bytes":
        weights.write_bytes(torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(0),
                                          dtype=torch.uint8).numpy().tobytes())
    elif kind == "bad_header_json":
        header = b"{not json!"
        weights.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 64)
    elif kind == "torch_save_pickle":
        torch.save(model.state_dict(), weights)
    elif kind == "directory":
        weights.unlink()
        weights.mkdir()
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["truncated", "truncated_header", "empty", "random_bytes", "bad_header_json",
                                  "torch_save_pickle", "directory"])
def test_foreign_or_broken_weights_are_a_value_error_naming_the_file(saved, kind, monkeypatch):
    model, directory = saved
    corrupt_weights(directory, kind, model)
    monkeypatch.setattr(pickle, "Unpickler", None)  # a pickle must be rejected, not read
    with pytest.raises(ValueError) as error:
        attnlab.load_model(directory)
    assert "model.safetensors" in str(error.value)


def test_missing_files_are_value_errors_naming_them(saved, tmp_path):
    _, directory = saved
    with pytest.raises(ValueError, match="config.json"):
        attnlab.load_model(tmp_path / "does_not_exist")
    (directory / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="model.safetensors"):
        attnlab.load_model(directory)
    (directory / "config.json").unlink()
    with pytest.raises(ValueError, match="config.json"):
        attnlab.load_model(directory)


def test_a_file_given_for_its_model_directory_is_told_which_directory_to_give(saved, tmp_path, capsys):
    _, directory = saved
    for name in ("config.json", "model.safetensors"):
        with pytest.raises(ValueError, match=re.escape(f"{directory / name}: a file, not a model directory; ")) \
                as error:
            attnlab.load_model(directory / name)
        assert str(error.value).endswith(f"give the directory ({directory})")
    from attnlab.cli.main import main  # a verb: one line naming the file, exit 2
    assert main(["compile", "--model", str(directory / "config.json")]) == 2
    err = capsys.readouterr().err
    assert f"{directory / 'config.json'}: a file, not a model directory" in err
    assert "Traceback" not in err and "config.json/config.json" not in err


def test_weights_of_another_shape_are_a_value_error(saved, tmp_path):
    _, directory = saved
    bigger = attnlab.create_model("transformer_tiny", vocab_size=VOCAB, d_model=64)
    bigger.save_pretrained(tmp_path / "bigger")
    (directory / "model.safetensors").write_bytes((tmp_path / "bigger" / "model.safetensors").read_bytes())
    with pytest.raises(ValueError) as error:
        attnlab.load_model(directory)
    assert "model.safetensors" in str(error.value) and "config.json" in str(error.value)


def test_missing_and_unexpected_tensors_are_named(saved):
    _, directory = saved
    weights = directory / "model.safetensors"
    tensors = load_file(str(weights))
    tensors.pop("decoder.stack.final_norm.weight")
    tensors["decoder.extra.weight"] = torch.zeros(2)
    save_file(tensors, str(weights))
    with pytest.raises(ValueError) as error:
        attnlab.load_model(directory)
    message = str(error.value)
    assert "model.safetensors" in message
    assert "decoder.stack.final_norm.weight" in message and "decoder.extra.weight" in message


def edit_config(directory: Path, edit) -> None:
    path = directory / "config.json"
    values = json.loads(path.read_text())
    values = edit(values)
    path.write_text(json.dumps(values))


@pytest.mark.parametrize("edit, fragment", [
    (lambda c: {**c, "num_experts": 8}, "num_experts"),
    (lambda c: {**c, "family": "perceiver"}, "perceiver"),
    (lambda c: {k: v for k, v in c.items() if k != "family"}, "family"),
    (lambda c: [c], "family"),
    (lambda c: {**c, "d_model": "32"}, "d_model"),
    (lambda c: {**c, "norm_first": "no"}, "norm_first"),
    (lambda c: {**c, "vocab_size": None}, "vocab_size"),
    (lambda c: {**c, "num_heads": 5}, "num_heads=5"),
])
def test_bad_configs_are_value_errors_naming_the_file(saved, edit, fragment):
    _, directory = saved
    edit_config(directory, edit)
    with pytest.raises(ValueError) as error:
        attnlab.load_model(directory)
    assert "config.json" in str(error.value)
    assert fragment in str(error.value)


@pytest.mark.parametrize("content", [b"{ not json", b"\xff\xfe\x00garbage", b""])
def test_unreadable_config_is_a_value_error(saved, content):
    _, directory = saved
    (directory / "config.json").write_bytes(content)
    with pytest.raises(ValueError, match="config.json"):
        attnlab.load_model(directory)


def test_saved_files_get_the_usual_mode_not_private(tmp_path):
    import os
    import stat

    from attnlab.models.base import default_file_mode

    attnlab.create_model("transformer_tiny").save_pretrained(tmp_path / "m")
    for name in ("config.json", "model.safetensors"):
        assert stat.S_IMODE(os.stat(tmp_path / "m" / name).st_mode) == default_file_mode()
