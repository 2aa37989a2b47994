"""Parts that models are composed of: a source encoder and a target decoder.

* :class:`TokenEncoder`: token embedding + positions + a stack (full attention by default)
  -> ``(memory, memory_mask)``.
* :class:`TokenDecoder`: token embedding + positions + a causal stack (with or without
  cross-attention) + an output projection tied to the embedding + cache factories. The
  encoder–decoder Transformer pairs it with a TokenEncoder, :class:`~attnlab.models.lm.
  DecoderLM` is it without cross-attention, a captioner pairs it with an image encoder.

Every way of running a decoder goes through the same layers: :meth:`TokenDecoder.forward`
(training, checking, search with a growing cache) and :meth:`TokenDecoder.step` (a decode
step: no argument checks, no host syncs, a preallocated cache) both call the stack.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab import head_screen
from attnlab.attention.cache import StackCache, StaticKVCache
from attnlab.attention.core import capturing
from attnlab.attention.masks import key_padding_mask
from attnlab.attention.varlen import Packing, Segments, pack_right_padded
from attnlab.layers.blocks import TransformerLayer, TransformerStack
from attnlab.layers.embedding import TokenEmbedding
from attnlab.layers.positional import build_positional
from attnlab.linear import DecodeCaches, Linear, derived_key, linear_rows, onednn_rows, skinny_linear
from attnlab.models.base import StackConfig
from attnlab.quantize import integer_sums_pay


def build_stack(config: StackConfig, num_layers: int, pattern, *, cross_attention: bool, final_norm: bool,
                activation_dropout: float = 0.0) -> TransformerStack:
    """A stack of ``num_layers`` layers with the shared fields of ``config``."""
    c = config
    layers = [TransformerLayer(c.d_model, c.num_heads, c.d_ff, dropout=c.dropout, attention_dropout=c.attention_dropout,
                               activation_dropout=activation_dropout, activation=c.activation,
                               norm_first=c.norm_first, layer_norm_eps=c.layer_norm_eps,
                               cross_attention=cross_attention, self_pattern=pattern)
              for _ in range(num_layers)]
    return TransformerStack(layers, d_model=c.d_model, final_norm=final_norm, layer_norm_eps=c.layer_norm_eps)


class _Embedder(nn.Module):
    """Token embedding + positions (None: NoPE) + dropout, shared by the two parts."""

    def __init__(self, embed: TokenEmbedding, positions: nn.Module | None, dropout: float):
        super().__init__()
        self.embed = embed
        self.positions = positions
        self.embed_dropout = nn.Dropout(dropout)

    def embed_tokens(self, ids: Tensor, positions: Tensor, *, checked: bool = True,
                     bound: int | None = None) -> Tensor:
        """``(B, L)`` ids at ``positions`` (``(L,)`` or ``(B, L)``) -> ``(B, L, d_model)``;
        ``checked=False`` skips the position range check (and its host sync); ``bound``, a
        number the caller knows every position is below, checks that instead (no sync)."""
        x = self.embed.forward(ids)
        if self.positions is not None:
            if bound is not None:
                self.positions.ensure_length(bound)
                x = x + self.positions.lookup(positions)
            else:
                x = x + (self.positions(positions) if checked else self.positions.lookup(positions))
        return self.embed_dropout(x) if self.training else x

    def embed_packed(self, ids: Tensor, packing: Packing) -> Tensor:
        """The real tokens of right-padded ``(B, L)`` ids, packed (:mod:`attnlab.attention.varlen`):
        ``(1, T, d_model)``, each row's positions starting at 0."""
        positions = torch.arange(packing.length, device=ids.device).expand(packing.batch, -1)
        return self.embed_tokens(packing.pack(ids)[None], packing.pack(positions)[None], bound=packing.length)


class TokenEncoder(_Embedder):
    """Source side: ``(B, S)`` ids -> ``(memory (B, S, d), memory_mask (B, 1, 1, S))``."""

    def __init__(self, embed: TokenEmbedding, positions: nn.Module | None, stack: TransformerStack, *,
                 dropout: float, pad_id: int):
        super().__init__(embed, positions, dropout)
        self.stack = stack
        self.pad_id = pad_id

    @property
    def layers(self) -> nn.ModuleList:
        return self.stack.layers

    def forward(self, ids: Tensor, *, need_weights: bool = False):
        """Encode (no argument checks: the model checks its inputs); with ``need_weights``
        also the per-layer :class:`~attnlab.layers.blocks.LayerAttention`.

        In inference on the CPU, a right-padded batch that is at least a quarter padding is
        encoded packed (:mod:`attnlab.attention.varlen`): the products and FFN run on its
        real tokens only; the memory is the same up to float rounding at the real positions,
        and zeros at the padding (masked wherever it is read)."""
        memory_mask = key_padding_mask(ids, self.pad_id)
        if not need_weights and memory_mask is not None:
            memory = self._packed(ids, memory_mask)
            if memory is not None:
                return memory, memory_mask
        x = self.embed_tokens(ids, torch.arange(ids.shape[1], device=ids.device), bound=ids.shape[1])
        memory, weights = self.stack(x, self_mask=memory_mask, need_weights=need_weights)
        return (memory, memory_mask, weights) if need_weights else (memory, memory_mask)

    def _packed(self, ids: Tensor, memory_mask: Tensor) -> Tensor | None:
        """The memory of a padded batch encoded on its real tokens, or None where that is not
        worth it or not possible (training, a GPU, a graph being captured, little padding, left
        padding, a pattern without variable lengths). 32 multi30k sources (half padding), one thread: the
        encoder's products 1,024 -> 515 rows."""
        if self.training or ids.device.type != "cpu" or torch.is_grad_enabled() or capturing() \
                or not all(getattr(layer.self_attn.pattern, "varlen", False) for layer in self.stack.layers):
            return None
        real = memory_mask.view(ids.shape)
        if 4 * int(real.sum()) > 3 * real.numel():
            return None
        try:
            packing = pack_right_padded(real)
        except ValueError:  # left padding
            return None
        return packing.unpack(self.packed_memory(ids, packing)[0])

    def packed_memory(self, ids: Tensor, packing: Packing) -> Tensor:
        """The memory of right-padded ``ids``' real tokens only, packed: ``(1, T, d_model)``."""
        return self.stack(self.embed_packed(ids, packing), self_mask=Segments(packing, packing))[0]


class TokenDecoder(DecodeCaches, _Embedder):
    """Target side: ids -> next-token logits, through a causal stack.

    Args:
        embed: the target token embedding (the head is tied to it when ``tie_head``).
        positions: the position module (None: no positions).
        stack: the layers (with cross-attention for an encoder–decoder).
        head: the output projection, or None to tie it to ``embed``.
        dropout: dropout on the embeddings.
        head_bias: give the tied head a bias (zeros; Marian's ``final_logits_bias``).
        suppress_ids: token ids decoding never proposes: :meth:`suppress` gives them -inf logits,
            as :meth:`step` and :meth:`forward` with a cache do (without a cache, teacher
            forcing, the logits are left as computed).
    """

    def __init__(self, embed: TokenEmbedding, positions: nn.Module | None, stack: TransformerStack, *,
                 dropout: float, head: nn.Linear | None = None, head_bias: bool = False,
                 suppress_ids: list[int] | None = None):
        super().__init__(embed, positions, dropout)
        self.stack = stack
        self.head = head if head is not None else Linear(embed.d_model, embed.vocab_size, bias=head_bias)
        if head is None:
            self.head.weight = embed.weight
            if head_bias:
                nn.init.zeros_(self.head.bias)
        if suppress_ids:
            self.register_buffer("suppress_ids", torch.tensor(sorted(set(suppress_ids)), dtype=torch.long),
                                 persistent=False)
        else:
            self.suppress_ids = None

    def suppress(self, logits: Tensor) -> Tensor:
        """``logits`` (``(..., V)``) with the suppressed ids' entries set to -inf (a new tensor;
        ``logits`` itself when nothing is suppressed)."""
        if self.suppress_ids is None:
            return logits
        return logits.index_fill(-1, self.suppress_ids, float("-inf"))

    @property
    def layers(self) -> nn.ModuleList:
        return self.stack.layers

    @property
    def max_positions(self) -> int | None:
        """The longest input the positions allow (a learned table), None when unbounded."""
        return getattr(self.positions, "max_positions", None)

    def new_cache(self, batch: int, capacity: int, *, fixed_shape: bool = False) -> StaticKVCache:
        """A preallocated cache for ``batch`` rows and ``capacity`` positions (see StaticKVCache)."""
        if self.positions is not None:
            self.positions.ensure_length(capacity)  # steps look positions up unchecked
        self._step_head()  # current for this cache's steps (a compiled step reads it unchecked)
        return self.stack.new_static_cache(batch, capacity, fixed_shape=fixed_shape)

    def new_search_cache(self, memory: Tensor, rows_per_source: int, capacity: int, *,
                         fixed_shape: bool = False, memory_keys_values: list[Tensor] | None = None) -> StaticKVCache:
        """A preallocated cache for decoding ``rows_per_source`` consecutive rows per source
        of ``memory`` ``(B, S, d_model)`` (beam search: the ``k`` hypotheses of a source) with
        :meth:`step`, for up to ``capacity`` positions. Every cross-attention layer's keys
        and values are computed here, once per source, and kept one row per source: the
        step's cross-attention reads a source's row for all of its decoder rows (so
        :meth:`step` then takes a ``memory_mask`` with one row per source too). ``fixed_shape``:
        see :class:`StaticKVCache` (an ahead-of-time compiled search step, generation/aot.py).
        ``memory_keys_values``: :meth:`memory_keys_values` of ``memory`` where the caller has them (an
        encoder package, :func:`~attnlab.generation.aot.aot_encode`)."""
        cache = self.new_cache(memory.shape[0] * rows_per_source, capacity, fixed_shape=fixed_shape)
        if memory_keys_values is None:
            memory_keys_values = self.memory_keys_values(memory)
        for layer, layer_cache, kv in zip(self.stack.layers, cache.layers, memory_keys_values):
            k, v = layer.cross_attn._split_heads(kv, 2).unbind(0)  # (B, H, S, D) each
            layer_cache.cross_attn.set(k, v)
        return cache

    def memory_keys_values(self, memory: Tensor) -> list[Tensor]:
        """Each cross-attention layer's keys and values of ``memory`` ``(B, S, d_model)``: one product
        ``(B, S, 2·d_model)`` each (the key and value rows of its joint projection), in layer order."""
        products = []
        for layer in self.stack.layers:
            d = layer.cross_attn.d_model
            products.append(linear_rows(layer.cross_attn.qkv_proj, memory, d, 3 * d))
        return products

    def new_growing_cache(self, capacity: int = 64) -> StackCache:
        """A cache that grows and can drop or reorder rows (search)."""
        return self.stack.new_cache(capacity)

    def forward(self, ids: Tensor, positions: Tensor, *, self_mask: Tensor | None = None,
                memory: Tensor | None = None, memory_mask: Tensor | None = None, cache=None,
                need_weights: bool = False, positions_bound: int | None = None):
        """``(B, T)`` ids at ``positions`` -> logits ``(B, T, V)`` (and per-layer weights if asked).

        With a ``cache``, the ids are the T positions after those cached. ``positions_bound``:
        see :meth:`embed_tokens` (``bound``)."""
        hidden, weights = self.stack(self.embed_tokens(ids, positions, bound=positions_bound), self_mask=self_mask,
                                     memory=memory,
                                     memory_mask=memory_mask, cache=cache, need_weights=need_weights)
        logits = self.head(hidden)
        if cache is not None and self.suppress_ids is not None:
            logits = self.suppress(logits)  # decoding never proposes them (teacher forcing keeps the raw logits)
        return (logits, weights) if need_weights else logits

    def step(self, tokens: Tensor, cache: StaticKVCache, memory_mask: Tensor | None = None) -> Tensor:
        """One new token per row ``(B,)`` -> next-token logits ``(B, V)``, extending ``cache``.

        The same layers as :meth:`forward`, without argument checks or host syncs: the token
        sits at ``cache.positions`` (advanced here), its keys and values go into the cache.
        The caller keeps the cache within its capacity and the positions within the table.
        """
        return self.step_logits(self.step_hidden(tokens, cache, memory_mask))

    def step_hidden(self, tokens: Tensor, cache: StaticKVCache, memory_mask: Tensor | None = None) -> Tensor:
        """:meth:`step` up to the head: the last layer's output ``(B, d_model)`` for the new tokens."""
        positions = cache.positions
        x = self.embed_tokens(tokens.unsqueeze(1), positions.unsqueeze(1), checked=False)  # (B, 1, d_model)
        hidden = self.stack.step(x, cache, memory_mask)
        cache.step_positions()
        return hidden.squeeze(1)

    def step_logits(self, hidden: Tensor) -> Tensor:
        """The head of :meth:`step`: ``(B, d_model)`` -> logits ``(B, V)`` (``suppress_ids`` at -inf)."""
        bias = self.head.bias
        # A few rows (beam search) go to oneDNN (attnlab.linear.skinny_linear); one row, or many,
        # multiply the transposed copy. Compiled (attnlab.generation.compiled), the copy made by
        # new_cache is read as it is: the staleness check compares data pointers, which a compiled
        # step cannot.
        if onednn_rows(hidden.shape[0]):
            head = None
        else:
            head = self._step_head_copy if torch.compiler.is_compiling() else self._step_head()
        if head is None:
            logits = skinny_linear(hidden, self.head.weight, bias)  # (B, V)
        elif bias is None:
            logits = torch.mm(hidden, head)
        else:
            logits = torch.addmm(bias, hidden, head)
        return logits if self.suppress_ids is None else logits.index_fill_(-1, self.suppress_ids, float("-inf"))

    def greedy_step(self, tokens: Tensor, cache: StaticKVCache) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`step` for greedy decoding with the head screened in int8 (:mod:`attnlab.head_screen`):
        ``(next_tokens, sure, hidden)``, ``next_tokens`` the logits' argmax where ``sure``, else to be
        resolved from ``hidden`` by :meth:`step_logits` (:func:`attnlab.head_screen.resolve`). Eagerly it
        makes the screen current (:meth:`greedy_screen`; a head it does not screen: the whole product,
        every row sure); exported, it reads the screen as the caller made it."""
        hidden = self.step_hidden(tokens, cache)
        screen = self._greedy_screen if torch.compiler.is_compiling() else self.greedy_screen()
        if screen is None:
            return self.step_logits(hidden).argmax(dim=-1), torch.ones_like(tokens, dtype=torch.bool), hidden
        head = self.head
        next_tokens, sure = head_screen.screened_argmax(hidden, head.weight, head.bias, screen, self.suppress_ids)
        return next_tokens, sure, hidden

    def greedy_screen(self) -> head_screen.HeadScreen | None:
        """The head's int8 screen for :meth:`greedy_step`, made on first use and again whenever the
        head's weight or bias changes (their version counters); None where the head is not screened:
        not a float32 CPU weight of at least :data:`~attnlab.head_screen.MIN_VOCABULARY` rows, or a CPU
        whose ``torch._int_mm`` does not sum exactly and fast (:func:`attnlab.quantize.integer_sums_pay`)."""
        weight, bias = self.head.weight, self.head.bias
        if not (isinstance(weight, nn.Parameter) and weight.device.type == "cpu" and weight.dtype == torch.float32
                and weight.shape[0] >= head_screen.MIN_VOCABULARY and integer_sums_pay()):
            self._greedy_screen = self._greedy_screen_key = None
            return None
        key = (derived_key(weight), None if bias is None else derived_key(bias))
        if self._greedy_screen_key != key:
            self._greedy_screen = head_screen.HeadScreen(weight, bias)
            self._greedy_screen_key = key
        return self._greedy_screen

    _step_head_copy = None
    _step_head_key = None
    _greedy_screen = None
    _greedy_screen_key = None
    _decode_caches = ("_step_head_copy", "_step_head_key", "_greedy_screen", "_greedy_screen_key")

    def _step_head(self) -> Tensor | None:
        """On the CPU, the head's weight transposed to ``(d_model, V)`` and contiguous, for the
        decode step: the product of a few rows with the wide, tied output embedding runs 1.4-3x
        faster in that layout than ``F.linear`` on the ``(V, d_model)`` table (MKL's kernel for
        one row streams the rows of the transposed matrix; docs/benchmarks.md). The copy (one
        more V x d_model table) is made on the first step and again whenever the weight changes
        (its version counter), so it never serves stale weights. None on other devices."""
        weight = self.head.weight
        if weight.device.type != "cpu" or not isinstance(weight, nn.Parameter):
            self._step_head_copy = self._step_head_key = None
            return None  # on another device, or a quantised weight (attnlab.quantize): F.linear
        key = derived_key(weight)
        if self._step_head_key != key:
            self._step_head_copy = weight.detach().t().contiguous()
            self._step_head_key = key
        return self._step_head_copy
