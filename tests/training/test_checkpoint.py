"""Checkpoints: pickle-free round trips, atomic writes, pruning, bad files, averaging."""

import json
import stat
import math
import pickle
import random

import numpy as np
import pytest
import safetensors.torch
import torch

from attnlab.training import checkpoint as ckpt

from ._toys import make_model


class TiedModel(torch.nn.Module):
    """Input and output embeddings share one matrix, as in the paper (section 3.4)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(6, 4)
        self.head = torch.nn.Linear(4, 6, bias=False)
        self.head.weight = self.embed.weight


def _adam_state(model):
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)
    model(torch.tensor([[1, 2, 3]])).sum().backward()
    optimizer.step()
    return optimizer.state_dict()


def _assert_same(a, b):
    """Deep equality that also checks tensors bit for bit and tuple-ness."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            _assert_same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b)
    else:
        assert a == b


def test_encode_decode_round_trip_keeps_types():
    state = {
        "optimizer": _adam_state(make_model()),  # int keys, tuple betas, None, tensors
        "odd": {0: "int key", "0": "str key", (1, 2): [float("inf"), float("-inf"), float("nan")]},
        "tagged": {"__tensor__": "looks like a tag but is data"},
        "rng": torch.get_rng_state(),
        "empty": torch.zeros(0),
    }
    encoded, tensors = ckpt.encode_state(state)
    text = json.dumps(encoded, allow_nan=False)  # strictly valid JSON
    _assert_same(ckpt.decode_state(json.loads(text), tensors), state)


def test_encode_rejects_objects_that_would_need_pickle():
    with pytest.raises(ValueError, match="'/data/sampler'"):
        ckpt.encode_state({"data": {"sampler": object()}})


def test_rng_state_round_trip_through_json():
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    state = json.loads(json.dumps(ckpt.capture_rng_state()))
    expected = (random.random(), np.random.rand(), torch.rand(3))
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    ckpt.restore_rng_state(state)
    again = (random.random(), np.random.rand(), torch.rand(3))
    assert expected[:2] == again[:2] and torch.equal(expected[2], again[2])


def _save(root, step, model, **kwargs):
    return ckpt.save_checkpoint(root, step, model, {"data": {"position": step}}, **kwargs)


def test_save_and_load_round_trip_without_pickle(tmp_path, monkeypatch):
    model = make_model(seed=1)
    optimizer_state = _adam_state(model)
    path = ckpt.save_checkpoint(tmp_path, 7, model, {"optimizer": optimizer_state}, model_config={"family": "toy"})
    assert path == tmp_path / "step_00000007"
    assert sorted(p.name for p in path.iterdir()) == [
        "config.json", "model.safetensors", "training_state.json", "training_state.safetensors"
    ]

    def forbidden(*args, **kwargs):
        raise AssertionError("loading must not unpickle")

    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(torch, "load", forbidden)
    state = ckpt.load_training_state(path)
    fresh = make_model(seed=2)
    ckpt.load_model_weights(path, fresh)
    assert state["step"] == 7
    _assert_same(state["optimizer"], optimizer_state)
    for a, b in zip(model.parameters(), fresh.parameters()):
        assert torch.equal(a, b)


def test_tied_weights_are_saved_once_and_retied(tmp_path):
    model = TiedModel()
    path = ckpt.save_checkpoint(tmp_path, 1, model, {})
    fresh = TiedModel()
    ckpt.load_model_weights(path, fresh)
    assert fresh.head.weight is fresh.embed.weight
    assert torch.equal(fresh.embed.weight, model.embed.weight)


def test_latest_and_keep_last(tmp_path):
    model = make_model()
    assert ckpt.latest_checkpoint(tmp_path) is None
    for step in (5, 10, 15, 20):
        _save(tmp_path, step, model, keep_last=2)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step_00000015", "step_00000020"]
    assert ckpt.latest_checkpoint(tmp_path) == tmp_path / "step_00000020"
    # Hidden temporary directories never count as checkpoints.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000015", "step_00000020"]


def test_a_failed_write_leaves_no_trace(tmp_path, monkeypatch):
    model = make_model()
    _save(tmp_path, 1, model)

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(safetensors.torch, "save_file", crash)
    with pytest.raises(OSError, match="disk full"):
        _save(tmp_path, 2, model)
    assert [p.name for p in tmp_path.iterdir()] == ["step_00000001"]
    assert ckpt.latest_checkpoint(tmp_path).name == "step_00000001"


def test_saving_the_same_step_again_replaces_it(tmp_path):
    model = make_model()
    _save(tmp_path, 3, model)
    torch.nn.init.zeros_(model.out.bias)
    path = _save(tmp_path, 3, model)
    fresh = make_model(seed=5)
    ckpt.load_model_weights(path, fresh)
    assert torch.count_nonzero(fresh.out.bias) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["step_00000003"]


@pytest.mark.parametrize("name", ["model.safetensors", "training_state.safetensors"])
def test_truncated_tensor_files_raise_value_error_naming_the_file(tmp_path, name):
    path = _save(tmp_path, 1, make_model())
    data = (path / name).read_bytes()
    (path / name).write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=name):
        if name == ckpt.MODEL_FILE:
            ckpt.load_model_weights(path, make_model())
        else:
            ckpt.load_training_state(path)


def test_foreign_and_broken_state_json_raise_value_error(tmp_path):
    path = _save(tmp_path, 1, make_model())
    (path / "training_state.json").write_text("{not json")
    with pytest.raises(ValueError, match="training_state.json"):
        ckpt.load_training_state(path)
    (path / "training_state.json").write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ValueError, match="training_state.json.*not an attnlab training state"):
        ckpt.load_training_state(path)


def test_a_pickle_file_is_refused(tmp_path):
    path = _save(tmp_path, 1, make_model())
    torch.save(make_model().state_dict(), path / "model.safetensors")  # a pickle in disguise
    with pytest.raises(ValueError, match="model.safetensors"):
        ckpt.load_model_weights(path, make_model())


def test_weights_for_another_model_raise_value_error(tmp_path):
    path = ckpt.save_checkpoint(tmp_path, 1, TiedModel(), {})
    with pytest.raises(ValueError, match="model.safetensors.*TinyLM"):
        ckpt.load_model_weights(path, make_model())


def test_average_of_two_checkpoints_is_the_mean_of_their_tensors(tmp_path):
    first, second = make_model(seed=1), make_model(seed=2)
    first.register_buffer("counter", torch.tensor([3]))  # integer buffers are copied, not averaged
    second.register_buffer("counter", torch.tensor([4]))
    paths = [_save(tmp_path, 1, first), _save(tmp_path, 2, second)]
    averaged = ckpt.average_checkpoints(paths)
    second_state = second.state_dict()
    for key, tensor in first.state_dict().items():
        if tensor.is_floating_point():
            assert torch.equal(averaged[key], (tensor + second_state[key]) / 2), key
    assert torch.equal(averaged["counter"], torch.tensor([3]))


def test_average_of_three_files_and_errors(tmp_path):
    models = [make_model(seed=s) for s in range(3)]
    files = []
    for index, model in enumerate(models):
        files.append(tmp_path / f"{index}.safetensors")
        safetensors.torch.save_model(model, str(files[-1]))
    averaged = ckpt.average_checkpoints(files)
    mean = torch.stack([m.out.weight.detach() for m in models]).mean(0)
    assert torch.allclose(averaged["out.weight"], mean, atol=1e-7)

    with pytest.raises(ValueError, match="paths"):
        ckpt.average_checkpoints([])
    safetensors.torch.save_model(TiedModel(), str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="other.safetensors"):
        ckpt.average_checkpoints([files[0], tmp_path / "other.safetensors"])


def test_average_to_directory_writes_a_model_directory(tmp_path):
    tokenizer = tmp_path / "spm.model"
    tokenizer.write_bytes(b"tokenizer bytes")
    paths = [
        ckpt.save_checkpoint(tmp_path / "ckpt", step, make_model(seed=step), {},
                             model_config={"family": "toy", "dim": 8}, extra_files=[tokenizer])
        for step in (1, 2)
    ]
    out = ckpt.average_checkpoints_to_directory(paths, tmp_path / "averaged")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "spm.model"]
    assert json.loads((out / "config.json").read_text()) == {"family": "toy", "dim": 8}
    model = make_model(seed=9)
    ckpt.load_model_weights(out, model)
    assert torch.equal(model.out.bias, ckpt.average_checkpoints(paths)["out.bias"])
    # Neither the checkpoints nor the averaged model are left private (safetensors writes 0600).
    from attnlab.models.base import default_file_mode
    for directory in (*paths, out):
        for file in directory.iterdir():
            assert stat.S_IMODE(file.stat().st_mode) == default_file_mode(), file


def test_average_to_directory_needs_a_config(tmp_path):
    path = _save(tmp_path, 1, make_model())
    with pytest.raises(ValueError, match="config.json"):
        ckpt.average_checkpoints_to_directory([path], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_weights_of_another_model_are_summarised_in_one_line(tmp_path):
    """Another model's weights: one line with the counts and an example of each kind of
    difference, not torch's list of every key."""
    source = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    safetensors.torch.save_model(source, str(tmp_path / "model.safetensors"))
    other = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    with pytest.raises(ValueError) as error:
        ckpt.load_model_weights(tmp_path, other)
    message = str(error.value)
    assert "model.safetensors: cannot load into Sequential" in message and "\n" not in message
    assert "2 missing (e.g. '2.bias')" in message and "2 unexpected (e.g. '1.bias')" in message
    assert "2 of another shape (e.g. '0.bias': (4,) in the file, (5,) in the model)" in message
    ckpt.load_model_weights(tmp_path, same := torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)))
    assert torch.equal(same[0].weight, source[0].weight)
