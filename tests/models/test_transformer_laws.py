"""Laws of the encoder–decoder Transformer: causality, padding invariance, and cached
incremental decoding equal to full recomputation."""

from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlab

VOCAB = 20
PAD = 0
VARIANTS = {
    "post_ln_sinusoidal": dict(),
    "pre_ln_learned": dict(norm_first=True, positional="learned", max_positions=32),
    "gelu_untied_separate_vocab": dict(activation="gelu", share_embeddings=False, tie_output_projection=False,
                                       tgt_vocab_size=VOCAB + 7),
}


@functools.cache
def tiny_model(variant: str, seed: int = 0):
    torch.manual_seed(seed)
    model = attnlab.create_model("transformer_tiny", vocab_size=VOCAB, dropout=0.1, **VARIANTS[variant]).eval()
    # Random LayerNorm affine parameters and biases, so nothing hides behind 1s and 0s.
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                parameter.add_(0.2 * torch.randn_like(parameter))
    return model


def random_ids(generator: torch.Generator, lengths: list[int], vocab: int, width: int | None = None) -> torch.Tensor:
    """Right-padded ``(B, width)`` ids with real tokens in [3, vocab)."""
    width = max(lengths) if width is None else width
    ids = torch.full((len(lengths), width), PAD, dtype=torch.long)
    for row, length in enumerate(lengths):
        ids[row, :length] = torch.randint(3, vocab, (length,), generator=generator)
    return ids


def target_vocab(model) -> int:
    return model.config.target_vocab_size


# -- causality ------------------------------------------------------------------------
@pytest.mark.parametrize("variant", sorted(VARIANTS))
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16), tgt_len=st.integers(2, 9), data=st.data())
def test_changing_a_future_target_token_never_changes_earlier_logits(variant, seed, tgt_len, data):
    model = tiny_model(variant)
    generator = torch.Generator().manual_seed(seed)
    src = random_ids(generator, [5, 3], VOCAB)
    tgt = random_ids(generator, [tgt_len, tgt_len], target_vocab(model))
    position = data.draw(st.integers(1, tgt_len - 1), label="changed position")
    changed = tgt.clone()
    changed[:, position:] = (tgt[:, position:] + 1 + torch.randint(0, 5, tgt[:, position:].shape,
                                                                    generator=generator)) % target_vocab(model)
    with torch.no_grad():
        before, after = model(src, tgt), model(src, changed)
    torch.testing.assert_close(after[:, :position], before[:, :position], rtol=0, atol=1e-6)
    # The change does reach its own position, so the comparison above is not vacuous.
    assert (after[:, position] - before[:, position]).abs().max() > 1e-3


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_target_position_sees_the_whole_source(variant):
    """Cross-attention is not causal: the last source token affects the first output."""
    model = tiny_model(variant)
    generator = torch.Generator().manual_seed(1)
    src = random_ids(generator, [6], VOCAB)
    tgt = random_ids(generator, [4], target_vocab(model))
    changed = src.clone()
    changed[0, -1] = 3 + (int(src[0, -1]) - 2) % (VOCAB - 3)
    with torch.no_grad():
        assert (model(changed, tgt)[:, 0] - model(src, tgt)[:, 0]).abs().max() > 1e-3


# -- padding invariance ---------------------------------------------------------------
def real_positions(lengths: list[int], width: int) -> torch.Tensor:
    return torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16),
       src_lengths=st.lists(st.integers(1, 8), min_size=1, max_size=4),
       tgt_lengths_seed=st.integers(0, 2**16),
       extra_src=st.integers(1, 5), extra_tgt=st.integers(1, 5))
def test_extra_padding_never_changes_logits_at_real_positions(variant, seed, src_lengths, tgt_lengths_seed,
                                                              extra_src, extra_tgt):
    model = tiny_model(variant)
    generator = torch.Generator().manual_seed(seed)
    tgt_lengths = torch.randint(1, 8, (len(src_lengths),), generator=torch.Generator().manual_seed(
        tgt_lengths_seed)).tolist()
    src = random_ids(generator, src_lengths, VOCAB)
    tgt = random_ids(generator, tgt_lengths, target_vocab(model))
    padded_src = torch.nn.functional.pad(src, (0, extra_src), value=PAD)
    padded_tgt = torch.nn.functional.pad(tgt, (0, extra_tgt), value=PAD)
    real = real_positions(tgt_lengths, tgt.shape[1])
    with torch.no_grad():
        reference = model(src, tgt)
        for logits in (model(padded_src, tgt), model(src, padded_tgt)[:, :tgt.shape[1]],
                       model(padded_src, padded_tgt)[:, :tgt.shape[1]]):
            assert (logits - reference).abs()[real].max() < 1e-5


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_sentence_alone_equals_the_same_sentence_in_a_padded_batch(variant):
    model = tiny_model(variant)
    generator = torch.Generator().manual_seed(2)
    src_lengths, tgt_lengths = [8, 2, 5, 1], [3, 7, 1, 6]
    src = random_ids(generator, src_lengths, VOCAB)
    tgt = random_ids(generator, tgt_lengths, target_vocab(model))
    with torch.no_grad():
        batched = model(src, tgt)
        for row, (s, t) in enumerate(zip(src_lengths, tgt_lengths)):
            alone = model(src[row:row + 1, :s], tgt[row:row + 1, :t])
            assert (batched[row:row + 1, :t] - alone).abs().max() < 1e-5


def test_source_padding_is_masked_not_just_zero_vectors():
    """A pad token's embedding is zero but its position vector is not; only the mask keeps
    padded positions out of attention. Dropping the mask must change the outputs."""
    model = tiny_model("post_ln_sinusoidal")
    src = random_ids(torch.Generator().manual_seed(3), [3], VOCAB, width=6)
    tgt = random_ids(torch.Generator().manual_seed(4), [4], VOCAB)
    with torch.no_grad():
        memory, memory_mask = model.encode(src)
        masked = model.decode(tgt, memory, memory_mask)
        unmasked = model.decode(tgt, memory, None)
    assert memory_mask.shape == (1, 1, 1, 6)
    assert memory_mask[0, 0, 0].tolist() == [True] * 3 + [False] * 3
    assert (masked - unmasked).abs().max() > 1e-3


# -- cached incremental decoding --------------------------------------------------------
def encoded_batch(model, seed: int = 5):
    generator = torch.Generator().manual_seed(seed)
    src = random_ids(generator, [7, 3, 5], VOCAB)
    tgt = random_ids(generator, [9, 9, 9], target_vocab(model))
    tgt[:, 0] = model.config.bos_id
    memory, memory_mask = model.encode(src)
    return src, tgt, memory, memory_mask


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@torch.no_grad()
def test_decoding_one_token_at_a_time_equals_full_recomputation(variant):
    model = tiny_model(variant)
    _, tgt, memory, memory_mask = encoded_batch(model)
    cache = model.new_cache(capacity=2)  # small, so the cache has to grow on the way
    for step in range(tgt.shape[1]):
        incremental = model.decode(tgt[:, step:step + 1], memory if step == 0 else None, memory_mask, cache=cache)
        recomputed = model.decode(tgt[:, :step + 1], memory, memory_mask)[:, -1:]
        assert incremental.shape == recomputed.shape
        assert (incremental - recomputed).abs().max() < 1e-5, f"step {step}"
        assert cache.length == step + 1


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("chunks", [[4, 5], [1, 3, 2, 3], [9]])
@torch.no_grad()
def test_decoding_in_chunks_equals_full_recomputation(variant, chunks):
    model = tiny_model(variant)
    _, tgt, memory, memory_mask = encoded_batch(model)
    full = model.decode(tgt, memory, memory_mask)
    cache = model.new_cache(capacity=3)
    start = 0
    for size in chunks:
        # Passing the memory again after the first chunk must not change anything either.
        out = model.decode(tgt[:, start:start + size], memory, memory_mask, cache=cache)
        assert (out - full[:, start:start + size]).abs().max() < 1e-5, f"chunk at {start}"
        start += size
    assert start == tgt.shape[1] == cache.length


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@torch.no_grad()
def test_reordered_cache_continues_like_the_reordered_batch(variant):
    """Beam search reorders cache rows; decoding must continue as if the rows had always
    been in the new order (including repeated rows)."""
    model = tiny_model(variant)
    _, tgt, memory, memory_mask = encoded_batch(model)
    order = torch.tensor([2, 0, 2])
    cache = model.new_cache(capacity=2)
    model.decode(tgt[:, :4], memory, memory_mask, cache=cache)
    cache.reorder(order)
    out = model.decode(tgt[order, 4:], None, memory_mask[order], cache=cache)
    full = model.decode(tgt[order], memory[order], memory_mask[order])
    assert (out - full[:, 4:]).abs().max() < 1e-5


@torch.no_grad()
def test_encoder_output_does_not_depend_on_the_decoder_cache_or_batch_order():
    model = tiny_model("post_ln_sinusoidal")
    src, _, memory, memory_mask = encoded_batch(model)
    flipped_memory, flipped_mask = model.encode(src.flip(0))
    assert torch.equal(flipped_mask, memory_mask.flip(0))
    real = memory_mask[:, 0, 0]
    assert (flipped_memory.flip(0) - memory).abs()[real].max() < 1e-5


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_padded_batch_is_encoded_on_its_real_tokens_with_the_padded_encodings_values(variant):
    """In inference on the CPU a right-padded batch that is at least a quarter padding is
    encoded packed (TokenEncoder._packed): the padded encoding's memory at the real positions
    (up to float rounding), zeros at the padding (masked wherever read). Too little padding,
    left padding, or grad on: the padded encoding itself."""
    from unittest import mock

    from attnlab.models.parts import TokenEncoder

    model = tiny_model(variant)
    src = random_ids(torch.Generator().manual_seed(6), [8, 2, 5, 1], VOCAB)  # 16 of 32 slots real
    real = src != PAD
    with torch.no_grad():
        memory, memory_mask = model.encode(src)
        with mock.patch.object(TokenEncoder, "_packed", return_value=None):
            padded, padded_mask = model.encode(src)
    assert torch.equal(memory_mask, padded_mask)
    assert (memory[~real] == 0).all() and (padded[~real] != 0).any()
    torch.testing.assert_close(memory[real], padded[real], atol=1e-5, rtol=1e-5)

    full = random_ids(torch.Generator().manual_seed(7), [8, 7, 8, 6], VOCAB)  # 29 of 32 real
    left = src.flip(1)
    for ids in (full, left):
        with torch.no_grad():
            with mock.patch.object(TokenEncoder, "_packed", return_value=None):
                expected, _ = model.encode(ids)
            assert torch.equal(model.encode(ids)[0], expected)
    expected = model.encode(src)[0]  # grad on: the padded encoding
    assert (expected[~real] != 0).any()


class _Memory(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model.encode(ids)[0]


def test_a_traced_encoder_keeps_the_padded_form_for_any_batch():
    """Tracing (the ONNX export's road) records the padded encoding, not the packed one of the
    example's padding (no data-dependent gather of the real tokens in the graph): the traced
    encoder gives the eager memory for a batch padded otherwise."""
    import warnings

    model = tiny_model("pre_ln_learned")
    example = random_ids(torch.Generator().manual_seed(8), [8, 2, 5, 1], VOCAB)
    other = random_ids(torch.Generator().manual_seed(9), [1, 8, 3, 6], VOCAB)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's own warnings
        traced = torch.jit.trace(_Memory(model), (example,), check_trace=False)
        real = other != PAD
        torch.testing.assert_close(traced(other)[real], model.encode(other)[0][real], atol=1e-5, rtol=1e-5)
    assert "aten::nonzero" not in str(traced.inlined_graph)
