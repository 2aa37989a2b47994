"""Local 1D and 2D attention (Image Transformer §3.2) against float64 references with the
equivalent full boolean mask; the positional (cached) path; cache windows; causality in
the generation order; errors."""

import pytest
import torch
from reference.attention import naive_attention
from reference.local_patterns import generation_order_2d, local_1d_mask, local_2d_mask

import attnlab
from attnlab.attention import AttentionContext, KVCache, Local1D, Local2D, MultiHeadAttention, block_raster_order
from attnlab.attention import build_pattern


def qkv(batch, heads, length, width=3):
    torch.manual_seed(length * 7 + width)
    return [torch.randn(batch, heads, length, width, dtype=torch.float64) for _ in range(3)]


def key_padding(batch, length):
    """Right padding of different lengths (>= 1) per row, ``(B, 1, 1, L)``."""
    lengths = torch.tensor([length] + [max(1, length - 3 * r - 2) for r in range(1, batch)])
    return (torch.arange(length)[None, :] < lengths[:, None])[:, None, None, :]


def check(pattern, length, reference_mask, *, padded, need_weights, geometry=None):
    q, k, v = qkv(2, 2, length)
    mask = key_padding(2, length) if padded else None
    full = reference_mask if mask is None else reference_mask & mask
    expected_out, expected_weights = naive_attention(q, k, v, mask=full)
    out, weights = pattern(q, k, v, AttentionContext(mask=mask, need_weights=need_weights, geometry=geometry))
    torch.testing.assert_close(out, expected_out, atol=1e-12, rtol=1e-10)
    if need_weights:
        torch.testing.assert_close(weights, expected_weights, atol=1e-12, rtol=1e-10)
    # The same rule on explicit positions (the cached path): queries 0..L-1 given as an offset.
    out, _ = pattern(q, k, v, AttentionContext(query_offset=0, mask=mask, geometry=geometry))
    torch.testing.assert_close(out, expected_out, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "weights"])
@pytest.mark.parametrize("padded", [False, True], ids=["dense", "key-padding"])
@pytest.mark.parametrize("masked", [True, False], ids=["masked", "unmasked"])
@pytest.mark.parametrize("length,block", [(1, 4), (8, 4), (13, 4), (24, 8), (7, 1), (11, 16)])
def test_local_1d_equals_full_attention_with_its_mask(length, block, masked, padded, need_weights):
    pattern = Local1D(block, masked=masked)
    assert pattern.causal is masked
    check(pattern, length, local_1d_mask(length, block, masked), padded=padded, need_weights=need_weights)


SHAPES_2D = [  # (length, width, query_shape, memory_flange)
    (24, 6, (2, 3), (1, 2)),    # whole block rows
    (17, 6, (2, 3), (1, 2)),    # a partial last block
    (29, 8, (2, 2), (2, 1)),
    (30, 6, (3, 2), (0, 0)),    # no flange: the block alone
    (36, 4, (1, 4), (3, 0)),    # flanges taller / wider than the block
    (40, 8, (2, 4), (1, 5)),
    (5, 9, (3, 3), (2, 2)),     # shorter than one block
]


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "weights"])
@pytest.mark.parametrize("padded", [False, True], ids=["dense", "key-padding"])
@pytest.mark.parametrize("masked", [True, False], ids=["masked", "unmasked"])
@pytest.mark.parametrize("length,width,query_shape,flange", SHAPES_2D)
def test_local_2d_equals_full_attention_with_its_mask(length, width, query_shape, flange, masked, padded,
                                                      need_weights):
    reference = local_2d_mask(length, width, query_shape, flange, masked)
    pattern = Local2D(query_shape, flange, masked=masked, width=width)
    check(pattern, length, reference, padded=padded, need_weights=need_weights)
    # The raster width from the call's geometry instead: (H, W, C) is a raster W·C wide.
    by_geometry = Local2D(query_shape, flange, masked=masked)
    check(by_geometry, length, reference, padded=padded, need_weights=False, geometry=(99, width, 1))


@pytest.mark.parametrize("pattern", [Local1D(3), Local1D(1), Local2D((2, 3), (1, 2), width=6),
                                     Local2D((2, 2), (3, 3), width=8), Local2D((1, 4), (0, 0), width=8),
                                     Local2D((3, 2), (2, 1), width=4)], ids=repr)
def test_cache_window_is_the_exact_farthest_key(pattern):
    length = 120
    ctx = AttentionContext(query_offset=0)
    positions = torch.arange(length)
    allowed = pattern.allowed(positions[:, None], positions[None, :], ctx)
    farthest = (positions[:, None] - positions[None, :]).masked_fill(~allowed, -1).amax(dim=1)
    assert int(farthest.max()) + 1 == pattern.cache_window


@pytest.mark.parametrize("spec", [{"name": "local_1d", "block_length": 4},
                                  {"name": "local_2d", "query_shape": [2, 3], "memory_flange": [2, 1], "width": 9}],
                         ids=["1d", "2d"])
@pytest.mark.parametrize("length", [31, 36])  # 36: whole blocks, no padding copy of the strided queries
def test_cached_attention_in_chunks_equals_the_full_forward(spec, length):
    """A growing cache hands the pattern only its window; any chunking gives the same outputs."""
    torch.manual_seed(0)
    attention = MultiHeadAttention(12, 3, pattern=build_pattern(spec)).double().eval()
    x = torch.randn(2, length, 12, dtype=torch.float64)
    full, _ = attention(x)
    cache, outputs, start = KVCache(), [], 0
    for size in (5, 1, 1, 9, 3, 1, length - 20):
        outputs.append(attention(x[:, start:start + size], cache=cache)[0])
        start += size
    torch.testing.assert_close(torch.cat(outputs, 1), full, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("pattern", [Local1D(4), Local2D((2, 3), (1, 2), width=6)], ids=["1d", "2d"])
def test_changing_a_later_position_never_changes_an_earlier_output(pattern):
    q, k, v = qkv(1, 2, 30)
    before, _ = pattern(q, k, v, AttentionContext())
    for t in (0, 7, 18, 29):
        k2, v2 = k.clone(), v.clone()
        k2[:, :, t:] += 1.0
        v2[:, :, t:] -= 2.0
        after, _ = pattern(q, k2, v2, AttentionContext())
        torch.testing.assert_close(after[:, :, :t], before[:, :, :t], atol=0, rtol=0)
        assert (after[:, :, t] - before[:, :, t]).abs().max() > 1e-6  # it sees itself


def test_block_raster_order_follows_the_generation_order():
    order = block_raster_order(4, 6, (2, 3))
    cells = generation_order_2d(24, 6, (2, 3))
    assert order.tolist() == [row * 6 + col for row, col in cells]
    assert sorted(order.tolist()) == list(range(24))
    with pytest.raises(ValueError, match="does not tile"):
        block_raster_order(5, 6, (2, 3))


def test_local_patterns_come_from_configs_and_are_validated():
    assert {"local_1d", "local_2d"} <= set(attnlab.attention.list_patterns())
    spec = {"name": "local_2d", "query_shape": [2, 4], "memory_flange": [1, 2], "masked": True, "width": 8}
    assert build_pattern(spec).spec() == spec
    assert build_pattern({"name": "local_1d", "block_length": 5}).spec() == {
        "name": "local_1d", "block_length": 5, "masked": True}
    with pytest.raises(ValueError, match="block_length=0"):
        build_pattern({"name": "local_1d", "block_length": 0})
    with pytest.raises(ValueError, match="does not divide the raster width 10"):
        build_pattern({"name": "local_2d", "query_shape": [2, 4], "width": 10})
    with pytest.raises(ValueError, match="memory_flange"):
        build_pattern({"name": "local_2d", "memory_flange": [1]})
    q, k, v = qkv(1, 1, 8)
    with pytest.raises(ValueError, match="needs the raster width"):
        Local2D((2, 2), (1, 1))(q, k, v, AttentionContext())
    with pytest.raises(ValueError, match="built for width 8"):
        Local2D((2, 2), (1, 1), width=8)(q, k, v, AttentionContext(geometry=(2, 2, 3)))
    assert Local2D((2, 2), (1, 1)).cache_window is None  # no width: a cache keeps everything
    assert Local1D(4, masked=False).cache_window is None


def test_unmasked_local_attention_in_an_encoder_with_padding():
    torch.manual_seed(0)
    model = attnlab.create_model("transformer_tiny", vocab_size=19, d_model=16, num_heads=2, d_ff=24,
                                 encoder_attention={"name": "local_1d", "block_length": 2, "masked": False}).eval()
    src = torch.tensor([[4, 7, 9, 11, 2, 5, 6], [5, 6, 2, 0, 0, 0, 0]])
    memory, _ = model.encode(src)
    alone, _ = model.encode(src[1:, :3])
    torch.testing.assert_close(memory[1:, :3], alone, atol=1e-5, rtol=1e-5)  # padding never leaks
