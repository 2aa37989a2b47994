"""Attention patterns against the reference with the equivalent explicit mask."""

import pytest
import torch
from hypothesis import given, settings, strategies as st
from reference.attention import naive_attention, reference_causal_mask

from attnlab.attention import AttentionContext, CausalAttention, FullAttention, MultiHeadAttention


def qkv(batch, heads, query_len, key_len, width, dtype=torch.float64):
    return (torch.randn(batch, heads, query_len, width, dtype=dtype),
            torch.randn(batch, heads, key_len, width, dtype=dtype),
            torch.randn(batch, heads, key_len, width, dtype=dtype))


def padding(batch, key_len):
    """A ``(B, 1, 1, Lk)`` key mask with different real lengths per row (all >= 1)."""
    lengths = torch.randint(1, key_len + 1, (batch,))
    lengths[0] = key_len
    return (torch.arange(key_len)[None, :] < lengths[:, None])[:, None, None, :]


def assert_pattern_matches(pattern, q, k, v, mask, reference_mask, need_weights):
    expected_out, expected_weights = naive_attention(q, k, v, mask=reference_mask)
    out, weights = pattern(q, k, v, AttentionContext(mask=mask, need_weights=need_weights))
    torch.testing.assert_close(out, expected_out, atol=1e-12, rtol=1e-10)
    if need_weights:
        torch.testing.assert_close(weights, expected_weights, atol=1e-12, rtol=1e-10)
    else:
        assert weights is None


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("dims", [(1, 1, 1, 1, 3), (3, 2, 5, 7, 8), (1, 2, 13, 7, 3), (3, 1, 13, 17, 8)])
def test_full_attention_matches_reference(dims, with_mask, need_weights):
    batch, heads, query_len, key_len, width = dims
    q, k, v = qkv(*dims)
    mask = padding(batch, key_len) if with_mask else None
    assert_pattern_matches(FullAttention(), q, k, v, mask, mask, need_weights)
    assert not FullAttention.causal


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("query_len,key_len", [(1, 1), (5, 5), (13, 13), (1, 7), (1, 17), (5, 7), (13, 17)])
@pytest.mark.parametrize("batch,heads,width", [(1, 1, 3), (3, 2, 8)])
def test_causal_attention_matches_reference(batch, heads, width, query_len, key_len, with_mask, need_weights):
    q, k, v = qkv(batch, heads, query_len, key_len, width)
    mask = padding(batch, key_len) if with_mask else None
    reference_mask = reference_causal_mask(query_len, key_len)
    if mask is not None:
        reference_mask = reference_mask & mask
    assert_pattern_matches(CausalAttention(), q, k, v, mask, reference_mask, need_weights)
    assert CausalAttention.causal


def test_causal_attention_with_an_extra_mask_that_empties_rows():
    """Left padding + causal: the first query sees only padding, so its row is empty."""
    q, k, v = qkv(2, 2, 5, 5, 4)
    mask = torch.tensor([[False, False, True, True, True], [True] * 5])[:, None, None, :]
    for need_weights in (False, True):
        out, _ = CausalAttention()(q, k, v, AttentionContext(mask=mask, need_weights=need_weights))
        assert not out.isnan().any()
        assert (out[0, :, :2] == 0).all()
        expected, _ = naive_attention(q, k, v, mask=reference_causal_mask(5, 5) & mask)
        torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-10)


def test_patterns_pass_dropout_through():
    q, k, v = qkv(2, 2, 5, 5, 4)
    for pattern in (FullAttention(), CausalAttention()):
        clean, _ = pattern(q, k, v, AttentionContext())
        dropped, _ = pattern(q, k, v, AttentionContext(dropout_p=0.5))
        assert not torch.allclose(clean, dropped)


@settings(max_examples=40, deadline=None)
@given(length=st.integers(2, 12), data=st.data(), seed=st.integers(0, 2 ** 31 - 1),
       num_heads=st.sampled_from([1, 2, 4]), need_weights=st.booleans())
def test_causal_attention_never_looks_at_the_future(length, data, seed, num_heads, need_weights):
    """Changing the input at position p (and after) never changes outputs before p."""
    changed = data.draw(st.integers(1, length - 1), label="first changed position")
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    attention = MultiHeadAttention(8, num_heads, pattern=CausalAttention()).eval()
    x = torch.randn(2, length, 8, generator=generator)
    y = x.clone()
    y[:, changed:] = torch.randn(2, length - changed, 8, generator=generator) * 3
    out_x, weights_x = attention(x, need_weights=need_weights)
    out_y, weights_y = attention(y, need_weights=need_weights)
    assert torch.equal(out_x[:, :changed], out_y[:, :changed])
    assert not torch.allclose(out_x[:, changed:], out_y[:, changed:])  # the change did reach the layer
    if need_weights:
        assert torch.equal(weights_x[:, :, :changed], weights_y[:, :, :changed])
        assert (weights_x.triu(1) == 0).all()
