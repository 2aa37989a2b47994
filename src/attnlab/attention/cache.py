"""Key/value caches for incremental decoding.

Self-attention appends the new step's keys and values; cross-attention computes the
memory's keys and values once per source. Both can be reordered along the batch
(beam search) with :meth:`reorder`.
"""

from __future__ import annotations

from torch import Tensor
import torch


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
    """The caches of a whole layer stack; ``length`` is the number of positions seen."""

    def __init__(self, num_layers: int, cross_attention: bool, capacity: int = 64):
        self.layers = [LayerCache(cross_attention, capacity) for _ in range(num_layers)]

    @property
    def length(self) -> int:
        return self.layers[0].self_attn.length if self.layers else 0

    def __getitem__(self, i: int) -> LayerCache:
        return self.layers[i]

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
