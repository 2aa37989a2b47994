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

import weakref
from collections import OrderedDict

import torch
from torch import Tensor

from attnlab.attention.cache import StaticKVCache
from attnlab.generation.hypotheses import Hypothesis, check_beam_arguments, length_penalty, max_lengths

__all__ = ["BeamGraphs", "GreedyGraphs", "beam_graphs", "beam_search_fixed_shape", "greedy_fixed_shape",
           "greedy_graphs"]


def greedy_fixed_shape(model, ids: Tensor, mask: Tensor | None, max_new_tokens: int, *,
                       use_graph: bool | None = None) -> Tensor:
    """Greedy continuation of left-padded prompts ``ids`` ``(B, L)`` (``mask``: True = real
    token, None = no padding) by exactly ``max_new_tokens`` tokens; returns ``(B, N)``.

    One call, sized exactly, nothing kept (:class:`GreedyGraphs` keeps its captures for the
    next call). ``use_graph``: capture and replay a CUDA graph (default: when the model is on
    a CUDA device). The caller checks that ``L + max_new_tokens`` fits the model's context.
    """
    return GreedyGraphs(model, batch_buckets=(), length_multiple=1, max_graphs=1, use_graph=use_graph)(
        ids, mask, max_new_tokens)


class _Capture:
    """One bucket of :class:`GreedyGraphs`: its cache, its token buffer and its graph."""

    __slots__ = ("cache", "current", "graph")

    def __init__(self, cache: StaticKVCache, current: Tensor):
        self.cache, self.current, self.graph = cache, current, None


class _KeptCaptures:
    """What :class:`GreedyGraphs` and :class:`BeamGraphs` share: the bucket arithmetic, the
    least-recently-used captures (dropped when the parameters move) and a weak reference to
    the model (the per-model pools must not keep their model alive)."""

    def __init__(self, model, batch_buckets: tuple[int, ...], length_multiple: int, max_graphs: int,
                 use_graph: bool | None):
        buckets = tuple(batch_buckets)
        if any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in buckets) or list(buckets) != sorted(
                set(buckets)):
            raise ValueError(f"batch_buckets={batch_buckets!r} must be increasing positive integers")
        for name, value in (("length_multiple", length_multiple), ("max_graphs", max_graphs)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive integer")
        self._model = weakref.ref(model)
        self.batch_buckets, self.length_multiple, self.max_graphs = buckets, length_multiple, max_graphs
        self.use_graph = use_graph
        self._captures: OrderedDict[tuple, object] = OrderedDict()
        self._weights: tuple = ()

    @property
    def model(self):
        model = self._model()
        if model is None:
            raise ValueError(f"this {type(self).__name__}' model no longer exists")
        return model

    def clear(self) -> None:
        """Drop every capture (their buffers and graphs)."""
        self._captures.clear()

    def __len__(self) -> int:
        return len(self._captures)

    def _rows(self, batch: int) -> int:
        """The batch rounded up to the next bucket (beyond the last: a multiple of it)."""
        rows = next((size for size in self.batch_buckets if size >= batch), None)
        if rows is None:
            top = self.batch_buckets[-1] if self.batch_buckets else 1
            rows = -(-batch // top) * top
        return rows

    def _round(self, length: int, limit: int | None) -> int:
        """``length`` rounded up to a multiple of ``length_multiple``, at most ``limit`` (never below ``length``)."""
        rounded = -(-length // self.length_multiple) * self.length_multiple
        return rounded if limit is None else max(length, min(rounded, limit))

    def _graph_wanted(self, device) -> bool:
        use_graph = device.type == "cuda" if self.use_graph is None else self.use_graph
        if use_graph and device.type != "cuda":
            raise ValueError(f"a CUDA graph needs the model on a CUDA device, this one is on {device}")
        return use_graph

    def _kept(self, key: tuple, make):
        """The capture of ``key``, made by ``make()`` if not kept, now the most recently used."""
        weights = tuple((p.data_ptr(), p.dtype, p.device) for p in self.model.parameters())
        if weights != self._weights:  # moved or cast: the captures read the old tensors
            self._captures.clear()
            self._weights = weights
        capture = self._captures.pop(key, None)
        if capture is None:
            while len(self._captures) >= self.max_graphs:
                self._captures.popitem(last=False)
            capture = make()
        self._captures[key] = capture
        return capture


def _record(step, cache: StaticKVCache, device, undo=None) -> "torch.cuda.CUDAGraph":
    """Capture ``step`` as a CUDA graph after running it once on a side stream (capture
    wants lazy initialisations done and the allocator warm); ``undo`` then takes back what
    that run wrote, if it was not a real step. Recording does not run the kernels but moves
    the host's count of cache positions once: put back."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        step()
    torch.cuda.current_stream(device).wait_stream(stream)
    if undo is not None:
        undo()
    state = cache.snapshot()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    cache.restore(state)
    return graph


class GreedyGraphs(_KeptCaptures):
    """Greedy decoding of a causal LM by CUDA graphs that are captured once and replayed by
    every later call that falls in the same bucket.

    A graph replays fixed buffers, so each capture owns a ``fixed_shape``
    :class:`StaticKVCache` for ``rows`` × ``capacity`` positions: the batch is rounded up to
    the next of ``batch_buckets`` (beyond the last: to a multiple of it; the extra rows
    repeat the first prompt and are dropped) and prompt + new tokens up to a multiple of
    ``length_multiple`` (at most the model's ``max_positions``). A call resets its bucket's
    cache in place (count, write position, key mask; stale keys and values beyond the
    prompt stay, masked by position), prefills the prompts eagerly, and replays the step.
    At most ``max_graphs`` buckets are kept, the least recently used dropped first; each
    holds its cache (GPT-2 small, 16 rows × 1,024 positions: 1.2 GB in float32), so
    :meth:`clear` frees them. Moving or casting the model's parameters drops every capture.

    ``use_graph=False`` (and always on the CPU, by default) runs the same buckets, buffers
    and resets eagerly: what the tests check against :func:`~attnlab.generation.generate`.
    """

    def __init__(self, model, *, batch_buckets: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64),
                 length_multiple: int = 256, max_graphs: int = 4, use_graph: bool | None = None):
        super().__init__(model, batch_buckets, length_multiple, max_graphs, use_graph)

    def bucket(self, batch: int, length: int) -> tuple[int, int]:
        """``(rows, capacity)`` of the capture that serves ``batch`` prompts needing ``length`` positions."""
        return self._rows(batch), self._round(length, getattr(self.model.config, "max_positions", None))

    @torch.inference_mode()
    def __call__(self, ids: Tensor, mask: Tensor | None, max_new_tokens: int) -> Tensor:
        """:func:`greedy_fixed_shape` through this pool's captures: ``(B, N)`` new tokens."""
        batch, length = ids.shape
        device = ids.device
        use_graph = self._graph_wanted(device)
        produced = torch.empty(batch, max_new_tokens, dtype=torch.long, device=device)
        if max_new_tokens == 0:
            return produced
        capture = self._capture_for(batch, length + max_new_tokens, device, use_graph)
        cache, current = capture.cache, capture.current
        rows = current.shape[0]
        if rows > batch:  # the extra rows repeat the first prompt; their tokens are dropped
            ids = torch.cat([ids, ids[:1].expand(rows - batch, -1)])
            mask = None if mask is None else torch.cat([mask, mask[:1].expand(rows - batch, -1)])
        # Reset in place (a graph holds these very tensors): prefill writes from slot 0 and
        # sets the padding of the prompt's slots; later slots are real keys.
        cache.reset()
        current.copy_(self.model.prefill(ids, cache, mask).argmax(-1))
        produced.select(1, 0).copy_(current[:batch])
        if max_new_tokens == 1:
            return produced
        if not use_graph:
            for index in range(1, max_new_tokens):
                current.copy_(self.model.step(current, cache).argmax(-1))
                produced.select(1, index).copy_(current[:batch])
            return produced
        if capture.graph is None:
            capture.graph = self._capture_graph(capture)
        for index in range(1, max_new_tokens):
            capture.graph.replay()
            produced.select(1, index).copy_(current[:batch])
        cache.count_replayed(max_new_tokens - 1)
        return produced

    def _capture_for(self, batch: int, length: int, device, use_graph: bool) -> _Capture:
        rows, capacity = self.bucket(batch, length)

        def make() -> _Capture:
            cache = self.model.new_cache(rows, capacity, fixed_shape=True)
            cache.full_key_mask()
            return _Capture(cache, torch.zeros(rows, dtype=torch.long, device=device))

        return self._kept((rows, capacity, use_graph), make)

    def _capture_graph(self, capture: _Capture) -> "torch.cuda.CUDAGraph":
        """Capture one step (``current`` <- argmax of the step on ``current``); the warm-up
        step's writes are undone (the slot it wrote is overwritten by the next step)."""
        cache, current, model = capture.cache, capture.current, self.model
        saved, saved_current = cache.snapshot(), current.clone()

        def step() -> None:
            current.copy_(model.step(current, cache).argmax(-1))

        def undo() -> None:
            cache.restore(saved)
            current.copy_(saved_current)

        return _record(step, cache, current.device, undo)


_POOLS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def greedy_graphs(model) -> GreedyGraphs:
    """The model's :class:`GreedyGraphs` with the default buckets (made on first use, dropped
    with the model): what :func:`~attnlab.generation.generate` decodes through on a GPU."""
    pool = _POOLS.get(model)
    if pool is None:
        pool = _POOLS[model] = GreedyGraphs(model)
    return pool


def beam_search_fixed_shape(model, src_ids: Tensor, *, beam_size: int = 4, alpha: float = 0.6,
                            max_len_a: float = 1.0, max_len_b: float = 50, nbest: int = 1,
                            use_graph: bool | None = None):
    """:func:`~attnlab.generation.search.beam_search` as one fixed-shape step that a CUDA
    graph can replay: the same rules and the same hypotheses, but no host synchronisation
    between tokens and no shrinking batch. One call, sized exactly, nothing kept
    (:class:`BeamGraphs` keeps its captures for the next call).

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
    best :class:`~attnlab.generation.hypotheses.Hypothesis`, best first.
    """
    return BeamGraphs(model, batch_buckets=(), length_multiple=1, max_graphs=1, use_graph=use_graph)(
        src_ids, beam_size=beam_size, alpha=alpha, max_len_a=max_len_a, max_len_b=max_len_b, nbest=nbest)


class BeamGraphs(_KeptCaptures):
    """:func:`beam_search_fixed_shape` with its CUDA graphs kept and replayed by later calls
    that fall in the same bucket, as :class:`GreedyGraphs` does for greedy decoding.

    A bucket is (rows, beam size, steps, source length): the batch rounded up to the next
    of ``batch_buckets`` (beyond the last: a multiple of it; the extra sources repeat the
    first and are dropped), the longest output the length limits allow and the source
    length each rounded up to a multiple of ``length_multiple`` (the source with padding
    the encoder masks; both at most the model's position table). A call encodes its
    sources, copies memory and mask into its bucket's buffers, resets the search state in
    place and replays. At most ``max_graphs`` buckets are kept (least recently used
    dropped); moving or casting the parameters drops them all. ``use_graph=False`` (the
    default on the CPU) runs the same buckets and resets eagerly.
    """

    def __init__(self, model, *, batch_buckets: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64),
                 length_multiple: int = 32, max_graphs: int = 4, use_graph: bool | None = None):
        super().__init__(model, batch_buckets, length_multiple, max_graphs, use_graph)

    def __call__(self, src_ids: Tensor, *, beam_size: int = 4, alpha: float = 0.6, max_len_a: float = 1.0,
                 max_len_b: float = 50, nbest: int = 1):
        check_beam_arguments(src_ids, beam_size, nbest, max_len_a, max_len_b, alpha)
        model = self.model
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode():
                return self._search(model, src_ids, beam_size, alpha, max_len_a, max_len_b, nbest)
        finally:
            model.train(was_training)

    def _search(self, model, src_ids, k, alpha, max_len_a, max_len_b, nbest):
        device = src_ids.device
        use_graph = self._graph_wanted(device)
        batch, source_len = src_ids.shape[:2]
        rows = self._rows(batch)
        source_bucket = source_len
        if not src_ids.is_floating_point():  # token ids: longer sources are more padding, which the encoder masks
            source_bucket = self._round(source_len, getattr(model.config, "max_positions", None))
        src = src_ids
        if rows > batch:  # the extra sources repeat the first; their hypotheses are dropped
            src = torch.cat([src, src[:1].expand(rows - batch, -1)])
        if source_bucket > source_len:
            src = torch.cat([src, src.new_full((rows, source_bucket - source_len), model.config.pad_id)], 1)
        memory, memory_mask = model.encode(src)
        if memory_mask is None:
            memory_mask = torch.ones(rows, 1, 1, source_bucket, dtype=torch.bool, device=device)
        limits = max_lengths(model, memory, memory_mask, max_len_a, max_len_b)
        steps = max(limits[:batch])
        steps_bucket = self._round(steps, model.max_output_length())

        capture = self._kept((rows, k, steps_bucket, source_bucket, use_graph),
                             lambda: _BeamCapture(model, rows, k, steps_bucket, memory, device))
        fin_tokens, fin_lp, fin_len, fin_count = capture.run(model, memory, memory_mask, limits, steps, use_graph)
        results = []
        for b in range(batch):
            hyps = [Hypothesis(fin_tokens[b, j, :fin_len[b][j]].tolist(), fin_lp[b][j],
                               fin_lp[b][j] / length_penalty(fin_len[b][j], alpha)) for j in range(fin_count[b])]
            results.append(sorted(hyps, key=lambda h: h.score, reverse=True)[:nbest])
        return results


class _BeamCapture:
    """One bucket of :class:`BeamGraphs`: the search state, the decoder cache, the memory
    and its mask in buffers that every call resets in place, and the captured step."""

    def __init__(self, model, batch: int, k: int, steps: int, memory: Tensor, device):
        self.k, self.steps = k, steps  # (no reference to the model: the pool must not keep it alive)
        config = model.config
        rows = batch * k
        neg_inf = float("-inf")
        self.slots = slots = 2 * k  # at most k - 1 finished by EOS, then up to k cut at the limit; 2k: discarded
        self.state = {
            "beam_lp": torch.full((batch, k), neg_inf, device=device),
            "history": torch.zeros(rows, steps, dtype=torch.long, device=device),  # tokens of each live row
            "fin_tokens": torch.zeros(batch, slots + 1, steps, dtype=torch.long, device=device),
            "fin_lp": torch.full((batch, slots + 1), neg_inf, device=device),
            "fin_len": torch.zeros(batch, slots + 1, dtype=torch.long, device=device),
            "fin_count": torch.zeros(batch, dtype=torch.long, device=device),
            "done": torch.zeros(batch, dtype=torch.bool, device=device),
            "step": torch.zeros(1, dtype=torch.long, device=device),  # the index of the token being chosen
            "tokens": torch.full((rows,), config.bos_id, dtype=torch.long, device=device),
            "limits": torch.zeros(batch, dtype=torch.long, device=device),
        }
        self.memory = memory.new_zeros(rows, *memory.shape[1:])
        self.memory_mask = torch.zeros(rows, 1, 1, memory.shape[1], dtype=torch.bool, device=device)
        self.cache = model.decoder.new_cache(rows, steps + 1, fixed_shape=True)
        self.cross = None  # the cross-attention keys and values of every layer, kept buffers
        self.base = torch.arange(batch, device=device)[:, None] * k  # (B, 1): first row of each source
        self.positions = torch.arange(steps, device=device)
        self.batch = batch
        self.graph = None

    def _reset(self, model, memory: Tensor, memory_mask: Tensor, limits: list[int]) -> None:
        s, k = self.state, self.k
        s["beam_lp"].fill_(float("-inf")).select(1, 0).fill_(0.0)
        s["fin_lp"].fill_(float("-inf"))
        for name in ("history", "fin_tokens", "fin_len", "fin_count", "done", "step"):
            s[name].zero_()
        s["tokens"].fill_(model.config.bos_id)
        s["limits"].copy_(torch.tensor(limits, device=s["limits"].device))
        self.memory.copy_(memory.repeat_interleave(k, dim=0))
        self.memory_mask.copy_(memory_mask.expand(self.batch, *memory_mask.shape[1:]).repeat_interleave(k, dim=0))
        self.cache.reset()

    def run(self, model, memory: Tensor, memory_mask: Tensor, limits: list[int], steps: int, use_graph: bool):
        """Search the encoded ``memory`` of this bucket's batch; returns the finished
        hypotheses (host copies: tokens, log-probabilities, lengths, counts)."""
        decoder, cache, s = model.decoder, self.cache, self.state
        self._reset(model, memory, memory_mask, limits)
        config, k, batch, slots, positions, base = model.config, self.k, self.batch, self.slots, self.positions, self.base
        width = self.steps
        rows = batch * k
        neg_inf = float("-inf")

        def choose(logits: Tensor) -> None:
            """One token of the search from the step's logits ``(B·k, V)``: the eager search's
            rules on fixed shapes (masks instead of Python lists)."""
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
                s["fin_tokens"].scatter_(1, slot[:, :, None].expand(-1, -1, width), tokens)
                s["fin_lp"].scatter_(1, slot, log_probs)
                s["fin_len"].scatter_(1, slot, length.expand_as(slot))
                s["fin_count"] += accept.long().sum(1)

            # EOS continuations among the best k finish, in rank order, while a source has < k.
            first = min(k, top_lp.shape[1])
            ended = s["history"][(base + top_beam[:, :first]).view(-1)].view(batch, first, width)
            finish(is_eos[:, :first] & (top_lp[:, :first] > neg_inf) & live,
                   torch.where(positions == step, config.eos_id, ended), top_lp[:, :first], k)
            # The best k continuations that do not end in EOS survive.
            beam_lp, pick = top_lp.masked_fill(is_eos, neg_inf).topk(k, dim=1)
            next_beam = top_beam.gather(1, pick)
            next_token = top_token.gather(1, pick)
            origin = (base + next_beam).view(-1)
            survivors = s["history"][origin].view(batch, k, width)
            survivors = torch.where(positions == step, next_token[:, :, None], survivors)
            # Sources at their length limit (still under k finished) finish their live rows as they
            # stand, all of them (up to 2k - 1 finished, as the eager search keeps).
            cut = live[:, 0] & (s["fin_count"] < k) & (length >= s["limits"])  # (B,)
            finish(cut[:, None] & (beam_lp > neg_inf), survivors, beam_lp, slots)
            s["done"] |= (s["fin_count"] >= k) | cut
            # The survivors' rows: their history and their cached keys and values (in place).
            s["history"].copy_(survivors.view(rows, width))
            s["beam_lp"].copy_(beam_lp)
            s["tokens"].copy_(next_token.view(-1))
            for kv in cache.kv:
                kv.copy_(kv.index_select(1, origin))
            s["step"] += 1

        # The first token: BOS through the layers with the memory. It computes the
        # cross-attention keys and values; a kept capture's graph reads them from the
        # buffers of its first call, so later calls copy theirs in.
        for layer in cache.layers:
            layer.cross_attn.k = layer.cross_attn.v = None
        logits = decoder(s["tokens"][:, None], torch.zeros(1, dtype=torch.long, device=self.memory.device),
                         memory=self.memory, memory_mask=self.memory_mask, cache=cache, positions_bound=1)[:, -1]
        computed = [(layer.cross_attn.k, layer.cross_attn.v) for layer in cache.layers]
        if self.cross is None:
            self.cross = computed
        else:
            for (k_kept, v_kept), (k_new, v_new) in zip(self.cross, computed):
                k_kept.copy_(k_new)
                v_kept.copy_(v_new)
            for layer, (k_kept, v_kept) in zip(cache.layers, self.cross):
                layer.cross_attn.k, layer.cross_attn.v = k_kept, v_kept
        cache.set_positions(1)
        choose(logits)

        def step() -> None:
            choose(decoder.step(s["tokens"], cache, self.memory_mask))

        if not use_graph:
            for _ in range(1, steps):
                if bool(s["done"].all()):
                    break
                step()
        elif steps > 1:
            first = 1
            if self.graph is None:  # the second token runs eagerly (the warm-up), then the capture
                self.graph = _record(step, cache, self.memory.device)
                first = 2
            for index in range(first, steps):
                if index % 8 == 0 and bool(s["done"].all()):
                    break
                self.graph.replay()
                cache.count_replayed(1)

        return (s["fin_tokens"].cpu(), s["fin_lp"].tolist(), s["fin_len"].tolist(), s["fin_count"].tolist())


_BEAM_POOLS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def beam_graphs(model) -> BeamGraphs:
    """The model's :class:`BeamGraphs` with the default buckets (made on first use, dropped
    with the model): what ``beam_search(cuda_graph=True)`` searches through."""
    pool = _BEAM_POOLS.get(model)
    if pool is None:
        pool = _BEAM_POOLS[model] = BeamGraphs(model)
    return pool
