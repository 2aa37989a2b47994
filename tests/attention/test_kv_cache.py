"""Key/value caches: incremental attention equals full recomputation."""

import pytest
import torch

from attnlab.attention import CausalAttention, KVCache, LayerCache, MemoryKVCache, MultiHeadAttention, StackCache


def causal_attention(d_model=8, heads=2):
    attention = MultiHeadAttention(d_model, heads, pattern=CausalAttention()).eval()
    with torch.no_grad():
        attention.qkv_proj.bias.normal_()
        attention.out_proj.bias.normal_()
    return attention


def run_in_chunks(attention, x, chunks, cache, *, mask=None, need_weights=False):
    """Feed ``x`` chunk by chunk through the cache; return outputs (and weights) per chunk."""
    outputs, all_weights, start = [], [], 0
    for size in chunks:
        chunk_mask = None if mask is None else mask[..., :start + size]
        out, weights = attention(x[:, start:start + size], mask=chunk_mask, cache=cache, need_weights=need_weights)
        outputs.append(out)
        all_weights.append(weights)
        start += size
    assert start == x.shape[1]
    return outputs, all_weights


@pytest.mark.parametrize("capacity", [1, 3, 64])
@pytest.mark.parametrize("chunks", [[1] * 13, [3, 1, 4, 1, 4], [13], [1, 12], [5, 8]],
                         ids=["steps", "mixed", "whole", "one-then-rest", "two"])
def test_cached_self_attention_equals_full_causal_recomputation(chunks, capacity):
    attention = causal_attention()
    x = torch.randn(3, 13, 8)
    full, full_weights = attention(x, need_weights=True)
    cache = KVCache(capacity)
    outputs, weights = run_in_chunks(attention, x, chunks, cache, need_weights=True)
    assert cache.length == 13
    start = 0
    for size, out, w in zip(chunks, outputs, weights):
        assert (full[:, start:start + size] - out).abs().max() < 1e-5
        assert w.shape == (3, 2, size, start + size)
        assert (full_weights[:, :, start:start + size, :start + size] - w).abs().max() < 1e-5
        start += size


def test_cached_self_attention_with_key_padding_equals_full():
    """Left-padded batch: the padding mask covers all keys so far at every step."""
    attention = causal_attention()
    x = torch.randn(3, 9, 8)
    mask = torch.ones(3, 1, 1, 9, dtype=torch.bool)
    mask[1, ..., :2] = False
    mask[2, ..., :4] = False
    full, _ = attention(x, mask=mask)
    for chunks in ([1] * 9, [2, 3, 4]):
        outputs, _ = run_in_chunks(attention, x, chunks, KVCache(2), mask=mask)
        stepped = torch.cat(outputs, dim=1)
        assert not stepped.isnan().any()
        assert (stepped - full).abs().max() < 1e-5


def test_cross_attention_memory_cache_is_computed_once_and_reused():
    cross = MultiHeadAttention(8, 2).eval()
    memory = torch.randn(3, 7, 8)
    memory_mask = torch.rand(3, 1, 1, 7) < 0.7
    memory_mask[..., 0] = True
    x = torch.randn(3, 5, 8)
    full, full_weights = cross(x, memory, mask=memory_mask, need_weights=True)

    cache = MemoryKVCache()
    assert not cache.is_set
    first, _ = cross(x[:, :1], memory, mask=memory_mask, cache=cache)
    assert cache.is_set and cache.k.shape == cache.v.shape == (3, 2, 7, 4)
    keys, values = cache.k, cache.v
    outputs, weights = [first], []
    for t in range(1, 5):
        out, w = cross(x[:, t:t + 1], None, mask=memory_mask, cache=cache, need_weights=True)  # no memory needed
        outputs.append(out)
        weights.append(w)
        assert cache.k is keys and cache.v is values  # not recomputed
    assert (torch.cat(outputs, dim=1) - full).abs().max() < 1e-5
    assert (torch.cat(weights, dim=2) - full_weights[:, :, 1:]).abs().max() < 1e-5


def test_kv_cache_grows_beyond_capacity_and_keeps_contents():
    cache = KVCache(capacity=2)
    pieces_k, pieces_v = [], []
    for size in [1, 1, 1, 4, 1, 9, 2]:
        k, v = torch.randn(2, 3, size, 5), torch.randn(2, 3, size, 4)
        pieces_k.append(k)
        pieces_v.append(v)
        all_k, all_v = cache.append(k, v)
        assert cache.length == sum(p.shape[2] for p in pieces_k)
        assert torch.equal(all_k, torch.cat(pieces_k, dim=2))
        assert torch.equal(all_v, torch.cat(pieces_v, dim=2))
    assert cache.length == 19


def test_kv_cache_earlier_results_are_not_overwritten_by_later_appends():
    cache = KVCache(capacity=8)
    k1, v1 = torch.randn(1, 1, 3, 2), torch.randn(1, 1, 3, 2)
    old_k, _ = cache.append(k1, v1)
    cache.append(torch.randn(1, 1, 2, 2), torch.randn(1, 1, 2, 2))
    assert torch.equal(old_k, k1)


def test_kv_cache_reorder_selects_and_repeats_batch_rows():
    cache = KVCache(capacity=2)
    k, v = torch.randn(3, 2, 4, 5), torch.randn(3, 2, 4, 5)
    cache.append(k[:, :, :1], v[:, :, :1])
    cache.append(k[:, :, 1:], v[:, :, 1:])
    index = torch.tensor([2, 0, 0, 1])
    cache.reorder(index)
    new_k, new_v = torch.randn(4, 2, 3, 5), torch.randn(4, 2, 3, 5)
    all_k, all_v = cache.append(new_k, new_v)  # growth after reorder keeps the reordered rows
    assert torch.equal(all_k, torch.cat([k[index], new_k], dim=2))
    assert torch.equal(all_v, torch.cat([v[index], new_v], dim=2))
    assert cache.length == 7


def test_empty_caches_reorder_without_error():
    KVCache().reorder(torch.tensor([0, 0]))
    MemoryKVCache().reorder(torch.tensor([0, 0]))
    StackCache(2, cross_attention=True).reorder(torch.tensor([0, 0]))


def test_memory_cache_reorder():
    cache = MemoryKVCache()
    k, v = torch.randn(3, 2, 4, 5), torch.randn(3, 2, 4, 5)
    cache.set(k, v)
    index = torch.tensor([1, 1, 0])
    cache.reorder(index)
    assert torch.equal(cache.k, k[index]) and torch.equal(cache.v, v[index])


@pytest.mark.parametrize("include_memory", [True, False])
def test_stack_cache_reorder(include_memory):
    stack = StackCache(3, cross_attention=True, capacity=2)
    assert len(stack.layers) == 3 and stack.length == 0
    assert all(isinstance(stack[i], LayerCache) for i in range(3))
    saved = []
    for layer in stack.layers:
        k, v = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 4)
        mk, mv = torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4)
        layer.self_attn.append(k, v)
        layer.cross_attn.set(mk, mv)
        saved.append((k, v, mk, mv))
    assert stack.length == 3
    index = [1, 0, 1]  # a plain list works too
    stack.reorder(index, include_memory=include_memory)
    rows = torch.tensor(index)
    for layer, (k, v, mk, mv) in zip(stack.layers, saved):
        all_k, all_v = layer.self_attn.append(torch.zeros(3, 2, 0, 4), torch.zeros(3, 2, 0, 4))
        assert torch.equal(all_k, k[rows]) and torch.equal(all_v, v[rows])
        if include_memory:
            assert torch.equal(layer.cross_attn.k, mk[rows]) and torch.equal(layer.cross_attn.v, mv[rows])
        else:
            assert layer.cross_attn.k is mk and layer.cross_attn.v is mv
    assert stack.length == 3


def test_stack_cache_without_cross_attention_or_layers():
    stack = StackCache(2, cross_attention=False)
    assert all(layer.cross_attn is None for layer in stack.layers)
    stack.reorder(torch.tensor([0]))
    assert StackCache(0, cross_attention=False).length == 0


def test_fixed_shape_step_with_a_window_gets_the_window_ending_at_the_query():
    from attnlab.attention.cache import StaticKVCache

    cache = StaticKVCache(1, batch=2, num_heads=1, capacity=8, head_dim=1, fixed_shape=True)
    cache.set_key_padding(torch.tensor([[False, True], [True, True]]))
    layer = cache[0].self_attn
    for position in range(5):
        kv = torch.full((2, 2, 1, 1, 1), float(position + 1))
        keys, values, query_offset, key_offset, key_mask = layer.update(kv, window=3)
        assert keys.shape == values.shape == (2, 1, 3, 1)  # the same shape at every step
        assert int(query_offset) == position and int(key_offset) == position - 2
        slots = [position - 2, position - 1, position]
        assert keys[0, 0, :, 0].tolist() == [float(max(s, 0) + 1) for s in slots]  # slots < 0 repeat slot 0...
        assert key_mask[:, 0, 0].tolist() == [[s >= 0 and s != 0 for s in slots],  # ...masked, as row 0's padding
                                              [s >= 0 for s in slots]]
        cache.advance(1)  # (query_offset is the write index itself: read before it moves)
    # Without a window, or for several queries at once, the whole buffer as before.
    keys, _, _, key_offset, _ = layer.update(torch.zeros(2, 2, 1, 1, 1), window=None)
    assert keys.shape[-2] == 8 and key_offset == 0


@pytest.mark.parametrize("fixed_shape", [False, True])
def test_static_cache_move_rows_equals_reorder_by_the_index_it_stands_for(fixed_shape):
    from attnlab.attention import StaticKVCache

    def filled():
        generator = torch.Generator().manual_seed(0)
        cache = StaticKVCache(2, 6, 2, 8, 4, fixed_shape=fixed_shape)
        for kv in cache.kv:
            kv.copy_(torch.randn(kv.shape, generator=generator))
        cache.length = 5
        cache.set_positions(torch.arange(6) + 10)
        cache.set_key_padding(torch.rand(6, 5, generator=generator) > 0.3)
        return cache

    # Rows 1, 2, 4 take rows 0, 1, 2: row 2 reads row 1 before row 1 is written.
    index = torch.tensor([0, 0, 1, 3, 2, 5])
    moved, reordered = filled(), filled()
    moved.move_rows(torch.tensor([1, 2, 4]), torch.tensor([0, 1, 2]))
    reordered.reorder(index)
    for a, b in zip(moved.kv, reordered.kv):
        assert torch.equal(a[:, :, :, :5], b[:, :, :, :5])
    assert torch.equal(moved.positions, reordered.positions)
    assert torch.equal(moved.key_mask, reordered.key_mask)


def test_static_cache_resize_keeps_what_is_written_and_refuses_to_cut_it():
    from attnlab.attention import StaticKVCache

    cache = StaticKVCache(2, 3, 2, 4, 5, fixed_shape=True)
    for kv in cache.kv:
        kv.normal_()
    cache.length = 3
    cache.set_key_padding(torch.tensor([[True, False, True]] * 3))
    written = [kv[:, :, :, :3].clone() for kv in cache.kv]
    cache.resize(9)
    assert cache.capacity == 9 and all(kv.shape == (2, 3, 2, 9, 5) for kv in cache.kv)
    assert all(layer.self_attn.kv is kv for layer, kv in zip(cache.layers, cache.kv))
    for kv, before in zip(cache.kv, written):
        assert torch.equal(kv[:, :, :, :3], before) and not kv[:, :, :, 3:].any()
    assert cache.key_mask.shape == (3, 1, 1, 9)
    assert cache.key_mask[0, 0, 0].tolist() == [True, False, True] + [True] * 6
    cache.resize(3)
    assert cache.capacity == 3
    with pytest.raises(ValueError, match="cannot hold the 3 written"):
        cache.resize(2)


def test_an_empty_fixed_shape_cache_turns_to_attending_its_filled_prefix():
    from attnlab.attention import StaticKVCache

    cache = StaticKVCache(2, 3, 2, 16, 5, fixed_shape=True)
    cache.resize(4)  # as a search makes it for a package, then grows it
    cache.attend_prefix(16)
    assert not cache.fixed_shape and cache.capacity == 16 and all(kv.shape == (2, 3, 2, 16, 5) for kv in cache.kv)
    written = torch.randn(2, 3, 2, 2, 5)
    keys, values, _, first, mask = cache[0].self_attn.update(written)
    assert keys.shape == (3, 2, 2, 5) and first == 0 and mask is None  # the written positions, not the buffer
    assert torch.equal(torch.stack([keys, values]), written) and not cache.kv[0][:, :, :, 2:].any()
    cache.length = 2
    with pytest.raises(ValueError, match="2 positions are written already"):
        cache.attend_prefix(16)


@pytest.mark.parametrize("old, capacity, length", [(4, 7, 3), (4, 7, 4), (16, 32, 16), (32, 48, 32), (48, 50, 48),
                                                   (5, 6, 1), (3, 40, 3), (8, 9, 8), (6, 6, 6), (50, 16, 0), (7, 9, 0)])
def test_relaid_in_place_equals_a_fresh_copy_in_the_same_memory(old, capacity, length):
    """Any growth (blocks moving up, the lowest overlapping their own new place) and a shrink of an
    empty cache: the written positions of every block as a fresh buffer would hold them, the rest
    zeros, in the buffer's own memory."""
    from attnlab.attention.cache import relaid_in_place

    generator = torch.Generator().manual_seed(old * 100 + capacity)
    lead = (2, 5, 3)
    memory = torch.randn(2 * 5 * 3 * max(old, capacity) * 4, generator=generator, dtype=torch.float64)
    buffer = memory.narrow(0, 0, 2 * 5 * 3 * old * 4).view(*lead, old, 4)
    expected = torch.zeros(*lead, capacity, 4, dtype=torch.float64)
    expected[..., :length, :] = buffer[..., :length, :]
    out = relaid_in_place(buffer, capacity, length)
    assert out.shape == (*lead, capacity, 4) and out.is_contiguous()
    assert out.untyped_storage().data_ptr() == memory.untyped_storage().data_ptr() and out.storage_offset() == 0
    assert torch.equal(out, expected)


def test_relaid_in_place_declines_without_room_a_view_or_a_shrink_of_written_positions():
    from attnlab.attention.cache import relaid_in_place

    buffer = torch.zeros(2, 3, 2, 4, 5)
    assert relaid_in_place(buffer, 5, 2) is None  # no room past its own elements
    assert relaid_in_place(torch.zeros(2, 3, 2, 8, 5)[:, :, :, :4], 6, 2) is None  # not contiguous
    assert relaid_in_place(torch.zeros(1000)[10:10 + 240].view(2, 3, 2, 4, 5), 5, 2) is None  # offset
    assert relaid_in_place(torch.zeros(2, 3, 2, 8, 5), 6, 2) is None  # shrinking written positions
    assert relaid_in_place(torch.zeros(2, 3, 2, 8, 5), 6, 0).shape == (2, 3, 2, 6, 5)


def test_a_static_cache_made_at_full_size_grows_in_its_own_memory():
    """Beam search through a package makes the cache at full size, shrinks it empty and grows it as
    the hypotheses do: no new buffer, the written positions kept, the later slots zeros."""
    from attnlab.attention import StaticKVCache

    generator = torch.Generator().manual_seed(0)
    cache = StaticKVCache(2, 6, 2, 50, 4, fixed_shape=True)
    memory = [kv.untyped_storage().data_ptr() for kv in cache.kv]
    cache.resize(16)
    expected = [torch.zeros(2, 6, 2, 16, 4) for _ in cache.kv]
    for size in (32, 48, 50):
        for kv, want in zip(cache.kv, expected):
            written = torch.randn(2, 6, 2, 16 if size < 50 else 2, 4, generator=generator)
            kv[:, :, :, cache.length:cache.length + written.shape[3]] = written
            want[:, :, :, cache.length:cache.length + written.shape[3]] = written
        cache.length += 16 if size < 50 else 2
        cache.resize(size)
        expected = [torch.cat([want, want.new_zeros(2, 6, 2, size - want.shape[3], 4)], dim=3) for want in expected]
        assert [kv.untyped_storage().data_ptr() for kv in cache.kv] == memory
        assert all(torch.equal(kv, want) for kv, want in zip(cache.kv, expected))
        assert all(layer.self_attn.kv is kv for layer, kv in zip(cache.layers, cache.kv))


def test_a_full_static_cache_reordered_then_grown_stays_in_the_two_buffers():
    """Beam search reorders a cache whose positions are all written (the step before it grows): the
    rows go into the second buffer, made with room for the whole capacity, so the resize after it
    grows them there too; the written positions as plain indexing gives them, the later slots zeros."""
    from attnlab.attention import StaticKVCache

    generator = torch.Generator().manual_seed(1)
    cache = StaticKVCache(2, 6, 2, 40, 4, fixed_shape=True)
    cache.resize(16)
    for kv in cache.kv:
        kv.copy_(torch.randn(kv.shape, generator=generator))
    cache.length = 16
    expected = [kv.clone() for kv in cache.kv]
    cache.move_rows(torch.tensor([0, 1]), torch.tensor([1, 0]))  # a second buffer, made for the rows moved
    expected = [want[:, [1, 0, 2, 3, 4, 5]] for want in expected]
    index = torch.tensor([5, 4, 3, 3, 1, 0])
    cache.reorder(index)
    expected = [want[:, index] for want in expected]
    buffers = {kv.untyped_storage().data_ptr() for kv in cache.kv} | {s.untyped_storage().data_ptr() for s in cache._spares}
    for size in (32, 40):
        cache.resize(size)
        expected = [torch.cat([want, want.new_zeros(2, 6, 2, size - want.shape[3], 4)], dim=3) for want in expected]
        assert {kv.untyped_storage().data_ptr() for kv in cache.kv} <= buffers
        assert all(torch.equal(kv, want) for kv, want in zip(cache.kv, expected))


def test_static_cache_row_moves_resizes_and_shrinking_reorders_keep_every_rows_keys():
    """What beam search does to a fixed-shape cache: rows take other rows' keys and values
    (move_rows), the cache grows (resize), whole sources leave (reorder to fewer rows), in the
    memory of buffers it kept (no fresh allocation when the rows shrink); every row's written
    prefix equals plain indexing of a copy, and the slots past it stay finite (a fixed-shape
    step reads them, masked)."""
    from attnlab.attention import StaticKVCache

    generator = torch.Generator().manual_seed(0)
    cache = StaticKVCache(2, 8, 2, 4, 3, fixed_shape=True)
    for kv in cache.kv:
        kv.copy_(torch.randn(kv.shape, generator=generator))
    cache.length = 4
    expected = [kv.clone() for kv in cache.kv]

    def move(rows, origin):
        cache.move_rows(torch.tensor(rows), torch.tensor(origin))
        for kv in expected:
            kv[:, rows] = kv[:, origin].clone()

    def reorder(index):
        cache.reorder(torch.tensor(index))
        expected[:] = [kv[:, index] for kv in expected]

    def check():
        for kv, want in zip(cache.kv, expected):
            assert kv.is_contiguous() and kv.shape[1] == want.shape[1]
            assert torch.equal(kv[:, :, :, :cache.length], want[:, :, :, :cache.length])
            assert torch.isfinite(kv).all()

    move([1, 2], [2, 1])  # a swap: both read before either is written
    check()
    cache.resize(7)
    expected = [torch.cat([kv, kv.new_zeros(*kv.shape[:3], 3, kv.shape[4])], dim=3) for kv in expected]
    move([0, 5, 6], [3, 3, 1])
    check()
    reorder([7, 6, 5, 4, 3, 2, 1, 0])
    check()
    for kv, new in zip(cache.kv, torch.randn(2, 2, 8, 2, 1, 3, generator=generator)):
        kv[:, :, :, 4:5] = new  # a step writes a position
    for kv, want in zip(cache.kv, expected):
        want[:, :, :, 4:5] = kv[:, :, :, 4:5]
    cache.length = 5
    before = {kv.untyped_storage().data_ptr() for kv in cache._spares}
    reorder([0, 2, 4, 6])  # two sources of two rows left the batch
    check()
    assert {kv.untyped_storage().data_ptr() for kv in cache.kv} <= before
    move([1, 3], [0, 2])
    reorder([3, 2, 1])
    check()


def test_a_cache_made_in_inference_mode_gives_its_memory_only_to_caches_made_in_it():
    """A search in torch.inference_mode gives back inference tensors, which cannot be written in place
    outside it: a cache made there next gets new memory (it failed on the pooled buffer's zeroing),
    one made in inference mode gets the given-back memory; plain memory serves both."""
    from attnlab.attention import StaticKVCache
    from attnlab.attention import cache as caches

    caches.release_cache_memory()
    try:
        with torch.inference_mode():
            inside = StaticKVCache(2, 3, 2, 8, 4, fixed_shape=True)
        memory = {t.untyped_storage().data_ptr() for t in inside.kv}
        inside.release()
        outside = StaticKVCache(2, 3, 2, 8, 4, fixed_shape=True)
        assert not {t.untyped_storage().data_ptr() for t in outside.kv} & memory
        outside.kv[0].add_(1.0)  # its own, writable memory
        plain = {t.untyped_storage().data_ptr() for t in outside.kv}
        outside.release()
        with torch.inference_mode():
            both = StaticKVCache(2, 3, 2, 8, 4, fixed_shape=True)
            again = StaticKVCache(2, 3, 2, 8, 4, fixed_shape=True)
            taken = {t.untyped_storage().data_ptr() for t in both.kv + again.kv}
            assert taken == memory | plain and all(bool((t == 0).all()) for t in both.kv + again.kv)
    finally:
        caches.release_cache_memory()


def test_a_released_caches_memory_serves_the_next_caches_as_zeros_never_as_its_old_values(monkeypatch):
    """A search gives its cache's memory back at its end (StaticKVCache.release): the next cache of a
    size it fits (its keys and values, reorder's second buffers, a resize's new buffer) is made in that
    memory, with the zeros a fixed-shape step reads masked, not the old values (NaN here: NaN * 0 = NaN);
    another dtype, memory more than 4x the size asked, or past CACHE_POOL_BYTES is not kept for it."""
    from attnlab.attention import StaticKVCache
    from attnlab.attention import cache as caches

    caches.release_cache_memory()
    cache = StaticKVCache(2, 3, 2, 8, 4, fixed_shape=True)
    cache.reorder(torch.tensor([2, 0, 1]))  # reorder's second buffers, with room for the whole capacity
    memory = {t.untyped_storage().data_ptr() for t in cache.kv + cache._spares}
    assert len(memory) == 4
    for t in cache.kv + cache._spares:
        t.fill_(float("nan"))
    cache.release()
    assert cache.kv == [] and cache.layers == []  # not usable after it

    again = StaticKVCache(2, 3, 2, 8, 4, fixed_shape=True)
    again.reorder(torch.tensor([1, 1, 0]))
    assert {t.untyped_storage().data_ptr() for t in again.kv + again._spares} == memory
    assert all(bool((kv == 0).all()) for kv in again.kv)  # the prefix copied is empty: all zeros
    assert all(bool((spare == 0).all()) for spare in again._spares)
    again.release()

    other = StaticKVCache(2, 3, 2, 8, 4, fixed_shape=True, dtype=torch.float64)  # another dtype
    small = StaticKVCache(1, 1, 1, 8, 4, fixed_shape=True)  # 64 elements: the 384 kept are > 4x
    assert not {t.untyped_storage().data_ptr() for t in other.kv + small.kv} & memory
    big = StaticKVCache(2, 3, 2, 12, 4, fixed_shape=True)
    for kv in big.kv:
        kv.fill_(float("nan"))
    bigger = {kv.untyped_storage().data_ptr() for kv in big.kv}
    big.release()
    grown = StaticKVCache(2, 3, 2, 8, 4, fixed_shape=True)
    assert {kv.untyped_storage().data_ptr() for kv in grown.kv} <= memory  # the smallest memory that fits
    grown.length = 8
    for kv in grown.kv:
        kv.normal_()
    written = [kv.clone() for kv in grown.kv]
    grown.resize(12)  # past its memory's room (8 positions): a new buffer, in the larger memory given back
    assert {kv.untyped_storage().data_ptr() for kv in grown.kv} == bigger
    assert all(torch.equal(kv[:, :, :, :8], w) and bool((kv[:, :, :, 8:] == 0).all()) for kv, w in zip(grown.kv, written))
    grown.release()

    # reorder's second buffer is a view of the positions it had, in memory with room for all: a later
    # move of rows gathers in that room (no new buffer), and one too small goes back for other caches
    roomy = StaticKVCache(1, 4, 2, 8, 4, fixed_shape=True)
    roomy.resize(2)
    roomy.length = 2
    roomy.reorder(torch.tensor([3, 2, 1, 0]))
    spare = roomy._spares[0].untyped_storage().data_ptr()
    roomy.resize(8)
    roomy.move_rows(torch.tensor([0, 1, 2]), torch.tensor([3, 3, 3]))
    assert roomy._spares[0].untyped_storage().data_ptr() == spare
    small = roomy._spares[0]
    roomy.reorder(torch.tensor([0, 1, 2, 3, 0, 1, 2, 3]))  # twice the rows: a new second buffer
    assert roomy._spares[0] is not small and any(t.untyped_storage().data_ptr() == spare for t in caches._POOL.free)

    caches.release_cache_memory()
    monkeypatch.setattr(caches, "CACHE_POOL_BYTES", 2 * 3 * 2 * 8 * 4 * 4)  # one layer's keys and values
    StaticKVCache(2, 3, 2, 8, 4, fixed_shape=True).release()
    assert len(caches._POOL.free) == 1
    caches.release_cache_memory()
    assert caches._POOL.free == []
