"""Greedy and beam search for encoder–decoder models, with the KV cache.

``use_cache=False`` recomputes the decoder over the whole prefix at every step instead
(the naive way, O(T²) decoder work): the same outputs, for tests and for measuring
what the cache buys (``benchmarks/translate_cache.py``).

Works with any :class:`~attnlab.generation.protocols.EncoderDecoder`: ``encode(source) ->
(memory, memory_mask)`` for any source (token ids, image features; the mask may be None),
``decode(tgt_ids, memory, memory_mask, cache=...) -> logits``, ``new_cache()``,
``max_output_length()`` and a config with ``bos_id`` and ``eos_id`` (the Transformer,
later captioners).

Scores: a hypothesis's ``log_prob`` is the sum of its tokens' log-probabilities (EOS
included); its ``score`` is ``log_prob / lp(length)`` with the GNMT length penalty
lp(L) = ((5 + L) / 6)^α (Wu et al. 2016, §7), L counting the EOS token. A hypothesis
is cut at ``max_len = ceil(a · source_length + b)`` tokens, where the source length
counts the real (unmasked) memory positions, and at the model's ``max_output_length()``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.generation.hypotheses import (Hypothesis, check_beam_arguments, check_common, length_penalty,
                                          max_lengths)
from attnlab.generation.aot import aot_capacity, aot_encode, auto_step, dynamic_capacity, use_aot
from attnlab.generation.candidates import search_candidates, top_candidates
from attnlab.generation.compiled import check_compile
from attnlab.linear import packed_inference

__all__ = ["Hypothesis", "beam_search", "greedy_search", "length_penalty", "top_candidates"]


class _Decoder:
    """One decoder step for the searches: with the KV cache (feed only the new token), or
    naively (feed the whole prefix every step, keep no state but the prefix and memory).

    ``memory`` and ``memory_mask`` come with one row per source; each source has
    ``rows_per_source`` consecutive decoder rows (beam search's k hypotheses).

    With the cache, a model that has the step path (``new_step_cache`` and ``decode_step``,
    the Transformer) decodes through it: a preallocated cache, the cross-attention keys and
    values computed once per source and read by all of its rows, no attention mask when no
    source has padding, no argument checks or module calls per step, and a first step of
    one row per source (every hypothesis starts as BOS; the rows are expanded by the first
    :meth:`reorder`). Other models (the EncoderDecoder protocol alone) go through ``decode``
    with their growing cache and a copy of the memory per row. Both give the same logits.
    """

    def __init__(self, model, memory: Tensor, memory_mask: Tensor | None, capacity: int, use_cache: bool,
                 rows_per_source: int = 1, compile: bool | str = False,
                 memory_keys_values: list[Tensor] | None = None) -> None:
        self.model = model
        self.rows_per_source = rows_per_source
        self.most_rows = memory.shape[0] * rows_per_source  # decoder rows at the start (fewer later)
        self.fast = use_cache and hasattr(model, "decode_step") and hasattr(model, "new_step_cache")
        self.expanded = True
        # compile="aot": the step compiled ahead of time (generation/aot.py) over a fixed-shape
        # cache, k rows per source from the first step.
        fixed = aot_capacity(model, capacity) if compile in ("aot", "auto") and self.fast else capacity
        self.aot = compile == "aot" and self.fast
        if compile == "auto" and self.fast:  # the package where one is built (never a build), else eager steps
            self.aot = auto_step(model, "search", rows=self.most_rows, capacity=fixed, beam=rows_per_source) or False
        if memory_mask is not None:
            memory_mask = memory_mask.expand(memory.shape[0], *memory_mask.shape[1:])
        if self.fast:
            # Eagerly one row per source to start with (the first reorder expands them); compiled,
            # k rows from the first step: its k rows are equal (the search gives all but the first
            # -inf), and a package call costs less than an eager step of one row.
            if self.aot:
                capacity = fixed
            start_rows = rows_per_source if self.aot else 1
            # (the cross-attention keys and values an encoder package gave, where it did: _encode; passed
            # only then, as the Transformer alone takes them: another model's new_step_cache need not)
            keys_values = {} if memory_keys_values is None else {"memory_keys_values": memory_keys_values}
            self.cache = model.new_step_cache(memory, rows_per_source=start_rows, capacity=capacity,
                                              fixed_shape=bool(self.aot), **keys_values)
            # A package with a dynamic capacity attends its whole buffer: the cache grows by
            # CAPACITY_STEP positions as the hypotheses do (made at full size first, so the
            # model readies its positions for all of them).
            self.capacity = capacity
            if self.aot and dynamic_capacity(model) and capacity > CAPACITY_STEP:
                self.cache.resize(CAPACITY_STEP)
            self.memory = None
            self.memory_mask = None if memory_mask is None or bool(memory_mask.all()) else memory_mask
            self.expanded = start_rows == rows_per_source
        else:
            if rows_per_source > 1:  # every row reads its own copy of its source's memory
                memory = memory.repeat_interleave(rows_per_source, dim=0)
                memory_mask = None if memory_mask is None else memory_mask.repeat_interleave(rows_per_source, dim=0)
            self.memory, self.memory_mask = memory, memory_mask
            self.cache = model.new_cache(capacity=capacity) if use_cache else None
        self.prefix = None if use_cache else memory.new_empty(memory.shape[0], 0, dtype=torch.long)
        self.device = memory.device
        self.scratch = None  # the log-probabilities' buffer, reused: a fresh (R, V) tensor a step was page-faulted in

    def _step_path(self, step_input: Tensor):
        """The step path's tokens ``(R,)`` for ``step_input`` and the package to call, or None (an
        eager step); the cache grown first where it is full."""
        tokens = step_input.view(-1) if self.expanded else step_input.view(-1, self.rows_per_source)[:, 0]
        if self.aot is True and self.expanded:
            self.aot = use_aot(self.model, "search", self.cache, beam=self.rows_per_source,
                               memory_mask=self.memory_mask) or False
            if not self.aot:  # no package (asked at the first step, the cache still empty): the eager step,
                self.cache.attend_prefix(self.capacity)  # over the filled prefix
        if self.cache.length >= self.cache.capacity and self.cache.capacity < self.capacity:
            self.cache.resize(min(self.capacity, self.cache.capacity + CAPACITY_STEP))
        return tokens, self.aot if self.aot and self.expanded and self.aot.accepts(self.cache) else None

    def step(self, step_input: Tensor) -> Tensor:
        """Log-probabilities (float32) of the position after ``step_input`` ``(R, 1)``: ``(R, V)``,
        or ``(R / k, V)`` on the step path's first step (one row per source; the k rows of a source
        are equal). The caller may write into them (until the next step). A compiled step's package
        computes them itself (:func:`~attnlab.generation.aot.log_softmax_fused`), else
        ``torch.log_softmax`` of the logits."""
        if self.fast:
            return self._step_log_probs(*self._step_path(step_input))
        if self.cache is None:
            self.prefix = torch.cat([self.prefix, step_input], dim=1)
            logits = self.model.decode(self.prefix, self.memory, self.memory_mask)
        else:
            # After the first step the cache holds the cross-attention keys/values.
            memory = self.memory if self.cache.length == 0 else None
            logits = self.model.decode(step_input, memory, self.memory_mask, cache=self.cache)
        return self._log_probs(logits[:, -1])

    def candidates(self, step_input: Tensor, beam_scores: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Beam search's step: each source's 2k best continuations after ``step_input`` ``(R, 1)``
        of its k hypotheses scored ``beam_scores`` ``(B, k)``, as scores ``(B, 2k)`` (largest first),
        the hypothesis (0..k-1) each extends and its token
        (:func:`~attnlab.generation.candidates.search_candidates`): in the package of a compiled step (its
        layout's ``candidates``), else after the step's log-probabilities."""
        if not self.fast:
            log_probs = self.step(step_input)
        else:
            tokens, package = self._step_path(step_input)
            if package is not None and package.layout.candidates:  # a beam search's package (beam > 1): 2k
                return package(tokens, self.cache, self.memory_mask, beam_scores.view(-1))
            log_probs = self._step_log_probs(tokens, package)  # beam 1: log-probabilities, as greedy's
        return search_candidates(log_probs, beam_scores.view(-1), self.rows_per_source, 2 * self.rows_per_source,
                                 in_place=True)

    def _step_log_probs(self, tokens: Tensor, package) -> Tensor:
        """The step path's log-probabilities: a package's (one of log-probabilities), else the eager step's."""
        if package is not None:
            return package(tokens, self.cache, self.memory_mask)
        return self._log_probs(self.model.decode_step(tokens, self.cache, self.memory_mask))

    def _log_probs(self, logits: Tensor) -> Tensor:
        logits = logits.float()
        rows, vocab = logits.shape
        if self.scratch is None or self.scratch.numel() < rows * vocab:
            self.scratch = logits.new_empty(max(rows, self.most_rows) * vocab)
        return torch.log_softmax(logits, dim=-1, out=self.scratch[:rows * vocab].view(rows, vocab))

    def reorder(self, origin: Tensor | None, origin_list: list[int] | None = None) -> None:
        """Row i continues the hypothesis that was row ``origin[i]`` (``origin_list``: the same
        on the host, when the caller has it; then ``origin`` may be None, made here where it is
        needed). On the step path, where as many rows go on, only the rows that extend another
        row's hypothesis are copied: none at about half of beam search's steps at one source; with
        the survivors placed by :func:`_stay_order`, 524 rows over one search of 32 multi30k-shaped
        sources, against 1,115 in score order."""
        if self.fast and self.expanded and origin_list is not None and len(origin_list) == \
                self.cache.positions.shape[0]:
            moved = [row for row, came_from in enumerate(origin_list) if came_from != row]
            if not moved:
                return
            if 2 * len(moved) < len(origin_list):  # a gather and a scatter of those rows, not a copy of all
                device = self.cache.positions.device
                self.cache.move_rows(torch.tensor(moved, device=device),
                                     torch.tensor([origin_list[row] for row in moved], device=device))
                return
        if origin is None:
            origin = torch.tensor(origin_list, device=self.device)
        if self.cache is None:
            self.prefix = self.prefix[origin]
        elif not self.expanded:  # the cache has one row per source so far
            self.cache.reorder(torch.div(origin, self.rows_per_source, rounding_mode="floor"), include_memory=False)
            self.expanded = True
        else:
            self.cache.reorder(origin, include_memory=False)

    def close(self) -> None:
        """The search is over: the step path's cache gives its memory to the next search's
        (:meth:`~attnlab.attention.cache.StaticKVCache.release`; fresh memory's page faults were ~5 %
        of a beam search over 32 multi30k-shaped sources)."""
        if self.fast:
            self.cache.release()
            self.cache = None

    def keep_sources(self, sources: Tensor) -> None:
        """Only the memory of ``sources`` (positions in the current batch) stays: whole
        sources left the batch (their decoder rows went with :meth:`reorder`)."""
        if self.fast:
            self.memory_mask = None if self.memory_mask is None else self.memory_mask[sources]
            self.cache.reorder_memory(sources)
            return
        k = self.rows_per_source
        rows = (sources[:, None] * k + torch.arange(k, device=sources.device)).view(-1)
        self.memory_mask = self.memory_mask[rows] if self.memory_mask is not None else None
        if self.cache is None:
            self.memory = self.memory[rows]
        else:
            self.cache.reorder_memory(rows)


def _stay_order(origin: list[int], k: int) -> list[int] | None:
    """Which survivor each row takes (``order[row]``, an index into ``origin``), so that as
    many survivors as can stay in the row of the hypothesis they extend: a source's k
    survivors are in any order (their scores go with them), and each row that keeps its
    hypothesis's continuation needs no copy of its keys and values. None when that is the
    order they came in."""
    order = None
    for start in range(0, len(origin), k):
        taken = [False] * k
        placed = [-1] * k  # row within the source of survivor j
        for j in range(k):
            parent = origin[start + j] - start
            if not taken[parent]:
                taken[parent], placed[j] = True, parent
        free = (row for row in range(k) if not taken[row])
        for j in range(k):
            if placed[j] < 0:
                placed[j] = next(free)
        if any(placed[j] != j for j in range(k)):
            if order is None:
                order = list(range(len(origin)))
            for j in range(k):
                order[start + placed[j]] = start + j
    return order


NEG_INF = float("-inf")

CAPACITY_STEP = 8
"""Positions a compiled search's cache grows by (its package attends the whole buffer). 8 rather than 16:
a 32-source multi30k search 1.010-1.023x as fast, and 1.017-1.059x against 4 (Zen 3 EPYC, one thread,
interleaved in one process; docs/benchmarks.md)."""

def _check_search_compile(compile, use_cache: bool) -> None:
    check_compile(compile)
    if compile is True:
        raise ValueError("compile=True (torch.compile) is not offered for search; use compile='aot'")
    if compile == "aot" and not use_cache:
        raise ValueError("compile='aot' compiles the cached step: use_cache=False cannot go with it")


def _encode(model, src_ids: Tensor, compile: bool | str) -> tuple[Tensor, Tensor | None, list[Tensor] | None]:
    """``model.encode(src_ids)``, and the cross-attention keys and values where an encoder package gave
    them (``compile="aot"``, one source: :func:`~attnlab.generation.aot.aot_encode`; ``"auto"``: where that
    package is built), else None."""
    if compile in ("aot", "auto"):
        encoded = aot_encode(model, src_ids, build=compile == "aot")
        if encoded is not None:
            return encoded
    memory, memory_mask = model.encode(src_ids)
    return memory, memory_mask, None


@torch.no_grad()
@packed_inference()
def greedy_search(model, src_ids: Tensor, *, max_len_a: float = 1.0, max_len_b: float = 50,
                  alpha: float = 0.6, use_cache: bool = True, compile: bool | str = False) -> list[Hypothesis]:
    """Pick the most probable token at every step. Returns one :class:`Hypothesis` per source.

    ``src_ids`` is whatever ``model.encode`` takes (token ids, image features, ...).
    ``compile="aot"``: see :func:`beam_search`."""
    check_common(src_ids, max_len_a, max_len_b, alpha)
    _check_search_compile(compile, use_cache)
    config = model.config
    batch = src_ids.shape[0]
    memory, memory_mask, keys_values = _encode(model, src_ids, compile)
    limits = max_lengths(model, memory, memory_mask, max_len_a, max_len_b)
    decoder = _Decoder(model, memory, memory_mask, max(limits) + 1, use_cache, compile=compile,
                       memory_keys_values=keys_values)
    step_input = torch.full((batch, 1), config.bos_id, dtype=torch.long, device=memory.device)
    tokens = [[] for _ in range(batch)]
    log_probs = [0.0] * batch
    done = [False] * batch
    for _ in range(max(limits)):
        best_log_prob, best = decoder.step(step_input).max(dim=-1)
        for i, (token, lp) in enumerate(zip(best.tolist(), best_log_prob.tolist())):
            if done[i]:
                continue
            tokens[i].append(token)
            log_probs[i] += lp
            done[i] = token == config.eos_id or len(tokens[i]) >= limits[i]
        if all(done):
            break
        step_input = best[:, None]
    decoder.close()
    return [Hypothesis(t, lp, lp / length_penalty(len(t), alpha)) for t, lp in zip(tokens, log_probs)]


@torch.no_grad()
@packed_inference()
def beam_search(model, src_ids: Tensor, *, beam_size: int = 4, alpha: float = 0.6, max_len_a: float = 1.0,
                max_len_b: float = 50, nbest: int = 1, use_cache: bool = True,
                cuda_graph: bool = False, compile: bool | str = False) -> list[list[Hypothesis]]:
    """Beam search over a batch of sources of different lengths.

    Every step expands each of the ``beam_size`` live hypotheses of a source, takes the
    2·k best continuations, moves those ending in EOS that rank among the best k into
    the finished list (scored with the length penalty), and keeps the best k that do not
    end in EOS. A source stops when it has k finished hypotheses (as fairseq and Marian
    do), or when it reaches its maximum length, where its live hypotheses are finished
    as they stand. Finished sources leave the batch, so the work shrinks as they finish.

    Returns, per source, the ``nbest`` best hypotheses by ``score``, best first.

    ``cuda_graph=True`` (a model on a CUDA device with a ``fixed_shape``-capable decoder, the
    Transformer): the same search as one fixed-shape step replayed from a captured CUDA graph
    (:func:`~attnlab.generation.graphs.beam_search_fixed_shape`): no shrinking batch and no
    host synchronisation between tokens; the captures are kept with the model, one per
    bucket of batch, output and source length (:class:`~attnlab.generation.graphs.BeamGraphs`).

    ``compile="aot"`` (a model with the step path, the Transformer): every step runs the
    decoder's step compiled ahead of time (:mod:`attnlab.generation.aot`; one package per
    model structure and beam size, for any batch, source and output length, built once into
    the user cache), over a cache that grows as the hypotheses do: the same search, the
    logits equal up to float rounding. Without a C++ compiler, or where export fails: one
    warning, eager steps. ``compile="auto"`` (``translate``'s and ``caption``'s default): that package
    (and one source's encoder package) where one is already built for this model and beam on the CPU,
    else the eager step; never a build (:func:`~attnlab.generation.aot.auto_step`).
    """
    _check_search_compile(compile, use_cache)
    if cuda_graph:
        if not use_cache:
            raise ValueError("cuda_graph=True decodes through the cache: use_cache=False cannot go with it")
        from attnlab.generation.graphs import beam_graphs

        if not src_ids.is_cuda:
            raise ValueError(f"a CUDA graph needs the model on a CUDA device, this one is on {src_ids.device}")
        return beam_graphs(model)(src_ids, beam_size=beam_size, alpha=alpha, max_len_a=max_len_a,
                                  max_len_b=max_len_b, nbest=nbest)
    check_beam_arguments(src_ids, beam_size, nbest, max_len_a, max_len_b, alpha)
    config = model.config
    batch, k = src_ids.shape[0], beam_size
    memory, memory_mask, keys_values = _encode(model, src_ids, compile)
    device = memory.device
    limits = max_lengths(model, memory, memory_mask, max_len_a, max_len_b)
    # Every hypothesis row b·k + j belongs to source b.
    decoder = _Decoder(model, memory, memory_mask, max(limits) + 1, use_cache, rows_per_source=k, compile=compile,
                       memory_keys_values=keys_values)

    active = list(range(batch))  # original index of each source still in the batch
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    # The generated tokens as back-pointers, not a (rows, length) tensor copied every step: step t
    # gave row i token tokens[t][i], extending row origins[t][i] of step t - 1 (host lists).
    tokens: list[list[int]] = []
    origins: list[list[int]] = []
    # Start with one live hypothesis per source: the other k-1 copies get -inf.
    beam_log_probs = torch.full((batch, k), NEG_INF, dtype=torch.float32, device=device)
    beam_log_probs[:, 0] = 0.0
    step_input = torch.full((batch * k, 1), config.bos_id, dtype=torch.long, device=device)
    eos = config.eos_id

    def prefix(row: int, steps: int) -> list[int]:
        """The tokens of the hypothesis in ``row`` after ``steps`` steps."""
        out = []
        for step_tokens, step_origins in zip(reversed(tokens[:steps]), reversed(origins[:steps])):
            out.append(step_tokens[row])
            row = step_origins[row]
        return out[::-1]

    for step in range(max(limits)):
        length = step + 1  # tokens per hypothesis after this step
        # The 2k best continuations of each source's k hypotheses (on a first step of one row per
        # source, only the first hypothesis is live: the others' scores are -inf).
        top_log_probs, top_beam, top_token = decoder.candidates(step_input, beam_log_probs)
        # The 2k candidates of each source on the host (3·2k numbers a source): what follows is a
        # few comparisons per source, cheaper in Python than as a dozen tensor operations.
        candidates = zip(top_log_probs.tolist(), top_beam.tolist(), top_token.tolist())
        keep, survivors = [], []
        penalty = length_penalty(length, alpha)
        for row, (source, (values, beams, next_tokens)) in enumerate(zip(active, candidates)):
            done = finished[source]
            # Finish EOS continuations that rank among the best k (sorted: best first).
            for rank in range(k):
                if next_tokens[rank] == eos and values[rank] > NEG_INF and len(done) < k:
                    done.append(Hypothesis(prefix(row * k + beams[rank], step) + [eos], values[rank],
                                           values[rank] / penalty))
            if len(done) >= k:
                continue
            # Keep the best k continuations that do not end in EOS (at most k of the 2k do: one a
            # hypothesis), as the k largest with the EOS ones at -inf would.
            chosen = [(value, beam, token) for value, beam, token in zip(values, beams, next_tokens)
                      if token != eos][:k]
            chosen += [(NEG_INF, beam, token) for beam, token in zip(beams, next_tokens)
                       if token == eos][:k - len(chosen)]
            if length >= limits[source]:  # at its length limit: its live hypotheses finish as they stand
                for value, beam, token in chosen:
                    if value > NEG_INF:
                        done.append(Hypothesis(prefix(row * k + beam, step) + [token], value, value / penalty))
                continue
            keep.append(row)
            survivors.append(chosen)
        if not keep:
            break

        # The rows the survivors extend, in this step's rows (row·k + their hypothesis).
        picked = [(row * k + beam, value, token) for row, chosen in zip(keep, survivors)
                  for value, beam, token in chosen]
        origin_list = [origin for origin, _, _ in picked]
        if len(keep) == len(active):  # no source left the batch: no row selection
            order = _stay_order(origin_list, k)
            if order is not None:  # survivors placed in their parents' rows where they can
                picked = [picked[i] for i in order]
                origin_list = [origin_list[i] for i in order]
        step_input = torch.tensor([token for _, _, token in picked], device=device).view(-1, 1)
        beam_log_probs = torch.tensor([value for _, value, _ in picked], dtype=top_log_probs.dtype,
                                      device=device).view(-1, k)
        tokens.append([token for _, _, token in picked])
        origins.append(origin_list)
        # Survivors' self-attention keys/values come from the rows they extend (one copy,
        # compacting the batch too; only the rows that moved when none left); memory rows of one
        # source are equal, so the memory is only touched when whole sources leave the batch.
        decoder.reorder(None, origin_list)  # (the rows' origins as a tensor only where it copies all)
        if len(keep) < len(active):
            decoder.keep_sources(torch.tensor(keep, device=device))
            active = [active[row] for row in keep]

    decoder.close()
    return [sorted(hyps, key=lambda h: h.score, reverse=True)[:nbest] for hyps in finished]

