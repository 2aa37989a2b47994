"""Shared pieces of the reliability tests: tiny runs through the real CLI, and snapshots
that prove files which existed before a refused command are intact byte for byte."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnlab.cli.main import main

LM_TEXT = "the quick brown fox jumps over the lazy dog.\nROMEO: a dog, a fox and the end.\n" * 12


@pytest.fixture(autouse=True)
def _one_thread(single_thread):
    yield


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every entry under ``root``: file bytes, symlink targets, directories."""
    found: dict[str, bytes | str] = {}
    for path in sorted(Path(root).rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink():
            found[key] = "-> " + os.readlink(path)
        elif path.is_file():
            found[key] = path.read_bytes()
        else:
            found[key] = "dir"
    return found


def lm_args(text: Path, out: Path, *extra: str) -> list[str]:
    """A tiny `attnlab train lm` command (a second or two)."""
    return ["train", "lm", "--text", str(text), "--preset", "lm_tiny", "--context", "16", "--batch-size", "4",
            "--max-steps", "2", "--warmup", "1", "--val-every", "0", "--save-every", "1", "--out", str(out),
            "--no-progress", *extra]


@pytest.fixture
def lm_text(tmp_path) -> Path:
    path = tmp_path / "text.txt"
    path.write_text(LM_TEXT, encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def lm_run(tmp_path_factory) -> Path:
    """A finished tiny `train lm` run (do not modify: copy it first)."""
    root = tmp_path_factory.mktemp("lm_run")
    text = root / "text.txt"
    text.write_text(LM_TEXT, encoding="utf-8")
    assert main(lm_args(text, root / "run")) == 0
    return root / "run"


@pytest.fixture(scope="session")
def translation_model(tmp_path_factory) -> Path:
    """A tiny (untrained) translation model directory: config, weights, tokenizer.model."""
    import attnlab
    from attnlab.data import Tokenizer

    root = tmp_path_factory.mktemp("translation")
    sentences = [f"ein kleiner hund {i} läuft über die wiese" for i in range(30)] + [
        f"a small dog {i} runs across the meadow" for i in range(30)]
    tokenizer = Tokenizer.train(sentences, vocab_size=60, seed=0, num_threads=1)
    torch.manual_seed(0)
    model = attnlab.create_model("transformer_tiny", vocab_size=tokenizer.vocab_size, max_positions=64)
    directory = model.save_pretrained(root / "model", extra_files={"tokenizer.model": tokenizer._proto})
    return directory


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    """``main(argv)`` -> (exit code, stderr)."""
    capsys.readouterr()
    code = main(argv)
    return code, capsys.readouterr().err


def dead_pid() -> int:
    """The PID of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid
