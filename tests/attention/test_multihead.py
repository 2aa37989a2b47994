"""MultiHeadAttention against a plain-matrix reference and torch.nn.MultiheadAttention."""

import pytest
import torch
from reference.attention import reference_causal_mask, reference_multihead_of
from torch import nn

from attnlab.attention import CausalAttention, FullAttention, MultiHeadAttention


def random_biases(module):
    """Fresh modules have zero biases; make them nonzero so the test sees them."""
    with torch.no_grad():
        for linear in (module.qkv_proj, module.out_proj):
            if linear.bias is not None:
                linear.bias.normal_()
    return module


def key_mask(batch, key_len):
    lengths = torch.randint(1, key_len + 1, (batch,))
    lengths[0] = key_len
    return (torch.arange(key_len)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, Lk)


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("batch,length,d_model,heads", [(1, 1, 6, 1), (3, 5, 6, 2), (1, 13, 8, 2), (3, 7, 12, 3)])
def test_self_attention_matches_reference(batch, length, d_model, heads, with_mask, need_weights):
    attention = random_biases(MultiHeadAttention(d_model, heads)).double().eval()
    x = torch.randn(batch, length, d_model, dtype=torch.float64)
    mask = key_mask(batch, length) if with_mask else None
    expected_out, expected_weights = reference_multihead_of(attention, x, mask=mask)
    out, weights = attention(x, mask=mask, need_weights=need_weights)
    assert out.shape == (batch, length, d_model)
    torch.testing.assert_close(out, expected_out, atol=1e-12, rtol=1e-10)
    if need_weights:
        assert weights.shape == (batch, heads, length, length)
        torch.testing.assert_close(weights, expected_weights, atol=1e-12, rtol=1e-10)
    else:
        assert weights is None


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("batch,query_len,memory_len,d_model,heads", [(1, 1, 1, 6, 2), (3, 5, 7, 6, 2),
                                                                        (3, 13, 4, 8, 1), (2, 1, 17, 8, 4)])
def test_cross_attention_matches_reference(batch, query_len, memory_len, d_model, heads, need_weights):
    attention = random_biases(MultiHeadAttention(d_model, heads)).double().eval()
    x = torch.randn(batch, query_len, d_model, dtype=torch.float64)
    memory = torch.randn(batch, memory_len, d_model, dtype=torch.float64)
    mask = key_mask(batch, memory_len)
    expected_out, expected_weights = reference_multihead_of(attention, x, memory, mask=mask)
    out, weights = attention(x, memory, mask=mask, need_weights=need_weights)
    torch.testing.assert_close(out, expected_out, atol=1e-12, rtol=1e-10)
    if need_weights:
        assert weights.shape == (batch, heads, query_len, memory_len)
        torch.testing.assert_close(weights, expected_weights, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("length", [1, 5, 13])
def test_causal_self_attention_matches_reference(length):
    attention = random_biases(MultiHeadAttention(8, 2, pattern=CausalAttention())).double().eval()
    x = torch.randn(3, length, 8, dtype=torch.float64)
    mask = key_mask(3, length)
    expected, expected_weights = reference_multihead_of(attention, x, mask=mask & reference_causal_mask(length, length))
    out, weights = attention(x, mask=mask, need_weights=True)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(weights, expected_weights, atol=1e-12, rtol=1e-10)


def test_projections_without_bias():
    attention = MultiHeadAttention(8, 2, bias=False).double()
    assert attention.qkv_proj.bias is None and attention.out_proj.bias is None
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    memory = torch.randn(2, 3, 8, dtype=torch.float64)
    torch.testing.assert_close(attention(x)[0], reference_multihead_of(attention, x)[0], atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(attention(x, memory)[0], reference_multihead_of(attention, x, memory)[0],
                               atol=1e-12, rtol=1e-10)


def test_d_model_must_divide_into_heads():
    with pytest.raises(ValueError, match="d_model=10.*num_heads=4"):
        MultiHeadAttention(10, 4)


def test_default_pattern_is_full_attention():
    assert isinstance(MultiHeadAttention(8, 2).pattern, FullAttention)


def copy_into_torch(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    theirs = nn.MultiheadAttention(ours.d_model, ours.num_heads, batch_first=True)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(ours.qkv_proj.weight)
        theirs.in_proj_bias.copy_(ours.qkv_proj.bias)
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        theirs.out_proj.bias.copy_(ours.out_proj.bias)
    return theirs.eval()


@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
@pytest.mark.parametrize("batch,query_len,memory_len,d_model,heads", [(1, 1, 1, 8, 1), (3, 5, 7, 8, 2),
                                                                        (2, 13, 17, 12, 3)])
def test_parity_with_torch_multihead_attention(cross, batch, query_len, memory_len, d_model, heads):
    ours = random_biases(MultiHeadAttention(d_model, heads)).eval()
    theirs = copy_into_torch(ours)
    x = torch.randn(batch, query_len, d_model)
    memory = torch.randn(batch, memory_len, d_model) if cross else x
    mask = key_mask(batch, memory.shape[1])  # True = may attend; torch's key_padding_mask is True = ignore

    out, weights = ours(x, memory if cross else None, mask=mask, need_weights=True)
    fused_out, _ = ours(x, memory if cross else None, mask=mask)
    expected, expected_weights = theirs(x, memory, memory, key_padding_mask=~mask[:, 0, 0, :],
                                        need_weights=True, average_attn_weights=False)

    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fused_out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights, expected_weights, atol=1e-5, rtol=1e-5)


def test_attention_dropout_only_in_training():
    attention = random_biases(MultiHeadAttention(8, 2, dropout=0.5))
    x = torch.randn(2, 9, 8)
    attention.train()
    first, _ = attention(x)
    second, _ = attention(x)
    assert not torch.allclose(first, second)  # fresh dropout masks each call
    attention.eval()
    clean, weights = attention(x, need_weights=True)
    again, _ = attention(x, need_weights=True)
    torch.testing.assert_close(clean, again, atol=0, rtol=0)
    torch.testing.assert_close(clean.double(), reference_multihead_of(attention, x)[0], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(first, clean)
    attention.train()
    _, train_weights = attention(x, need_weights=True)
    torch.testing.assert_close(train_weights, weights)  # returned weights are before dropout


def test_no_dropout_when_rate_is_zero_even_in_training():
    attention = MultiHeadAttention(8, 2).train()
    x = torch.randn(2, 9, 8)
    torch.testing.assert_close(attention(x)[0], attention(x)[0], atol=0, rtol=0)


def test_cross_attention_step_takes_several_query_rows_and_shared_memory_rows():
    """``step`` with a filled memory cache equals ``forward`` for several positions at once,
    and when the memory has one row per source serving consecutive query rows (beam search)."""
    from attnlab.attention.cache import MemoryKVCache

    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4).eval()
    x, memory = torch.randn(4, 3, 16, dtype=torch.float64), torch.randn(2, 5, 16, dtype=torch.float64)
    layer = layer.double()
    with torch.no_grad():
        expected = layer(x, memory=memory.repeat_interleave(2, dim=0))[0]
        cache = MemoryKVCache()
        layer(x[::2, :1], memory=memory, cache=cache)  # fills the cache: one row per source
        torch.testing.assert_close(layer.step(x, cache)[0], expected)  # 2 query rows per memory row, 3 positions
        own = MemoryKVCache()
        layer(x[:2, :1], memory=memory, cache=own)
        torch.testing.assert_close(layer.step(x[:2], own)[0], layer(x[:2], memory=memory)[0])


def test_the_query_rows_kept_for_steps_do_not_keep_a_model_alive():
    import gc
    import weakref

    import attnlab
    from attnlab.generation import beam_search

    model = attnlab.create_model("transformer_tiny", vocab_size=40).eval()
    beam_search(model, torch.randint(3, 40, (2, 7)), beam_size=3, max_len_b=4)
    weight = weakref.ref(model.decoder.layers[0].cross_attn.qkv_proj.weight)
    del model
    gc.collect()
    assert weight() is None


@pytest.mark.parametrize("pattern, sums", [("causal", True), ("local_1d", False), ("cross", False)])
def test_an_exported_folded_step_takes_one_query_sums_only_for_windowless_self_attention(pattern, sums):
    """While a step is exported for a folded package, a one-query self-attention without a
    cache window becomes sums (attention.core._one_query); a window's gathered keys (local
    patterns: the Image Transformer's sample 0.143 -> 0.203 s as sums) and cross-attention (which
    inductor compiled wrongly as sums) keep SDPA. The step's output is the same either way."""
    from unittest import mock

    from attnlab.attention import StaticKVCache, core
    from attnlab.attention.cache import MemoryKVCache
    from attnlab.attention.patterns import build_pattern
    from attnlab.linear import products_for_folding

    torch.manual_seed(0)
    spec = {"name": "local_1d", "block_length": 2} if pattern == "local_1d" else {"name": "causal"}
    layer = MultiHeadAttention(16, 4, pattern=build_pattern(spec)).eval()
    x = torch.randn(3, 1, 16)
    with torch.no_grad():
        if pattern == "cross":
            cache = MemoryKVCache()
            layer(x, memory=torch.randn(3, 5, 16), cache=cache)
        else:
            cache = StaticKVCache(1, 3, 4, 8, 4, fixed_shape=True)[0]
            cache.kv.normal_()
            cache.owner.write_index.fill_(5)
        expected = layer.step(x, cache)[0]
        with mock.patch.object(core, "_one_query", wraps=core._one_query) as one_query, products_for_folding():
            if pattern != "cross":
                cache.owner.write_index.fill_(5)
            out = layer.step(x, cache)[0]
    assert one_query.call_count == (1 if sums else 0)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
