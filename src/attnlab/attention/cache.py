"""Key/value caches for incremental decoding.

Self-attention appends the new step's keys and values; cross-attention computes the
memory's keys and values once per source. Both can be reordered along the batch
(beam search) with :meth:`reorder`.

Two self-attention caches, one interface (``update``, used by
:class:`~attnlab.attention.multihead.MultiHeadAttention`): :class:`KVCache` grows as it
goes (search, where rows are reordered and dropped); :class:`StaticKVCache` preallocates
every layer's keys and values for a known number of positions (sampling from an LM) and
can run with fixed shapes, its write position a device tensor, so that a decode step does
no host sync and could be captured as a CUDA graph.
"""

from __future__ import annotations

import math
import threading

from torch import Tensor
import torch


class _BufferPool:
    """The memory of static caches a search gave back (:meth:`StaticKVCache.release`), handed to the
    next caches on the CPU: a large fresh buffer's first writes page-fault its memory in, which cost
    more than writing it (a beam search over 32 multi30k-shaped sources zero-filled ~80 MB of new
    cache memory, ~5 % of its time: docs/benchmarks.md). Flat buffers, at most :data:`CACHE_POOL_BYTES`
    in all; :func:`release_cache_memory` frees them. Thread-safe: a buffer is one cache's at a time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.free: list[Tensor] = []

    def take(self, count: int, dtype: torch.dtype, device) -> Tensor | None:
        """A given-back buffer's whole memory, flat, of at least ``count`` elements (and at most 4x), or
        None. Its values are what the last cache left: the caller writes what it needs. A buffer made
        under ``torch.inference_mode`` only to a caller in it: outside, such a tensor cannot be written
        in place (a cache made after a search in inference mode failed so)."""
        if torch.device(device if device is not None else torch.get_default_device()).type != "cpu" or count <= 0:
            return None
        inference = torch.is_inference_mode_enabled()
        with self.lock:
            fits = [i for i, t in enumerate(self.free) if t.dtype == dtype and count <= t.numel() <= 4 * count
                    and (inference or not t.is_inference())]
            if not fits:
                return None
            return self.free.pop(min(fits, key=lambda i: self.free[i].numel()))

    def give(self, buffers: list[Tensor]) -> None:
        with self.lock:
            held = {t.data_ptr() for t in self.free}
            for buffer in buffers:
                memory = _memory(buffer)
                if buffer.device.type == "cpu" and memory.data_ptr() not in held:
                    held.add(memory.data_ptr())
                    self.free.append(memory)
            self.free.sort(key=lambda t: t.numel(), reverse=True)  # the largest kept first
            total = 0
            for i, t in enumerate(self.free):
                total += t.numel() * t.element_size()
                if total > CACHE_POOL_BYTES:
                    del self.free[i:]
                    break

    def clear(self) -> None:
        with self.lock:
            self.free.clear()


CACHE_POOL_BYTES = 1 << 30
"""The most memory given-back caches keep for the next ones (:class:`_BufferPool`), in bytes."""
_POOL = _BufferPool()


def release_cache_memory() -> None:
    """Free the cache memory searches gave back for their next caches (held until then, at most
    :data:`CACHE_POOL_BYTES`)."""
    _POOL.clear()


def _memory(buffer: Tensor) -> Tensor:
    """All of ``buffer``'s memory (its storage), flat, from the start: the room a cache may use past the
    buffer's own view (:class:`_BufferPool`, :meth:`StaticKVCache._spare`, :func:`relaid_in_place`)."""
    return buffer.as_strided((buffer.untyped_storage().nbytes() // buffer.element_size(),), (1,), 0)


def _pooled(shape: tuple[int, ...], dtype: torch.dtype, device, zeros: bool) -> Tensor:
    """A contiguous ``shape`` tensor at the start of given-back memory where there is some, else a new one;
    ``zeros``: all of its memory zeros, as a new one's (a fixed-shape cache's memory holds zeros or keys and
    values, never what another cache left: :meth:`StaticKVCache._spare` and :func:`relaid_in_place` use
    the room past the tensor)."""
    count = math.prod(shape)
    buffer = _POOL.take(count, dtype, device)
    if buffer is None:
        return (torch.zeros if zeros else torch.empty)(shape, dtype=dtype, device=device)
    if zeros:
        buffer.zero_()
    return buffer.narrow(0, 0, count).view(shape)


class KVCache:
    """Growing self-attention cache of keys and values, ``(B, H, L, D)`` each.

    Storage is preallocated and doubles when full, so appending one step costs O(1)
    amortised copies instead of the O(L) of ``torch.cat`` every step.
    """

    def __init__(self, capacity: int = 64):
        self.capacity_hint = capacity
        self._k: Tensor | None = None
        self._v: Tensor | None = None
        self.length = 0

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add ``(B, H, T, D)`` new keys/values; return all keys/values so far, ``(B, H, L+T, D)``."""
        new_len = self.length + k.shape[-2]
        if self._k is None or new_len > self._k.shape[-2]:
            capacity = max(new_len, 2 * (0 if self._k is None else self._k.shape[-2]), self.capacity_hint)
            self._k = self._grow(self._k, k, capacity)
            self._v = self._grow(self._v, v, capacity)
        self._k[:, :, self.length:new_len] = k
        self._v[:, :, self.length:new_len] = v
        self.length = new_len
        return self._k[:, :, :new_len], self._v[:, :, :new_len]

    def update(self, kv: Tensor, window: int | None = None):
        """Append ``kv`` ``(2, B, H, T, D)`` (new keys, values); return ``(keys, values,
        query_offset, key_offset, key_mask)`` for the attention: all keys so far, or the
        last ones a pattern with a ``window`` can attend (``key_offset`` = position of the
        first); ``query_offset`` None = the queries are the last keys; no key mask."""
        new = kv.shape[-2]
        keys, values = self.append(kv[0], kv[1])
        first = 0 if window is None else max(0, self.length - new - window + 1)
        if first:
            keys, values = keys[:, :, first:], values[:, :, first:]
        return keys, values, None, first, None

    def _grow(self, old: Tensor | None, like: Tensor, capacity: int) -> Tensor:
        shape = (*like.shape[:2], capacity, like.shape[-1])
        buffer = like.new_empty(shape)
        if old is not None:
            buffer[:, :, :self.length] = old[:, :, :self.length]
        return buffer

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (a 1-D LongTensor), in that order."""
        if self._k is not None:
            self._k, self._v = self._select(self._k, index), self._select(self._v, index)

    def _select(self, buffer: Tensor, index: Tensor) -> Tensor:
        # Beam search reorders every step: copy only the filled prefix, not the whole capacity.
        selected = buffer.new_empty((len(index), *buffer.shape[1:]))
        torch.index_select(buffer[:, :, :self.length], 0, index, out=selected[:, :, :self.length])
        return selected


class MemoryKVCache:
    """Cross-attention keys/values of the encoder output, computed once per source."""

    def __init__(self):
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    @property
    def is_set(self) -> bool:
        return self.k is not None

    def set(self, k: Tensor, v: Tensor) -> None:
        self.k, self.v = k, v

    def reorder(self, index: Tensor) -> None:
        if self.k is not None:
            self.k = self.k.index_select(0, index)
            self.v = self.v.index_select(0, index)


class LayerCache:
    """The caches of one layer: self-attention, and cross-attention if the layer has it."""

    def __init__(self, cross_attention: bool, capacity: int = 64):
        self.self_attn = KVCache(capacity)
        self.cross_attn = MemoryKVCache() if cross_attention else None


class StackCache:
    """The growing caches of a whole layer stack; ``length`` is the number of positions seen."""

    def __init__(self, num_layers: int, cross_attention: bool, capacity: int = 64):
        self.layers = [LayerCache(cross_attention, capacity) for _ in range(num_layers)]

    @property
    def length(self) -> int:
        return self.layers[0].self_attn.length if self.layers else 0

    def __getitem__(self, i: int) -> LayerCache:
        return self.layers[i]

    def advance(self, count: int) -> None:
        """Called by the stack after a forward of ``count`` positions; each growing layer
        cache has counted them itself."""

    def reorder(self, index: Tensor, *, include_memory: bool = True) -> None:
        """Keep batch rows ``index``. Beam search reorders only within a source, whose
        memory rows are identical, so it may pass ``include_memory=False`` to skip copying
        the cross-attention keys/values."""
        index = torch.as_tensor(index)
        for layer in self.layers:
            layer.self_attn.reorder(index)
            if include_memory and layer.cross_attn is not None:
                layer.cross_attn.reorder(index)

    def reorder_memory(self, index: Tensor) -> None:
        """Keep batch rows ``index`` of the cross-attention caches only."""
        index = torch.as_tensor(index)
        for layer in self.layers:
            if layer.cross_attn is not None:
                layer.cross_attn.reorder(index)


class StaticKVCache:
    """Preallocated self-attention keys and values of every layer of a stack, for up to
    ``capacity`` positions of ``batch`` rows (+ cross-attention memory caches if asked).

    Layer i's buffer is ``kv[i]`` ``(2, B, H, capacity, D)`` (keys, values); ``cache[i]``
    looks like a :class:`LayerCache`. ``length`` counts the positions written (a host
    integer the Python loop keeps; reading it is no sync); the stack calls
    :meth:`advance` after each forward. ``key_mask`` ``(B, 1, 1, capacity)`` marks real
    (non-padding) keys, None when no row has padding. ``positions`` ``(B,)`` is free for
    the model: the position index of each row's next token (left-padded rows differ).

    ``fixed_shape=True`` makes every step the same computation, for a CUDA-graph capture or
    ``torch.compile``: keys and values are written at ``write_index`` (a ``(1,)`` device
    tensor advanced in place) and attention runs over the whole buffer, the pattern masking
    the positions after the query; a one-token step of a pattern with a ``cache_window``
    gets the window's slots ending at the query instead, gathered (its ``key_offset`` a
    ``(1,)`` tensor too, slots before the start masked). Otherwise (the default, faster eagerly) attention sees the
    filled prefix only (or the pattern's ``cache_window`` of it).

    The cache owns its state: callers move it only through its methods — :meth:`advance`
    (the stack, after a forward), :meth:`step_positions` / :meth:`set_positions` (the
    model's next-token positions), :meth:`reset` (empty again, in place: a CUDA graph holds
    these very tensors), :meth:`snapshot` / :meth:`restore`, :meth:`count_replayed` (steps
    a replayed graph made on the device) and :meth:`set_conditioning` (what a model adds
    at every step, e.g. the Image Transformer's positions + class + low-resolution image,
    read back as ``conditioning``).
    """

    def __init__(self, num_layers: int, batch: int, num_heads: int, capacity: int, head_dim: int, *,
                 cross_attention: bool = False, fixed_shape: bool = False, dtype=torch.float32, device=None):
        self.capacity = capacity
        self.fixed_shape = fixed_shape
        # Zeros, not empty: a fixed-shape step reads unwritten slots (masked, but NaN * 0 = NaN).
        self.kv = [_pooled((2, batch, num_heads, capacity, head_dim), dtype, device, zeros=True)
                   for _ in range(num_layers)]
        self.length = 0
        self.write_index = torch.zeros(1, dtype=torch.long, device=device)
        self.positions = torch.zeros(batch, dtype=torch.long, device=device)
        self.key_mask: Tensor | None = None
        self.conditioning: Tensor | None = None
        self.layers = [_StaticLayerCache(self, kv, cross_attention) for kv in self.kv]
        self._spares: list[Tensor | None] | None = None  # reorder's second buffers (not fixed-shape)
        self.room = capacity  # positions a second buffer is made for (resize's growth then stays in it)

    def __getitem__(self, i: int) -> "_StaticLayerCache":
        return self.layers[i]

    def step_tensors(self) -> list[Tensor]:
        """Every tensor a fixed-shape step reads or writes, flat, in one fixed order:
        ``write_index``, ``positions``, the key mask (made all-real when there is none),
        the conditioning (when set), each layer's ``kv``, then each layer's cross-attention
        keys and values (when the layers have them). An ahead-of-time compiled step
        (:mod:`attnlab.generation.aot`) takes its cache as these plain inputs, written in
        place; :meth:`over_step_tensors` is the inverse."""
        tensors = [self.write_index, self.positions, self.full_key_mask()]
        if self.conditioning is not None:
            tensors.append(self.conditioning)
        tensors.extend(self.kv)
        for layer in self.layers:
            if layer.cross_attn is not None:
                tensors += [layer.cross_attn.k, layer.cross_attn.v]
        return tensors

    @classmethod
    def over_step_tensors(cls, tensors: list[Tensor], *, num_layers: int, conditioning: bool,
                          cross_attention: bool) -> "StaticKVCache":
        """A fixed-shape cache over the tensors of :meth:`step_tensors` (no copies: the
        step's writes go into them); the host's count of positions starts at 0 and is not
        read by a fixed-shape step."""
        tensors = list(tensors)
        cache = cls.__new__(cls)
        cache.write_index, cache.positions, cache.key_mask = tensors[:3]
        cache.conditioning = tensors[3] if conditioning else None
        first = 4 if conditioning else 3
        cache.kv = tensors[first:first + num_layers]
        cache.capacity = cache.kv[0].shape[3]
        cache.fixed_shape = True
        cache.length = 0
        cache._spares = None
        cache.room = cache.capacity
        cache.layers = [_StaticLayerCache(cache, kv, cross_attention) for kv in cache.kv]
        if cross_attention:
            memory = tensors[first + num_layers:]
            for i, layer in enumerate(cache.layers):
                layer.cross_attn.set(memory[2 * i], memory[2 * i + 1])
        return cache

    def advance(self, count: int) -> None:
        """``count`` positions were written (the stack calls this after each forward/step).

        Inside a step compiled by ``torch.compile`` (:mod:`attnlab.generation.compiled`)
        only the device tensors move: a host integer read there would be baked into the
        compiled code as a constant (one recompilation per position), so that caller
        counts on the host with :meth:`count_replayed` after each call, as a CUDA graph's
        replays do."""
        if not torch.compiler.is_compiling():
            self.length += count
        if self.fixed_shape:
            self.write_index += count

    def count_replayed(self, count: int) -> None:
        """A replayed CUDA graph (or a compiled step) advanced the device state ``count``
        steps; move the host's count of positions to match (replay runs no Python)."""
        self.length += count

    def step_positions(self) -> None:
        """Every row's next position moves on by one (in place: a graph may hold it)."""
        self.positions += 1

    def set_positions(self, value: int | Tensor) -> None:
        """Each row's next position: one number for all rows, or ``(B,)`` (in place)."""
        if isinstance(value, Tensor):
            self.positions.copy_(value)
        else:
            self.positions.fill_(value)

    def set_conditioning(self, value: Tensor | None) -> None:
        """What the model adds at every step, computed once at prefill (read as ``conditioning``)."""
        self.conditioning = value

    def full_key_mask(self) -> Tensor:
        """The key mask, made all-real if there is none yet (a fixed-shape capture needs the
        tensor to exist before recording, so later calls can set padding in place)."""
        if self.key_mask is None:
            self.key_mask = torch.ones(self.positions.shape[0], 1, 1, self.capacity, dtype=torch.bool,
                                       device=self.positions.device)
        return self.key_mask

    def reset(self) -> None:
        """Empty again, in place: no positions written, every key real (stale keys and
        values stay in the buffers, beyond the count, never read as real)."""
        self.length = 0
        self.write_index.zero_()
        if self.key_mask is not None:
            self.key_mask.fill_(True)

    def attend_prefix(self, capacity: int) -> None:
        """An empty fixed-shape cache becomes one whose steps attend the filled prefix (the
        default, faster eagerly), with room for ``capacity`` positions: for a caller that made it
        for an ahead-of-time package and then had none (no C++ compiler, a failed export), whose
        eager steps over the whole buffer took 1.02-1.17x the time (a beam search at the multi30k
        shape; docs/benchmarks.md)."""
        if self.length:
            raise ValueError(f"StaticKVCache.attend_prefix: {self.length} positions are written already")
        if capacity != self.capacity:
            self.resize(capacity)
        self.fixed_shape = False

    def snapshot(self) -> tuple[Tensor, Tensor, int]:
        """The cursor (write index, positions, count) to :meth:`restore` later."""
        return self.write_index.clone(), self.positions.clone(), self.length

    def restore(self, state: tuple[Tensor, Tensor, int]) -> None:
        """Put back a :meth:`snapshot`'s cursor, in place (keys and values are not restored:
        slots past the count are overwritten by the next writes)."""
        write_index, positions, length = state
        self.write_index.copy_(write_index)
        self.positions.copy_(positions)
        self.length = length

    def set_key_padding(self, mask: Tensor) -> None:
        """Record ``(B, L)`` (True = real token) for the first L slots; later slots count as real."""
        if self.key_mask is None:
            self.key_mask = torch.ones(mask.shape[0], 1, 1, self.capacity, dtype=torch.bool, device=mask.device)
        self.key_mask[:, 0, 0, :mask.shape[1]] = mask

    def reorder(self, index: Tensor, *, include_memory: bool = True) -> None:
        """Keep batch rows ``index``: only the filled prefix is copied (beam search reorders
        every step; the slots after it are never read as keys: a fixed-shape step reads them
        but masks them by position, so they must be finite: zeros, or keys and values written
        before (see :meth:`_spare`), never NaN)."""
        index = torch.as_tensor(index)
        spares = self._spare_buffers()
        for i, layer in enumerate(self.layers):
            kv = layer.self_attn.kv
            # Into the memory of the buffer the previous reorder left: no fresh allocation, and
            # so no page faults, every step (and none when whole sources leave the batch); a full
            # cache too, so that a resize after it still finds room in its memory.
            selected = self._spare(i, kv, (kv.shape[0], len(index), *kv.shape[2:]))
            torch.index_select(kv.narrow(3, 0, self.length), 1, index, out=selected.narrow(3, 0, self.length))
            layer.self_attn.kv, spares[i] = selected, kv
        if include_memory:
            self.reorder_memory(index)
        self.kv = [layer.self_attn.kv for layer in self.layers]
        self.positions = self.positions.index_select(0, index)
        if self.key_mask is not None:
            self.key_mask = self.key_mask.index_select(0, index)

    def reorder_memory(self, index: Tensor) -> None:
        index = torch.as_tensor(index)
        for layer in self.layers:
            if layer.cross_attn is not None:
                layer.cross_attn.reorder(index)

    def _spare_buffers(self) -> list[Tensor | None]:
        """Each layer's second buffer (reorder copies into it; move_rows gathers there)."""
        if self._spares is None:
            self._spares = [None] * len(self.layers)
        return self._spares

    def _spare(self, i: int, kv: Tensor, shape: tuple[int, ...]) -> Tensor:
        """A contiguous ``shape`` tensor in the memory of layer ``i``'s second buffer: the one
        kept when it holds enough elements (its old keys and values, or zeros: finite, as a
        fixed-shape step needs in the slots past the prefix it reads masked), else a new one,
        zeros for a fixed-shape cache."""
        spares = self._spare_buffers()
        spare, count = spares[i], math.prod(shape)
        # (its memory's room, not its own size: the buffer a reorder left is a view of the positions
        # it had then, in memory made for the whole capacity)
        if spare is None or _memory(spare).numel() < count:
            if spare is not None:
                _POOL.give([spare])  # too small: for other caches
            # room for the cache's whole capacity (shape[3] grows up to it): resize then grows a
            # cache reordered into it in place (relaid_in_place)
            room = count // shape[3] * max(self.room, shape[3]) if shape[3] else count
            spare = spares[i] = _pooled((room,), kv.dtype, kv.device, zeros=self.fixed_shape)
        return _memory(spare).narrow(0, 0, count).view(shape)

    def resize(self, capacity: int) -> None:
        """Room for ``capacity`` positions, keeping the ``length`` written (new buffers; the
        later slots zeros). For a consumer that takes any capacity (an ahead-of-time package
        with a dynamic capacity, which attends the whole buffer): beam search grows the cache
        as it goes, so a step reads a few slots past the filled prefix, not the longest
        hypothesis's room (generation/search.py)."""
        if capacity < max(self.length, 1):
            raise ValueError(f"StaticKVCache.resize: {capacity} positions cannot hold the {self.length} written")
        spares = self._spare_buffers()
        for i, layer in enumerate(self.layers):
            old = layer.self_attn.kv
            new = relaid_in_place(old, capacity, self.length)
            if new is None:  # no room in its memory: a new buffer
                self.room = max(self.room, capacity)
                new = _pooled((*old.shape[:3], capacity, old.shape[4]), old.dtype, old.device,
                              zeros=self.fixed_shape)
                new.narrow(3, 0, self.length).copy_(old.narrow(3, 0, self.length))
                if not self.fixed_shape:
                    new.narrow(3, self.length, capacity - self.length).zero_()
                if spares[i] is None or _memory(spares[i]).numel() < _memory(old).numel():
                    if spares[i] is not None:
                        _POOL.give([spares[i]])
                    spares[i] = old  # its memory serves move_rows's gathers (finite: keys, values, zeros)
                else:
                    _POOL.give([old])
            layer.self_attn.kv = new
        self.kv = [layer.self_attn.kv for layer in self.layers]
        if self.key_mask is not None:
            mask = self.key_mask.new_ones((*self.key_mask.shape[:3], capacity))
            kept = min(capacity, self.capacity)
            mask.narrow(3, 0, kept).copy_(self.key_mask.narrow(3, 0, kept))
            self.key_mask = mask
        self.capacity = capacity

    def release(self) -> None:
        """Give the keys' and values' memory (and reorder's second buffers) to the next caches made
        on the CPU (:class:`_BufferPool`): for the owner of a cache it will not use again (a search,
        at its end). The cache cannot be used after it."""
        buffers = [t for t in self.kv + (self._spares or []) if t is not None]
        self.kv, self._spares, self.layers = [], None, []
        _POOL.give(buffers)

    def move_rows(self, rows: Tensor, origin: Tensor) -> None:
        """Rows ``rows`` take the keys, values, position and key mask of rows ``origin`` (the
        other rows stay as they are; all are read before any is written), in place: the same
        as :meth:`reorder` with an index that is the identity but at ``rows``, copying only
        those (beam search, where ~3/4 of the rows extend their own hypothesis at a step)."""
        for i, layer in enumerate(self.layers):
            kv = layer.self_attn.kv
            prefix = kv.narrow(3, 0, self.length)
            # Gathered into the memory of the spare buffer reorder keeps: index_select into it is
            # ~1.3x faster than into a fresh tensor, and allocates nothing. Its out is strided like
            # the prefix (a contiguous out would make index_select copy the whole prefix first).
            moved = self._spare(i, kv, (kv.shape[0], len(rows), *kv.shape[2:])).narrow(3, 0, self.length)
            torch.index_select(prefix, 1, origin, out=moved)
            prefix.index_copy_(1, rows, moved)
        self.positions.index_copy_(0, rows, self.positions.index_select(0, origin))
        if self.key_mask is not None:
            self.key_mask.index_copy_(0, rows, self.key_mask.index_select(0, origin))


def relaid_in_place(buffer: Tensor, capacity: int, length: int) -> Tensor | None:
    """``buffer`` ``(*lead, C, D)`` (contiguous, at the start of its memory) as ``(*lead, capacity,
    D)`` in the same memory, each block's first ``length`` positions kept and the later ones zeros;
    None when its memory has no room for that, or to shrink what holds positions.

    A cache made at full size and grown as decoding goes (:meth:`StaticKVCache.resize`) then never
    allocates: a fresh buffer's first writes page-fault its memory in, which cost more than the copy
    itself (multi30k shape, 128 rows: resizing was ~3 % of a beam search). Growing, block j moves
    from ``j·C·D`` to ``j·capacity·D``: groups of blocks are copied from the top, each group to where
    no block not yet moved lies, the few lowest (whose old and new places overlap) through a copy."""
    *lead, old, depth = buffer.shape
    blocks = math.prod(lead)
    memory = _memory(buffer)
    if not buffer.is_contiguous() or buffer.storage_offset() != 0 or blocks * capacity * depth > memory.numel() \
            or (capacity < old and length > 0):
        return None
    before = memory.narrow(0, 0, blocks * old * depth).view(blocks, old, depth)
    after = memory.narrow(0, 0, blocks * capacity * depth).view(blocks, capacity, depth)
    if capacity > old and length > 0:  # block 0 stays where it is
        top = blocks
        while top > 1:
            # the lowest block whose new place starts after block top-1's positions end
            low = max(1, -(-((top - 1) * old + length) // capacity))
            if low >= top:  # blocks 1..top-1 overlap their own new places: through a copy
                after[1:top, :length].copy_(before[1:top, :length].clone())
                break
            after[low:top, :length].copy_(before[low:top, :length])
            top = low
    after[:, length:].zero_()
    return after.view(*lead, capacity, depth)


class _StaticLayerCache:
    """One layer of a :class:`StaticKVCache`: ``self_attn.update`` and ``cross_attn``."""

    def __init__(self, owner: StaticKVCache, kv: Tensor, cross_attention: bool):
        self.owner = owner
        self.kv = kv
        self.self_attn = self
        self.cross_attn = MemoryKVCache() if cross_attention else None

    def update(self, kv: Tensor, window: int | None = None):
        """Write ``kv`` ``(2, B, H, T, D)`` at the next T slots; see :meth:`KVCache.update`."""
        owner, buffer = self.owner, self.kv
        new = kv.shape[-2]
        if owner.fixed_shape:
            index = owner.write_index if new == 1 else owner.write_index + torch.arange(new, device=kv.device)
            buffer.index_copy_(3, index, kv)
            if new != 1 or window is None or window >= owner.capacity:
                return buffer[0], buffer[1], owner.write_index, 0, owner.key_mask
            # One query of a pattern with a window: the `window` slots ending at the query,
            # gathered (still one shape at every step, and the pattern's attention costs its
            # window, not the whole buffer). Slots before 0 repeat slot 0 and are masked.
            slots = owner.write_index + torch.arange(1 - window, 1, device=kv.device)  # (window,)
            gather = slots.clamp(min=0)
            keys, values = buffer.index_select(3, gather).unbind(0)
            real = (slots >= 0).view(1, 1, 1, window)
            if owner.key_mask is not None:
                real = real & owner.key_mask.index_select(3, gather)
            return keys, values, owner.write_index, slots[:1], real
        start = owner.length
        end = start + new
        if end > owner.capacity:
            raise ValueError(f"StaticKVCache is full: {end} positions > capacity {owner.capacity}")
        # narrow/select, not tensor[...]: Python's multi-slice indexing costs several µs a call.
        buffer.narrow(3, start, new).copy_(kv)  # keys and values in one copy
        first = 0 if window is None else max(0, start - window + 1)
        keys, values = buffer.narrow(3, first, end - first).unbind(0)
        key_mask = owner.key_mask
        return keys, values, None, first, None if key_mask is None else key_mask.narrow(3, first, end - first)
