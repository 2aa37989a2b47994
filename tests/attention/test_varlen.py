"""Attention over packed variable-length sequences: the packing, and attend_varlen against
the float64 element-by-element reference run on each sequence alone."""

import pytest
import torch

from attnlab.attention import MultiHeadAttention, Local1D
from attnlab.attention.varlen import Segments, attend_varlen, pack_right_padded
from tests.reference.attention import naive_attention


def _real(lengths, length):
    return torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]


def test_packing_round_trip_and_cumulative_lengths():
    packing = pack_right_padded(_real([3, 1, 4, 0], 5), "x")
    assert packing.cu.tolist() == [0, 3, 4, 8, 8] and packing.cu.dtype == torch.int32
    assert packing.index.tolist() == [0, 1, 2, 5, 10, 11, 12, 13]
    x = torch.arange(4 * 5 * 2, dtype=torch.float64).view(4, 5, 2)
    packed = packing.pack(x)
    assert packed.shape == (8, 2) and packed[3].tolist() == x[1, 0].tolist()
    back = packing.unpack(packed)
    assert torch.equal(back[packing.real()], x[packing.real()]) and not back[~packing.real()].any()


@pytest.mark.parametrize("real, message", [
    (_real([2, 3], 4).flip(1), "needs right padding"),
    (torch.tensor([[True, False, True]]), "needs right padding"),
    (torch.ones(2, 3, 1, dtype=torch.bool), "boolean mask"),
    (torch.ones(2, 3), "boolean mask"),
])
def test_packing_refuses_what_is_not_right_padding(real, message):
    with pytest.raises(ValueError, match=f"src_ids: .*{message}"):
        pack_right_padded(real, "src_ids")


@pytest.mark.parametrize("causal, query_lengths, key_lengths", [
    (False, [5, 2, 7], [5, 2, 7]), (False, [1, 6, 3], [4, 4, 9]),  # self-, cross-attention
    (True, [5, 2, 7], None), (True, [1, 8, 1, 4], None)])  # causal self-attention
def test_attend_varlen_equals_each_sequence_alone(causal, query_lengths, key_lengths):
    key_lengths = key_lengths or query_lengths
    torch.manual_seed(len(query_lengths) + sum(key_lengths) + causal)
    heads, width = 3, 5
    queries = pack_right_padded(_real(query_lengths, 8), "q")
    keys = queries if causal else pack_right_padded(_real(key_lengths, 9), "k")
    q = torch.randn(1, heads, queries.tokens, width, dtype=torch.float64)
    k = torch.randn(1, heads, keys.tokens, width, dtype=torch.float64)
    v = torch.randn(1, heads, keys.tokens, width, dtype=torch.float64)
    out, _ = attend_varlen(q, k, v, Segments(queries, keys), causal=causal)
    assert out.shape == q.shape
    qc, kc = queries.cu.tolist(), keys.cu.tolist()
    for row in range(len(query_lengths)):
        mask = torch.ones(query_lengths[row], key_lengths[row], dtype=torch.bool)
        if causal:
            mask = mask.tril()
        expected, _ = naive_attention(q[:, :, qc[row]:qc[row + 1]], k[:, :, kc[row]:kc[row + 1]],
                                      v[:, :, kc[row]:kc[row + 1]], mask=mask)
        # float64 on both sides, outputs of size ~1: only summation order differs (~1e-16 each).
        torch.testing.assert_close(out[:, :, qc[row]:qc[row + 1]], expected, rtol=0, atol=1e-12)


def test_causal_needs_one_packing():
    queries, keys = (pack_right_padded(_real([2, 3], 4), name) for name in "qk")
    q = torch.randn(1, 2, 5, 4)
    with pytest.raises(ValueError, match="must be the same"):
        attend_varlen(q, q, q, Segments(queries, keys), causal=True)


def test_patterns_without_varlen_refuse_segments():
    attention = MultiHeadAttention(8, 2, pattern=Local1D(4))
    packing = pack_right_padded(_real([3, 2], 3), "x")
    with pytest.raises(ValueError, match="cannot attend packed variable-length sequences"):
        attention(torch.randn(1, 5, 8), mask=Segments(packing, packing))
