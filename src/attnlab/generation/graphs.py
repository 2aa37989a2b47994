"""Greedy decoding of a causal LM, and beam search of an encoder–decoder, as one replayed
CUDA graph per token.

On a GPU a one-token decode step of a small model is a few hundred tiny kernels, and the
time goes to launching them from Python, not to the arithmetic. Here the step of the one
decoding road (:meth:`CausalLM.step` over a ``fixed_shape`` :class:`StaticKVCache`: every
step the same kernels on the same buffers, the write position a device tensor) and the
argmax are captured once into a CUDA graph and replayed for each new token: one launch per
token, no host synchronisation until the tokens are read at the end.

The same function runs eagerly (``use_graph=False``, and always on the CPU): the graph
only replays what the eager loop computes, so the CPU tests of the loop cover its logic and
a GPU test checks that replay gives the eager tokens. :func:`beam_search_fixed_shape` does the
same for the encoder–decoder beam search: its eager form is tested on the CPU against
:func:`~attnlab.generation.search.beam_search`, hypothesis for hypothesis.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.generation.search import Hypothesis, _check_beam_arguments, _max_lengths, length_penalty

__all__ = ["beam_search_fixed_shape", "greedy_fixed_shape"]


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


@torch.no_grad()
def beam_search_fixed_shape(model, src_ids: Tensor, *, beam_size: int = 4, alpha: float = 0.6,
                            max_len_a: float = 1.0, max_len_b: float = 50, nbest: int = 1,
                            use_graph: bool | None = None):
    """:func:`~attnlab.generation.search.beam_search` as one fixed-shape step that a CUDA
    graph can replay: the same rules and the same hypotheses, but no host synchronisation
    between tokens and no shrinking batch.

    Every source keeps its ``k`` rows to the end (a finished source's rows run on, their
    results unused); the finished hypotheses live on the device in ``2k`` slots per source,
    filled in the order the eager search appends them (so its stable sort by score gives
    the same n-best lists); the cache is a ``fixed_shape`` :class:`StaticKVCache` whose rows
    are reordered in place. The first token (which also fills the cross-attention keys and
    values) runs eagerly; every later token is one :meth:`TokenDecoder.step` plus the
    bookkeeping, eagerly (``use_graph=False``, and always on the CPU) or replayed from one
    captured CUDA graph. Graph replay stops early only when every source has finished, which
    the host checks every 8 tokens.

    Needs an encoder–decoder whose ``decoder`` has ``new_cache(batch, capacity,
    fixed_shape=True)`` and ``step`` (the Transformer). Returns, per source, the ``nbest``
    best :class:`~attnlab.generation.search.Hypothesis`, best first.
    """
    _check_beam_arguments(src_ids, beam_size, nbest, max_len_a, max_len_b, alpha)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            return _beam_fixed(model, src_ids, beam_size, alpha, max_len_a, max_len_b, nbest, use_graph)
    finally:
        model.train(was_training)


def _beam_fixed(model, src_ids, k, alpha, max_len_a, max_len_b, nbest, use_graph):
    config, decoder = model.config, model.decoder
    memory, memory_mask = model.encode(src_ids)
    device = memory.device
    if use_graph is None:
        use_graph = device.type == "cuda"
    elif use_graph and device.type != "cuda":
        raise ValueError(f"a CUDA graph needs the model on a CUDA device, this one is on {device}")
    batch, rows = memory.shape[0], memory.shape[0] * k
    limits_list = _max_lengths(model, memory, memory_mask, max_len_a, max_len_b)
    steps = max(limits_list)
    limits = torch.tensor(limits_list, device=device)
    memory = memory.repeat_interleave(k, dim=0)
    if memory_mask is not None:
        memory_mask = memory_mask.expand(batch, *memory_mask.shape[1:]).repeat_interleave(k, dim=0)
    neg_inf = float("-inf")
    slots = 2 * k  # at most k - 1 finished by EOS, then up to k cut at the length limit; slot 2k: discarded writes
    state = {
        "beam_lp": torch.full((batch, k), neg_inf, device=device).index_fill_(1, torch.tensor([0], device=device), 0.0),
        "history": torch.zeros(rows, steps, dtype=torch.long, device=device),  # tokens of each live row
        "fin_tokens": torch.zeros(batch, slots + 1, steps, dtype=torch.long, device=device),
        "fin_lp": torch.full((batch, slots + 1), neg_inf, device=device),
        "fin_len": torch.zeros(batch, slots + 1, dtype=torch.long, device=device),
        "fin_count": torch.zeros(batch, dtype=torch.long, device=device),
        "done": torch.zeros(batch, dtype=torch.bool, device=device),
        "step": torch.zeros(1, dtype=torch.long, device=device),  # the index of the token being chosen
        "tokens": torch.full((rows,), config.bos_id, dtype=torch.long, device=device),
    }
    cache = decoder.new_cache(rows, steps + 1, fixed_shape=True)
    base = torch.arange(batch, device=device)[:, None] * k  # (B, 1): first row of each source
    positions = torch.arange(steps, device=device)

    def choose(logits: Tensor) -> None:
        """One token of the search from the step's logits ``(B·k, V)``: the eager search's
        rules on fixed shapes (masks instead of Python lists)."""
        s = state
        step = s["step"]
        length = step + 1
        log_probs = torch.log_softmax(logits.float(), dim=-1).view(batch, k, -1)
        vocab = log_probs.shape[-1]
        candidates = (s["beam_lp"][:, :, None] + log_probs).view(batch, k * vocab)
        top_lp, top_index = candidates.topk(min(2 * k, k * vocab), dim=1)
        top_beam, top_token = top_index // vocab, top_index % vocab
        is_eos = top_token == config.eos_id
        live = ~s["done"][:, None]

        def finish(eligible: Tensor, tokens: Tensor, log_probs: Tensor, most: int) -> None:
            """Append the ``eligible`` candidates ``(B, n)`` (their tokens ``(B, n, steps)``
            up to this step) to their sources' finished slots in rank order, while a source
            has fewer than ``most``; the others write into the discarded slot."""
            slot = s["fin_count"][:, None] + eligible.long().cumsum(1) - 1
            accept = eligible & (slot < most)
            slot = torch.where(accept, slot, slots)
            tokens = torch.where(positions > step, 0, tokens)
            s["fin_tokens"].scatter_(1, slot[:, :, None].expand(-1, -1, steps), tokens)
            s["fin_lp"].scatter_(1, slot, log_probs)
            s["fin_len"].scatter_(1, slot, length.expand_as(slot))
            s["fin_count"] += accept.long().sum(1)

        # EOS continuations among the best k finish, in rank order, while a source has < k.
        first = min(k, top_lp.shape[1])
        ended = s["history"][(base + top_beam[:, :first]).view(-1)].view(batch, first, steps)
        finish(is_eos[:, :first] & (top_lp[:, :first] > neg_inf) & live,
               torch.where(positions == step, config.eos_id, ended), top_lp[:, :first], k)
        # The best k continuations that do not end in EOS survive.
        beam_lp, pick = top_lp.masked_fill(is_eos, neg_inf).topk(k, dim=1)
        next_beam = top_beam.gather(1, pick)
        next_token = top_token.gather(1, pick)
        origin = (base + next_beam).view(-1)
        survivors = s["history"][origin].view(batch, k, steps)
        survivors = torch.where(positions == step, next_token[:, :, None], survivors)
        # Sources at their length limit (still under k finished) finish their live rows as they
        # stand, all of them (up to 2k - 1 finished, as the eager search keeps).
        cut = live[:, 0] & (s["fin_count"] < k) & (length >= limits)  # (B,)
        finish(cut[:, None] & (beam_lp > neg_inf), survivors, beam_lp, slots)
        s["done"] |= (s["fin_count"] >= k) | cut
        # The survivors' rows: their history and their cached keys and values (in place).
        s["history"].copy_(survivors.view(rows, steps))
        s["beam_lp"].copy_(beam_lp)
        s["tokens"].copy_(next_token.view(-1))
        for kv in cache.kv:
            kv.copy_(kv.index_select(1, origin))
        s["step"] += 1

    # The first token: BOS through the layers with the memory (fills the cross-attention caches).
    logits = decoder(state["tokens"][:, None], torch.zeros(1, dtype=torch.long, device=device), memory=memory,
                     memory_mask=memory_mask, cache=cache, positions_bound=1)[:, -1]
    cache.positions.fill_(1)
    choose(logits)

    def step() -> None:
        choose(decoder.step(state["tokens"], cache, memory_mask))

    if not use_graph:
        for _ in range(1, steps):
            if bool(state["done"].all()):
                break
            step()
    elif steps > 1:
        # The second token runs eagerly on a side stream (CUDA graph capture wants lazy
        # initialisations done and the allocator warm); the capture records the step without
        # running it (the host's count of cache positions moves once: put back).
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            step()
        torch.cuda.current_stream(device).wait_stream(stream)
        length = cache.length
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        cache.length = length
        for index in range(2, steps):
            if index % 8 == 0 and bool(state["done"].all()):
                break
            graph.replay()
            cache.length += 1

    fin_tokens = state["fin_tokens"].cpu()
    fin_lp, fin_len, fin_count = state["fin_lp"].tolist(), state["fin_len"].tolist(), state["fin_count"].tolist()
    results = []
    for b in range(batch):
        hyps = [Hypothesis(fin_tokens[b, j, :fin_len[b][j]].tolist(), fin_lp[b][j],
                           fin_lp[b][j] / length_penalty(fin_len[b][j], alpha)) for j in range(fin_count[b])]
        results.append(sorted(hyps, key=lambda h: h.score, reverse=True)[:nbest])
    return results
