"""Bad input at the model's boundary is a ValueError naming the offending value, never an
IndexError (or worse, a silent wrong answer) from deep inside torch."""

from __future__ import annotations

import pytest
import torch

import attnlab

VOCAB = 20


@pytest.fixture(scope="module")
def model():
    return attnlab.create_model("transformer_tiny", vocab_size=VOCAB).eval()


@pytest.fixture(scope="module")
def learned():
    return attnlab.create_model("transformer_tiny", vocab_size=VOCAB, positional="learned", max_positions=8).eval()


@pytest.fixture(scope="module")
def separate_vocabularies():
    return attnlab.create_model("transformer_tiny", vocab_size=VOCAB, tgt_vocab_size=10,
                                share_embeddings=False).eval()


def ids(*values) -> torch.Tensor:
    return torch.tensor([list(values)])


GOOD = ids(3, 4, 5)


@pytest.mark.parametrize("bad", [-1, VOCAB, VOCAB + 100])
@pytest.mark.parametrize("where", ["src", "tgt"])
def test_token_ids_out_of_range_in_forward(model, bad, where):
    bad_ids = ids(3, bad, 5)
    with pytest.raises(ValueError) as error:
        if where == "src":
            model(bad_ids, GOOD)
        else:
            model(GOOD, bad_ids)
    message = str(error.value)
    assert f"{where}" in message and str(bad) in message and str(VOCAB) in message


@pytest.mark.parametrize("bad", [-3, VOCAB])
def test_token_ids_out_of_range_in_encode_and_decode(model, bad):
    with pytest.raises(ValueError, match=str(bad)):
        model.encode(ids(bad, 3))
    memory, memory_mask = model.encode(GOOD)
    with pytest.raises(ValueError, match=str(bad)):
        model.decode(ids(1, bad), memory, memory_mask)
    cache = model.new_cache()
    model.decode(ids(1), memory, memory_mask, cache=cache)
    with pytest.raises(ValueError, match=str(bad)):
        model.decode(ids(bad), None, memory_mask, cache=cache)


def test_target_ids_are_checked_against_the_target_vocabulary(separate_vocabularies):
    model = separate_vocabularies
    model(ids(3, 15, 19), ids(1, 9))  # 15 and 19 are fine in the source vocabulary of 20
    with pytest.raises(ValueError) as error:
        model(GOOD, ids(1, 15))
    assert "15" in str(error.value) and "10" in str(error.value)


@pytest.mark.parametrize("bad_ids, fragment", [
    (torch.tensor([3, 4, 5]), "(3,)"),
    (torch.tensor([[[3, 4]]]), "(1, 1, 2)"),
    (torch.tensor([[3.0, 4.0]]), "float"),
    (torch.tensor([[True, False]]), "bool"),
])
def test_ids_must_be_an_integer_matrix(model, bad_ids, fragment):
    with pytest.raises(ValueError) as error:
        model(bad_ids, GOOD)
    assert fragment in str(error.value)


def test_sequences_longer_than_the_learned_position_table(learned):
    learned(ids(*[3] * 8), ids(*[3] * 8))  # exactly the table: fine
    with pytest.raises(ValueError) as error:
        learned(ids(*[3] * 9), GOOD)
    assert "8" in str(error.value) and "max_positions" in str(error.value)
    with pytest.raises(ValueError, match="max_positions"):
        learned(GOOD, ids(*[3] * 12))


def test_incremental_decoding_past_the_learned_position_table(learned):
    memory, memory_mask = learned.encode(GOOD)
    cache = learned.new_cache()
    learned.decode(ids(*[3] * 7), memory, memory_mask, cache=cache)
    learned.decode(ids(3), None, memory_mask, cache=cache)  # position 7, the last one
    with pytest.raises(ValueError) as error:
        learned.decode(ids(3), None, memory_mask, cache=cache)  # position 8
    assert "position 8" in str(error.value)


def test_sinusoidal_positions_have_no_length_limit(model):
    assert model.config.max_positions == 256
    logits = model(ids(*[3] * 300), ids(*[4] * 270))
    assert logits.shape == (1, 270, VOCAB) and torch.isfinite(logits).all()


@pytest.mark.parametrize("shape", [(1, 1, 1, 4), (2, 1, 1, 3), (1, 1, 3, 3), (1, 5, 1, 3), (1, 1, 1, 1, 3)])
def test_memory_masks_that_do_not_broadcast(model, shape):
    memory, _ = model.encode(GOOD)  # (1, 3, d)
    with pytest.raises(ValueError) as error:
        model.decode(ids(1, 3), memory, torch.ones(shape, dtype=torch.bool))
    assert str(shape) in str(error.value)


def test_memory_masks_must_be_boolean(model):
    memory, memory_mask = model.encode(GOOD)
    with pytest.raises(ValueError, match="float"):
        model.decode(ids(1, 3), memory, memory_mask.float())


def test_memory_masks_that_broadcast_are_accepted(model):
    memory, memory_mask = model.encode(GOOD)
    full = model.decode(ids(1, 3), memory, memory_mask)
    for mask in (torch.ones(3, dtype=torch.bool), torch.ones(1, 1, 2, 3, dtype=torch.bool)):
        assert torch.allclose(model.decode(ids(1, 3), memory, mask), full, atol=1e-6)
