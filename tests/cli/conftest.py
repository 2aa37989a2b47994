"""A tiny translation model trained once per test session through the CLI, on the first
few hundred Multi30k pairs (``$ATTNLAB_DATA`` or the project's ``../shared/data``)."""

import contextlib
import gzip
from pathlib import Path

import pytest
import torch

from attnlab.cli.main import main

TRAIN_PAIRS = 300
VALID_PAIRS = 30


@contextlib.contextmanager
def one_thread():
    """Tiny models run fastest on one thread, and on a machine shared with other test
    processes several threads each are many times slower still; restore afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def char_lm_directory(directory: Path, positions: int = 64) -> Path:
    """A tiny character LM whose vocabulary is lower-case letters and " .," (no 'R' for
    "ROMEO"), saved with its tokenizer in ``directory``."""
    from attnlab import create_model
    from attnlab.data.text import CharTokenizer

    tokenizer = CharTokenizer.from_text("abcdefghijklmnopqrstuvwxyz .,")
    torch.manual_seed(0)
    create_model("lm_tiny", vocab_size=tokenizer.vocab_size, max_positions=positions).save_pretrained(directory)
    tokenizer.save(directory)
    return directory


@pytest.fixture
def char_lm(tmp_path):
    return char_lm_directory(tmp_path / "lm")


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


@pytest.fixture(scope="session")
def multi30k_root(multi30k_dir) -> Path:
    return multi30k_dir


def _head(path: Path, n: int, offset: int = 0) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for _, line in zip(range(offset + n), handle)][offset:]


@pytest.fixture(scope="session")
def small_corpus(multi30k_root, tmp_path_factory) -> dict[str, Path]:
    """Plain-text files: train.{de,en} (300 pairs), valid.{de,en} and test.{de,en} (30 pairs)."""
    directory = tmp_path_factory.mktemp("corpus")
    files = {}
    for split, stem, n in (("train", "train", TRAIN_PAIRS), ("valid", "val", VALID_PAIRS),
                           ("test", "test_2016_flickr", VALID_PAIRS)):
        for lang in ("de", "en"):
            path = directory / f"{split}.{lang}"
            path.write_text("\n".join(_head(multi30k_root / f"{stem}.{lang}.gz", n)) + "\n", encoding="utf-8")
            files[f"{split}.{lang}"] = path
    return files


@pytest.fixture(scope="session")
def trained_model(small_corpus, tmp_path_factory) -> Path:
    """Train transformer_tiny for 30 steps via ``attnlab train translation``; returns OUT/model."""
    out = tmp_path_factory.mktemp("run") / "out"
    with one_thread():
        code = main([
            "train", "translation", "--src", "de", "--tgt", "en",
            "--train-src", str(small_corpus["train.de"]), "--train-tgt", str(small_corpus["train.en"]),
            "--valid-src", str(small_corpus["valid.de"]), "--valid-tgt", str(small_corpus["valid.en"]),
            "--preset", "transformer_tiny", "--vocab-size", "300", "--max-tokens", "1024",
            "--max-steps", "30", "--warmup", "10", "--val-every", "15", "--save-every", "10", "--keep", "3",
            "--log-every", "10", "--no-progress", "--out", str(out),
        ])
    assert code == 0
    return out / "model"
