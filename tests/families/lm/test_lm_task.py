"""The language-modelling task's pieces: loss, texts, tokenizer choice, batches."""

import pytest
import torch

import attnlab
from attnlab.families.lm.task import build_lm_tokenizer, lm_batches, load_lm_texts
from attnlab.training.losses import lm_loss


def test_lm_loss_is_the_summed_next_token_nll():
    model = attnlab.create_model("lm_tiny").eval()
    ids = torch.randint(0, 64, (3, 9))
    loss, count, logs = lm_loss(model, {"ids": ids})
    logits = model(ids[:, :-1]).double()
    expected = -logits.log_softmax(-1).gather(-1, ids[:, 1:, None]).sum()
    assert count == 3 * 8
    torch.testing.assert_close(loss.double(), expected, rtol=1e-5, atol=1e-5 * count)
    assert torch.equal(logs["nll"], loss.detach())


def test_texts_tokenizer_and_batches(tmp_path):
    text_file = tmp_path / "a.txt"
    text_file.write_text("abcdefghij" * 10, encoding="utf-8")
    text, valid = load_lm_texts([str(text_file)], None)
    whole = text + valid  # read_text_files ends the text with a line break
    assert whole.rstrip("\n") == "abcdefghij" * 10 and len(text) == int(len(whole) * 0.9)
    tokenizer = build_lm_tokenizer("char", text, valid)
    with pytest.raises(ValueError, match="--vocab-size needs --tokenizer bpe"):
        build_lm_tokenizer("char", text, valid, vocab_size=100)
    train, valid_batches = lm_batches(tokenizer, text, valid, batch_size=2, context=4, seed=1, max_valid_batches=3)
    batch = next(iter(train))
    assert batch["ids"].shape == (2, 5)  # context + the next token
    assert all(b["ids"].shape[1] == 5 for b in valid_batches)
