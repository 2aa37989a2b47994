"""Bad input to the CLI: one line naming the file, line or argument, a non-zero exit, no
traceback (unless --debug or ATTNLAB_DEBUG=1 asks for it)."""

from __future__ import annotations

import gzip
import io
import json
import random
import shutil
import sys

import pytest
from safetensors.torch import load_file, save_file

from attnlab.cli.main import main

from .conftest import lm_args, run_cli, snapshot


class _Stdin:
    """Stands in for sys.stdin with raw bytes (``buffer``), as a pipe does."""

    def __init__(self, data: bytes):
        self.buffer = io.BytesIO(data)


def _no_traceback(err: str) -> None:
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 8


@pytest.fixture
def model_dir(translation_model, tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(translation_model, copy)
    return copy


def test_corrupt_gzip_names_the_file(tmp_path, capsys):
    good = tmp_path / "train.en"
    good.write_text("a dog\n" * 10)
    bad = tmp_path / "train.de.gz"
    rng = random.Random(0)
    data = gzip.compress("".join(rng.choice("abcdefgh \n") for _ in range(5000)).encode())
    bad.write_bytes(data[:30] + b"\xff" * 40 + data[70:])  # a damaged deflate stream: zlib.error
    code, err = run_cli(["train", "translation", "--train-src", str(bad), "--train-tgt", str(good), "--out",
                         str(tmp_path / "out"), "--no-progress"], capsys)
    assert code == 2 and str(bad) in err
    _no_traceback(err)
    assert not (tmp_path / "out").exists()


def test_missing_text_names_the_file(tmp_path, capsys):
    missing = tmp_path / "nowhere.txt"
    code, err = run_cli(lm_args(missing, tmp_path / "out"), capsys)
    assert code == 2 and str(missing) in err
    _no_traceback(err)


def test_empty_validation_text_is_named(lm_text, tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    code, err = run_cli(lm_args(lm_text, tmp_path / "out", "--valid-text", str(empty), "--val-every", "1"), capsys)
    assert code == 2 and "--valid-text" in err
    _no_traceback(err)
    assert not (tmp_path / "out").exists()


def test_out_that_is_a_file_is_refused_by_train_translation(tmp_path, capsys):
    data = tmp_path / "d.txt"
    data.write_text("a dog\n" * 10)
    out = tmp_path / "file"
    out.write_text("keep\n")
    code, err = run_cli(["train", "translation", "--train-src", str(data), "--train-tgt", str(data), "--out",
                         str(out), "--no-progress"], capsys)
    assert code == 2 and str(out) in err and out.read_text() == "keep\n"


def test_nan_weights_with_beam_2(model_dir, capsys, monkeypatch):
    weights = model_dir / "model.safetensors"
    tensors = load_file(str(weights))
    name = sorted(tensors)[-1]
    tensors[name].fill_(float("nan"))
    save_file(tensors, str(weights))
    monkeypatch.setattr(sys, "stdin", _Stdin(b"ein hund\n"))
    code, err = run_cli(["translate", "--model", str(model_dir), "--beam", "2"], capsys)
    assert code == 2 and str(weights) in err and "holds NaN" in err
    _no_traceback(err)


def test_deeply_nested_config(model_dir, capsys, monkeypatch):
    (model_dir / "config.json").write_text("{\"a\": " * 50_000 + "1" + "}" * 50_000)
    monkeypatch.setattr(sys, "stdin", _Stdin(b"ein hund\n"))
    code, err = run_cli(["translate", "--model", str(model_dir)], capsys)
    assert code == 2 and str(model_dir / "config.json") in err
    _no_traceback(err)


def test_garbage_tokenizer(model_dir, capsys, monkeypatch):
    (model_dir / "tokenizer.model").write_bytes(b"not a sentencepiece model at all")
    monkeypatch.setattr(sys, "stdin", _Stdin(b"ein hund\n"))
    code, err = run_cli(["translate", "--model", str(model_dir)], capsys)
    assert code == 2 and str(model_dir / "tokenizer.model") in err
    _no_traceback(err)


def test_invalid_utf8_on_stdin_names_the_line(translation_model, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", _Stdin(b"ein hund\nzwei \xff\xfe katzen\n"))
    code, err = run_cli(["translate", "--model", str(translation_model)], capsys)
    assert code == 2 and "stdin, line 2" in err and "UTF-8" in err
    _no_traceback(err)


def test_output_that_is_a_directory(translation_model, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", _Stdin(b"ein hund\n"))
    code, err = run_cli(["translate", "--model", str(translation_model), "--output", str(tmp_path)], capsys)
    assert code == 2 and "--output" in err and "directory" in err
    _no_traceback(err)


def test_translate_writes_its_output_whole(translation_model, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out.txt"
    monkeypatch.setattr(sys, "stdin", _Stdin(b"ein hund\nzwei hunde\n"))
    assert run_cli(["translate", "--model", str(translation_model), "--output", str(out), "--beam", "1",
                    "--max-len-a", "0", "--max-len-b", "3"], capsys)[0] == 0
    assert len(out.read_text().splitlines()) == 2
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_too_long_input_is_refused_clearly(translation_model, capsys, monkeypatch):
    max_positions = json.loads((translation_model / "config.json").read_text())["max_positions"]
    monkeypatch.setattr(sys, "stdin", _Stdin(("hund " * (4 * max_positions) + "\n").encode()))
    code, err = run_cli(["translate", "--model", str(translation_model)], capsys)
    assert code == 2 and "sentence 1" in err and f"at most {max_positions}" in err
    _no_traceback(err)


def test_wrong_family_to_translate_and_generate(translation_model, lm_run, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", _Stdin(b"ein hund\n"))
    code, err = run_cli(["translate", "--model", str(lm_run / "model")], capsys)
    assert code == 2 and "'decoder_lm'" in err and "attnlab generate" in err
    code, err = run_cli(["generate", "--model", str(translation_model), "--prompt", "a"], capsys)
    assert code == 2 and "'transformer'" in err and "attnlab translate" in err


@pytest.mark.parametrize("argv, flag", [
    (["translate", "--model", "m", "--alpha", "nan"], "--alpha"),
    (["translate", "--model", "m", "--max-len-b", "inf"], "--max-len-b"),
    (["translate", "--model", "m", "--max-len-a=-inf"], "--max-len-a"),
    (["generate", "--model", "m", "--temperature", "nan"], "--temperature"),
    (["train", "lm", "--out", "o", "--lr", "nan"], "--lr"),
    (["train", "translation", "--out", "o", "--lr-scale", "inf"], "--lr-scale"),
])
def test_non_finite_numbers_are_refused_by_the_parser(argv, flag, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a regression would write "o/"
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"argument {flag}" in err and "not a finite number" in err


def test_debug_shows_the_traceback(tmp_path, capsys, monkeypatch):
    missing = tmp_path / "nowhere.txt"
    code, err = run_cli(["--debug", *lm_args(missing, tmp_path / "out")], capsys)
    assert code == 2 and "Traceback" in err and str(missing) in err
    monkeypatch.setenv("ATTNLAB_DEBUG", "1")
    code, err = run_cli(lm_args(missing, tmp_path / "out"), capsys)
    assert code == 2 and "Traceback" in err


def test_an_internal_error_says_how_to_see_the_traceback(capsys, monkeypatch):
    import attnlab.cli.presets as presets

    def broken(args):
        raise IndexError("list index out of range")
    monkeypatch.setattr(presets, "run", broken)
    code, err = run_cli(["presets"], capsys)
    assert code == 1 and "IndexError: list index out of range" in err and "--debug" in err
    _no_traceback(err)


def test_a_refused_command_keeps_an_earlier_run_byte_for_byte(lm_run, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(lm_run, out)
    before = snapshot(out)
    missing = tmp_path / "nowhere.txt"
    assert run_cli(lm_args(missing, out, "--resume"), capsys)[0] == 2
    assert snapshot(out) == before


def test_text_that_is_not_utf8_names_the_file_and_line(tmp_path, capsys):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("première ligne\n".encode() * 20 + "deuxième\n".encode("latin-1"))
    code, err = run_cli(lm_args(bad, tmp_path / "out"), capsys)
    assert code == 2 and f"{bad}, line 21: not valid UTF-8" in err
    assert not (tmp_path / "out").exists()
