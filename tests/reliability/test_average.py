"""`attnlab average -o DIR` never deletes what it did not write, and publishes only models that load."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

import attnlab

from .conftest import run_cli, snapshot


@pytest.fixture
def checkpoints(lm_run, tmp_path):
    """A copy of a tiny run's two checkpoints."""
    root = tmp_path / "ckpts"
    shutil.copytree(lm_run / "checkpoints", root)
    return sorted(root.glob("step_*"))


def test_refuses_a_non_empty_directory_that_is_not_a_model(checkpoints, tmp_path, capsys):
    target = tmp_path / "precious"
    (target / "sub").mkdir(parents=True)
    (target / "notes.txt").write_text("mine\n")
    (target / "sub" / "data.bin").write_bytes(os.urandom(100))
    before = snapshot(target)
    code, err = run_cli(["average", *map(str, checkpoints), "-o", str(target)], capsys)
    assert code == 2 and str(target) in err and "notes.txt" in err and "--force" in err
    assert snapshot(target) == before


def test_refuses_the_current_directory(checkpoints, tmp_path, capsys, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    (work / "keep.txt").write_text("do not delete\n")
    monkeypatch.chdir(work)
    before = snapshot(tmp_path)
    for force in ([], ["--force"]):
        code, err = run_cli(["average", *map(str, checkpoints), "-o", os.getcwd(), *force], capsys)
        assert code == 2 and "current directory" in err
        assert snapshot(tmp_path) == before


def test_refuses_a_model_directory_holding_other_files(checkpoints, tmp_path, capsys):
    target = tmp_path / "model"
    shutil.copytree(checkpoints[0], target)
    (target / "my_results").mkdir()
    (target / "my_results" / "bleu.txt").write_text("41.6\n")
    before = snapshot(target)
    code, err = run_cli(["average", *map(str, checkpoints), "-o", str(target)], capsys)
    assert code == 2 and "my_results" in err
    assert snapshot(target) == before


def test_replaces_an_earlier_average_only_with_force_and_leaves_no_temporaries(checkpoints, tmp_path, capsys):
    target = tmp_path / "avg"
    assert run_cli(["average", str(checkpoints[0]), "-o", str(target)], capsys)[0] == 0
    before = snapshot(target)
    code, err = run_cli(["average", *map(str, checkpoints), "-o", str(target)], capsys)
    assert code == 2 and "--force" in err and snapshot(target) == before
    assert run_cli(["average", *map(str, checkpoints), "-o", str(target), "--force"], capsys)[0] == 0
    averaged = load_file(str(target / "model.safetensors"))
    first, second = (load_file(str(c / "model.safetensors")) for c in checkpoints)
    for key, value in averaged.items():
        expected = (first[key].double() + second[key].double()) / 2
        torch.testing.assert_close(value.double(), expected, rtol=0, atol=4 * torch.finfo(value.dtype).eps
                                   * float(expected.abs().max()))
    assert attnlab.load_model(target) is not None
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_refuses_to_copy_a_symlinked_file(checkpoints, tmp_path, capsys):
    secret = tmp_path / "secret.txt"
    secret.write_text("private\n")
    tokenizer = checkpoints[0] / "char_tokenizer.json"
    tokenizer.unlink()
    tokenizer.symlink_to(secret)
    code, err = run_cli(["average", str(checkpoints[0]), "-o", str(tmp_path / "out")], capsys)
    assert code == 2 and "symlink" in err and "char_tokenizer.json" in err
    assert not (tmp_path / "out").exists()


def test_refuses_nan_weights_naming_the_file(checkpoints, tmp_path, capsys):
    weights = checkpoints[1] / "model.safetensors"
    tensors = load_file(str(weights))
    name = sorted(tensors)[0]
    tensors[name][0] = float("nan")
    save_file(tensors, str(weights))
    code, err = run_cli(["average", *map(str, checkpoints), "-o", str(tmp_path / "out")], capsys)
    assert code == 2 and str(weights) in err and name in err and "NaN" in err
    assert not (tmp_path / "out").exists()


def test_refuses_a_config_the_result_cannot_load(checkpoints, tmp_path, capsys):
    config_path = checkpoints[0] / "config.json"
    config = json.loads(config_path.read_text())
    config["layer_norm_eps"] = -1.0
    config_path.write_text(json.dumps(config))
    code, err = run_cli(["average", str(checkpoints[0]), "-o", str(tmp_path / "out")], capsys)
    assert code == 2 and "layer_norm_eps" in err and "would not load" in err
    assert not (tmp_path / "out").exists()
