"""Greedy decoding of a causal LM as one replayed CUDA graph per token.

On a GPU a one-token decode step of a small model is a few hundred tiny kernels, and the
time goes to launching them from Python, not to the arithmetic. Here the step of the one
decoding road (:meth:`CausalLM.step` over a ``fixed_shape`` :class:`StaticKVCache`: every
step the same kernels on the same buffers, the write position a device tensor) and the
argmax are captured once into a CUDA graph and replayed for each new token: one launch per
token, no host synchronisation until the tokens are read at the end.

The same function runs eagerly (``use_graph=False``, and always on the CPU): the graph
only replays what the eager loop computes, so the CPU tests of the loop cover its logic and
a GPU test checks that replay gives the eager tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["greedy_fixed_shape"]


@torch.inference_mode()
def greedy_fixed_shape(model, ids: Tensor, mask: Tensor | None, max_new_tokens: int, *,
                       use_graph: bool | None = None) -> Tensor:
    """Greedy continuation of left-padded prompts ``ids`` ``(B, L)`` (``mask``: True = real
    token, None = no padding) by exactly ``max_new_tokens`` tokens; returns ``(B, N)``.

    ``use_graph``: capture and replay a CUDA graph (default: when the model is on a CUDA
    device). The caller checks that ``L + max_new_tokens`` fits the model's context.
    """
    batch = ids.shape[0]
    device = ids.device
    if use_graph is None:
        use_graph = device.type == "cuda"
    produced = torch.empty(batch, max_new_tokens, dtype=torch.long, device=device)
    if max_new_tokens == 0:
        return produced
    cache = model.new_cache(batch, ids.shape[1] + max_new_tokens, fixed_shape=True)
    tokens = model.prefill(ids, cache, mask).argmax(-1)  # (B,)
    produced.select(1, 0).copy_(tokens)
    if max_new_tokens == 1:
        return produced
    if not use_graph:
        for index in range(1, max_new_tokens):
            tokens = model.step(tokens, cache).argmax(-1)
            produced.select(1, index).copy_(tokens)
        return produced

    current = tokens.clone()  # the graph's input and output: it overwrites it with the next token

    def step() -> None:
        current.copy_(model.step(current, cache).argmax(-1))

    # Warm up on a side stream (as CUDA graph capture requires: lazy initialisations and the
    # allocator's first blocks), then undo what the warm-up step wrote: the write position,
    # the positions and the host's count (the slot it wrote is overwritten by the next step).
    saved = (cache.write_index.clone(), cache.positions.clone(), cache.length, current.clone())
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        step()
    torch.cuda.current_stream(device).wait_stream(stream)
    cache.write_index.copy_(saved[0])
    cache.positions.copy_(saved[1])
    cache.length = saved[2]
    current.copy_(saved[3])

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # records the kernels; nothing runs (the host count moves once)
        step()
    cache.length = saved[2]
    for index in range(1, max_new_tokens):
        graph.replay()
        produced.select(1, index).copy_(current)
    cache.length += max_new_tokens - 1
    return produced
