"""What generation relies on, as ``typing.Protocol``\\ s: any model with these methods can be
searched or sampled, whatever its source (token ids, image features) and its parts.

* :class:`EncoderDecoder` — greedy and beam search (:mod:`attnlab.generation.search`):
  the Transformer, later captioners (an image encoder + the same
  :class:`~attnlab.models.parts.TokenDecoder`).
* :class:`CausalLM` — sampling (:mod:`attnlab.generation.sampling`): the DecoderLM.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from torch import Tensor


@runtime_checkable
class EncoderDecoder(Protocol):
    """A model that encodes a source once and decodes target tokens against it.

    ``config`` has ``bos_id`` and ``eos_id``. ``encode(source)`` takes whatever the model
    encodes (a ``(B, ...)`` batch) and returns ``(memory (B, S, d), memory_mask)``, the
    mask ``(B, 1, 1, S)`` (True = real) or None when every memory position is real.
    ``decode(tgt_ids, memory, memory_mask, cache=...)`` returns logits ``(B, T, V)``; with a
    cache from ``new_cache(capacity)`` the ids continue the cached ones and ``memory`` may
    be None after the first call. ``max_output_length()`` is the most target tokens the
    decoder can take (None: unbounded); search cuts every hypothesis there.
    """

    config: Any

    def encode(self, source) -> tuple[Tensor, Tensor | None]: ...

    def decode(self, tgt_ids: Tensor, memory: Tensor | None, memory_mask: Tensor | None, *, cache=None) -> Tensor: ...

    def new_cache(self, capacity: int = 64) -> Any: ...

    def max_output_length(self) -> int | None: ...


@runtime_checkable
class CausalLM(Protocol):
    """A decoder-only model sampled token by token.

    ``config`` has ``vocab_size``, ``max_positions`` and ``pad_id``. ``new_cache(batch,
    capacity)`` preallocates; ``prefill(ids, cache, attention_mask)`` runs a left-padded
    prompt and returns the last position's logits ``(B, V)``; ``step(tokens, cache)`` takes
    one token per row ``(B,)`` and returns the next logits ``(B, V)`` — the model's own
    layers, without argument checks or host syncs.
    """

    config: Any

    def new_cache(self, batch: int, capacity: int | None = None) -> Any: ...

    def prefill(self, ids: Tensor, cache, attention_mask: Tensor | None = None) -> Tensor: ...

    def step(self, tokens: Tensor, cache) -> Tensor: ...
