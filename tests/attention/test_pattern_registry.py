"""The pattern registry and the attention context: names, specs, errors, positions."""

import pytest
import torch
from reference.attention import naive_attention
from reference.toy_patterns import BandedCausal

from attnlab.attention import (AttentionContext, CausalAttention, FullAttention, band_mask, build_pattern,
                               list_patterns)


def test_registry_lists_and_builds_patterns():
    assert {"full", "causal", "banded_causal"} <= set(list_patterns())
    assert isinstance(build_pattern("full"), FullAttention)
    assert isinstance(build_pattern("causal"), CausalAttention)
    toy = build_pattern({"name": "banded_causal", "width": 3})
    assert isinstance(toy, BandedCausal) and toy.width == 3 and toy.cache_window == 4
    assert build_pattern(toy.spec()).width == 3  # a spec round-trips
    assert build_pattern("causal").spec() == "causal"


@pytest.mark.parametrize("spec,message", [("rotary", "unknown attention pattern 'rotary'"),
                                          ({"width": 2}, "a 'name'"),
                                          ({"name": "banded_causal", "size": 2}, "size"),
                                          (3, "give a name")])
def test_bad_specs_raise_value_error(spec, message):
    with pytest.raises(ValueError, match=message):
        build_pattern(spec)


def test_context_positions_with_offsets():
    ctx = AttentionContext(query_offset=5, key_offset=3)
    assert ctx.query_positions(2, 4).tolist() == [5, 6]
    assert ctx.key_positions(4).tolist() == [3, 4, 5, 6]
    assert ctx.distances(2, 4).tolist() == [[2, 1, 0, -1], [3, 2, 1, 0]]
    assert ctx.queries_are_last(2, 4) and not AttentionContext(query_offset=4, key_offset=3).queries_are_last(2, 4)
    assert AttentionContext().queries_are_last(2, 4)  # default: queries are the last keys
    tensor_offset = AttentionContext(query_offset=torch.tensor([5]), key_offset=3)
    assert tensor_offset.query_positions(2, 4).tolist() == [5, 6] and not tensor_offset.queries_are_last(2, 4)


@pytest.mark.parametrize("query_len,key_len", [(1, 1), (5, 5), (1, 9), (4, 9)])
def test_banded_toy_pattern_matches_reference(query_len, key_len):
    q, k, v = (torch.randn(2, 3, n, 4, dtype=torch.float64) for n in (query_len, key_len, key_len))
    expected, _ = naive_attention(q, k, v, mask=band_mask(query_len, key_len, before=2))
    out, _ = BandedCausal(2)(q, k, v, AttentionContext())
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-10)


def test_causal_pattern_with_explicit_positions_equals_queries_last():
    """A fixed-shape step: keys past the query are in the buffer and must be masked by position."""
    q, k, v = (torch.randn(2, 2, n, 4, dtype=torch.float64) for n in (1, 7, 7))
    expected, _ = CausalAttention()(q, k[:, :, :4], v[:, :, :4], AttentionContext())
    out, _ = CausalAttention()(q, k, v, AttentionContext(query_offset=torch.tensor([3])))
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-10)
