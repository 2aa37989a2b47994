"""The attention core: ``attend``, masks, patterns, multi-head attention and caches."""

from attnlab.attention.cache import KVCache, LayerCache, MemoryKVCache, StackCache
from attnlab.attention.core import attend, attend_unchecked
from attnlab.attention.masks import band_mask, causal_mask, check_mask, combine_masks, key_padding_mask, lengths_mask
from attnlab.attention.multihead import MultiHeadAttention
from attnlab.attention.patterns import AttentionPattern, CausalAttention, FullAttention

__all__ = [
    "attend", "attend_unchecked", "band_mask", "causal_mask", "check_mask", "combine_masks", "key_padding_mask",
    "lengths_mask", "MultiHeadAttention", "AttentionPattern", "CausalAttention", "FullAttention", "KVCache",
    "MemoryKVCache", "LayerCache", "StackCache",
]
