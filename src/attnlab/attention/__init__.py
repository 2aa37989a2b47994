"""The attention core: ``attend``, masks, patterns (and their registry), multi-head attention, caches."""

from attnlab.attention.cache import KVCache, LayerCache, MemoryKVCache, StackCache, StaticKVCache
from attnlab.attention.core import attend, attend_unchecked
from attnlab.attention.masks import band_mask, causal_mask, check_mask, combine_masks, key_padding_mask, lengths_mask
from attnlab.attention.local import Local1D, Local2D, block_raster_order
from attnlab.attention.multihead import MultiHeadAttention
from attnlab.attention.patterns import (AttentionContext, AttentionPattern, CausalAttention, FullAttention,
                                        build_pattern, list_patterns, register_pattern)
from attnlab.attention.relative import RelativeShaw, RelativeSkew
from attnlab.attention.varlen import Packing, Segments, attend_varlen, pack_right_padded

__all__ = [
    "attend", "attend_unchecked", "band_mask", "causal_mask", "check_mask", "combine_masks", "key_padding_mask",
    "lengths_mask", "MultiHeadAttention", "AttentionContext", "AttentionPattern", "CausalAttention", "FullAttention",
    "build_pattern", "list_patterns", "register_pattern", "KVCache", "MemoryKVCache", "LayerCache", "StackCache",
    "StaticKVCache", "Local1D", "Local2D", "block_raster_order", "RelativeSkew", "RelativeShaw",
    "Packing", "Segments", "attend_varlen", "pack_right_padded",
]
