"""Small model directories of every family the explorer knows: a random translation model
with a sentencepiece vocabulary, a random character LM, the real all-MiniLM-L6-v2."""

from pathlib import Path

import pytest
import torch

from attnlab import create_model

SENTENCES = ["ein mann fährt fahrrad", "eine frau liest ein buch", "zwei hunde spielen im park",
             "a man rides a bike", "a woman reads a book", "two dogs play in the park"] * 20


@pytest.fixture(scope="session")
def translation_dir(tmp_path_factory) -> Path:
    from attnlab.data.tokenizer import Tokenizer

    directory = tmp_path_factory.mktemp("translation")
    tokenizer = Tokenizer.train(SENTENCES, vocab_size=60, num_threads=1)
    torch.manual_seed(0)
    model = create_model("transformer_tiny", vocab_size=tokenizer.vocab_size)
    model.save_pretrained(directory)
    tokenizer.save(directory)
    return directory


@pytest.fixture(scope="session")
def lm_dir(tmp_path_factory) -> Path:
    from attnlab.data.text import CharTokenizer

    directory = tmp_path_factory.mktemp("lm")
    tokenizer = CharTokenizer.from_text("ROMEO:\nBut soft, what light through yonder window breaks? " + "".join(
        chr(c) for c in range(32, 127)))
    torch.manual_seed(0)
    create_model("lm_tiny", vocab_size=tokenizer.vocab_size).save_pretrained(directory)
    tokenizer.save(directory)
    return directory


