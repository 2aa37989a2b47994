"""Greedy and beam search: agreement with each other, with the model's own scores, with
exhaustive search, and with themselves across batching; lengths, EOS and bad arguments."""

from __future__ import annotations

import functools
import itertools
import math

import pytest
import torch

import attnlab
from attnlab.generation import Hypothesis, beam_search, greedy_search, length_penalty

PAD, BOS, EOS = 0, 1, 2
VOCAB = 16
LENGTHS = [7, 2, 5, 1, 4, 6]


@functools.cache
def tiny_model(seed: int, vocab: int = VOCAB, **overrides):
    torch.manual_seed(seed)
    model = attnlab.create_model("transformer_tiny", vocab_size=vocab, **overrides).eval()
    with torch.no_grad():  # sharper, less uniform distributions than the fresh initialisation
        for name, parameter in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                parameter.add_(0.3 * torch.randn_like(parameter))
    return model


def sources(lengths: list[int], seed: int = 0, vocab: int = VOCAB) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.full((len(lengths), max(lengths)), PAD, dtype=torch.long)
    for row, length in enumerate(lengths):
        ids[row, :length] = torch.randint(3, vocab, (length,), generator=generator)
    return ids


class EOSBias:
    """A model whose EOS logit gets ``bias(step)`` added: +inf-like forces EOS, -inf forbids
    it, a moderate value makes hypotheses end at scattered steps. Search functions only use
    ``encode``, ``decode``, ``new_cache``, ``max_output_length`` and ``config``."""

    def __init__(self, model, bias):
        self.model, self.bias, self.config = model, bias, model.config

    def encode(self, src_ids):
        return self.model.encode(src_ids)

    def new_cache(self, capacity: int = 64):
        return self.model.new_cache(capacity)

    def max_output_length(self):
        return self.model.max_output_length()

    def decode(self, tgt_ids, memory, memory_mask, *, cache=None):
        first = cache.length if cache is not None else 0  # position of tgt_ids[:, 0]
        logits = self.model.decode(tgt_ids, memory, memory_mask, cache=cache).clone()
        for offset in range(tgt_ids.shape[1]):
            logits[:, offset, EOS] += self.bias(first + offset)
        return logits


def log_prob_of(model, src_row: torch.Tensor, tokens: list[int]) -> float:
    """Teacher-forced log-probability of ``tokens`` given one unpadded source, in float64."""
    tgt_in = torch.tensor([[BOS] + tokens[:-1]])
    with torch.no_grad():
        memory, memory_mask = model.encode(src_row[None])
        logits = model.decode(tgt_in, memory, memory_mask)
    log_probs = torch.log_softmax(logits[0].double(), dim=-1)
    return float(log_probs[torch.arange(len(tokens)), torch.tensor(tokens)].sum())


def unpadded(src: torch.Tensor, row: int) -> torch.Tensor:
    return src[row][src[row] != PAD]


def limit_for(src: torch.Tensor, row: int, a: float, b: float) -> int:
    return max(1, math.ceil(a * len(unpadded(src, row)) + b))


def assert_same_hypotheses(actual: list[Hypothesis], expected: list[Hypothesis]) -> None:
    assert [h.tokens for h in actual] == [h.tokens for h in expected]
    for a, e in zip(actual, expected):
        # Greedy sums log-probabilities in float64, beam search in float32: allow float32 rounding.
        assert a.log_prob == pytest.approx(e.log_prob, rel=1e-5, abs=1e-5)
        assert a.score == pytest.approx(e.score, rel=1e-5, abs=1e-5)


# -- beam 1 == greedy; beam >= greedy ----------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
def test_beam_size_one_equals_greedy(seed, alpha):
    model = tiny_model(seed)
    src = sources(LENGTHS, seed)
    greedy = greedy_search(model, src, alpha=alpha, max_len_b=6)
    beam = beam_search(model, src, beam_size=1, alpha=alpha, max_len_b=6)
    assert len(greedy) == len(beam) == len(LENGTHS)
    assert_same_hypotheses([b[0] for b in beam], greedy)


@pytest.mark.parametrize("seed", [0, 1])
def test_beam_size_one_equals_greedy_when_eos_is_likely(seed):
    """Sources finish at different steps, so the batch shrinks while decoding."""
    model = EOSBias(tiny_model(seed), lambda step: 1.0)
    src = sources(LENGTHS, seed + 10)
    greedy = greedy_search(model, src, max_len_b=8)
    assert len({len(h.tokens) for h in greedy}) > 1
    assert_same_hypotheses([b[0] for b in beam_search(model, src, beam_size=1, max_len_b=8)], greedy)


@pytest.mark.parametrize("seed", range(6))
def test_best_beam_score_is_never_below_greedy(seed):
    model = tiny_model(seed, **({"norm_first": True} if seed % 2 else {}))
    src = sources(LENGTHS, seed)
    for alpha in (0.0, 0.6):
        greedy = greedy_search(model, src, alpha=alpha, max_len_b=5)
        for k in (2, 4):
            beam = beam_search(model, src, beam_size=k, alpha=alpha, max_len_b=5)
            for g, b in zip(greedy, beam):
                assert b[0].score >= g.score - 1e-5 * max(1.0, abs(g.score)), (alpha, k, g, b[0])


# -- what a hypothesis is ----------------------------------------------------------------------
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_hypothesis_log_probs_are_the_models_and_scores_are_length_normalised(alpha):
    """Recomputing every n-best hypothesis by teacher forcing gives its log_prob: this checks
    the bookkeeping of beam search (history, cache reordering, batch shrinking)."""
    model = EOSBias(tiny_model(3), lambda step: 1.5)
    src = sources(LENGTHS, 3)
    results = beam_search(model, src, beam_size=4, nbest=4, alpha=alpha, max_len_b=6)
    for row, hypotheses in enumerate(results):
        for h in hypotheses:
            assert h.log_prob == pytest.approx(log_prob_of(model, unpadded(src, row), h.tokens), abs=1e-4)
            assert h.score == pytest.approx(h.log_prob / length_penalty(len(h.tokens), alpha), rel=1e-6)
    for row, h in enumerate(greedy_search(model, src, alpha=alpha, max_len_b=6)):
        assert h.log_prob == pytest.approx(log_prob_of(model, unpadded(src, row), h.tokens), abs=1e-4)


@pytest.mark.parametrize("nbest", [1, 3, 5])
def test_nbest_lists_are_sorted_distinct_and_complete(nbest):
    model = EOSBias(tiny_model(4), lambda step: 1.0)
    results = beam_search(model, sources(LENGTHS, 4), beam_size=5, nbest=nbest, max_len_b=5)
    assert len(results) == len(LENGTHS)
    for hypotheses in results:
        assert len(hypotheses) == nbest
        scores = [h.score for h in hypotheses]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in hypotheses}) == nbest
        assert all(math.isfinite(s) for s in scores)


@pytest.mark.parametrize("a, b", [(1.0, 0.0), (1.5, 2.0), (0.0, 3.0), (0.5, 1.0), (0.5, 0.0), (0.3, 0.2)])
def test_maximum_length_is_a_times_source_length_plus_b_per_source(a, b):
    """With EOS forbidden every hypothesis runs to its own source's limit, counting only
    the non-pad source tokens."""
    model = EOSBias(tiny_model(5), lambda step: float("-inf"))
    src = sources(LENGTHS, 5)
    limits = [limit_for(src, row, a, b) for row in range(len(LENGTHS))]
    assert len(set(limits)) > 1 or a == 0
    for row, h in enumerate(greedy_search(model, src, max_len_a=a, max_len_b=b)):
        assert len(h.tokens) == limits[row] and EOS not in h.tokens
    for row, hypotheses in enumerate(beam_search(model, src, beam_size=3, nbest=3, max_len_a=a, max_len_b=b)):
        assert [len(h.tokens) for h in hypotheses] == [limits[row]] * 3
        assert all(EOS not in h.tokens for h in hypotheses)


def test_hypotheses_end_with_eos_unless_cut_at_the_maximum_length():
    model = EOSBias(tiny_model(6), lambda step: 2.0)
    src = sources(LENGTHS, 6)
    a, b = 1.0, 3.0
    greedy = greedy_search(model, src, max_len_a=a, max_len_b=b)
    beam = beam_search(model, src, beam_size=4, nbest=4, max_len_a=a, max_len_b=b)
    ended = cut = 0
    for row in range(len(LENGTHS)):
        limit = limit_for(src, row, a, b)
        for h in [greedy[row], *beam[row]]:
            assert 1 <= len(h.tokens) <= limit
            assert EOS not in h.tokens[:-1], "nothing follows EOS"
            assert h.tokens[-1] == EOS or len(h.tokens) == limit
            ended += h.tokens[-1] == EOS
            cut += h.tokens[-1] != EOS
    assert ended and cut  # both cases really occurred


@pytest.mark.parametrize("eos_step", [1, 3])
def test_forced_eos_ends_every_hypothesis_there(eos_step):
    model = EOSBias(tiny_model(7), lambda step: 1e4 if step == eos_step else float("-inf"))
    src = sources(LENGTHS, 7)
    for h in greedy_search(model, src):
        assert len(h.tokens) == eos_step + 1 and h.tokens[-1] == EOS
    for hypotheses in beam_search(model, src, beam_size=3, nbest=3):
        assert all(len(h.tokens) == eos_step + 1 and h.tokens[-1] == EOS for h in hypotheses)


def test_eos_at_the_first_step_leaves_only_cut_alternatives():
    """At step 0 only one hypothesis is live, so EOS finishes one output; with EOS
    impossible afterwards the other n-best entries are the ones cut at the maximum length."""
    model = EOSBias(tiny_model(7), lambda step: 1e4 if step == 0 else float("-inf"))
    src = sources([3, 1], 7)
    assert [h.tokens for h in greedy_search(model, src)] == [[EOS], [EOS]]
    for row, hypotheses in enumerate(beam_search(model, src, beam_size=3, nbest=3, max_len_b=2)):
        assert hypotheses[0].tokens == [EOS] and hypotheses[0].log_prob == pytest.approx(0.0, abs=1e-3)
        assert [len(h.tokens) for h in hypotheses[1:]] == [limit_for(src, row, 1.0, 2)] * 2
        assert all(h.score < -1e3 for h in hypotheses[1:])


# -- batching invariance ---------------------------------------------------------------------
@pytest.mark.parametrize("eos_bias", [0.0, 2.0])
@pytest.mark.parametrize("k", [2, 3])
def test_beam_search_of_a_batch_equals_each_source_alone(eos_bias, k):
    """Sources of different lengths finish at different steps and leave the batch; what is
    left must decode exactly as it would alone."""
    model = EOSBias(tiny_model(8), lambda step: eos_bias)
    src = sources(LENGTHS, 8)
    batched = beam_search(model, src, beam_size=k, nbest=k, max_len_b=4)
    greedy = greedy_search(model, src, max_len_b=4)
    for row in range(len(LENGTHS)):
        alone = unpadded(src, row)[None]
        assert_same_hypotheses(batched[row], beam_search(model, alone, beam_size=k, nbest=k, max_len_b=4)[0])
        assert_same_hypotheses([greedy[row]], greedy_search(model, alone, max_len_b=4))


@pytest.mark.parametrize("eos_bias", [0.0, 2.0])
@pytest.mark.parametrize("k", [1, 3])
def test_searches_without_the_cache_equal_the_cached_searches(eos_bias, k):
    """``use_cache=False`` (the whole prefix every step, memory rows dropped as sources
    finish) is the naive baseline of benchmarks/translate_cache.py: same hypotheses."""
    model = EOSBias(tiny_model(10), lambda step: eos_bias)
    src = sources(LENGTHS, 10)
    cached = beam_search(model, src, beam_size=k, nbest=k, max_len_b=5)
    naive = beam_search(model, src, beam_size=k, nbest=k, max_len_b=5, use_cache=False)
    for row in range(len(LENGTHS)):
        assert_same_hypotheses(naive[row], cached[row])
    assert_same_hypotheses(greedy_search(model, src, max_len_b=5, use_cache=False),
                           greedy_search(model, src, max_len_b=5))


def test_batch_order_does_not_matter():
    model = EOSBias(tiny_model(9), lambda step: 1.5)
    src = sources(LENGTHS, 9)
    order = [3, 0, 5, 1, 4, 2]
    forward = beam_search(model, src, beam_size=3, nbest=2, max_len_b=5)
    permuted = beam_search(model, src[order], beam_size=3, nbest=2, max_len_b=5)
    for new_row, old_row in enumerate(order):
        assert_same_hypotheses(permuted[new_row], forward[old_row])


def reference_beam_search(model, src_row: torch.Tensor, k: int, alpha: float, limit: int) -> list[Hypothesis]:
    """The documented algorithm, written plainly for one source: no cache, no batching,
    float64, full recomputation of every live hypothesis at every step."""
    live: list[tuple[float, list[int]]] = [(0.0, [])]
    finished: list[Hypothesis] = []
    for length in range(1, limit + 1):
        tgt_in = torch.tensor([[BOS] + tokens for _, tokens in live])
        with torch.no_grad():
            memory, memory_mask = model.encode(src_row[None].expand(len(live), -1))
            log_probs = torch.log_softmax(model.decode(tgt_in, memory, memory_mask)[:, -1].double(), dim=-1)
        candidates = sorted(((lp + float(log_probs[i, t]), tokens + [t]) for i, (lp, tokens) in enumerate(live)
                             for t in range(log_probs.shape[-1])), key=lambda c: c[0], reverse=True)[:2 * k]
        for lp, tokens in candidates[:k]:  # EOS among the best k: finished
            if tokens[-1] == EOS and len(finished) < k:
                finished.append(Hypothesis(tokens, lp, lp / length_penalty(length, alpha)))
        live = [c for c in candidates if c[1][-1] != EOS][:k]  # the best k others go on
        if len(finished) >= k:
            break
        if length == limit:
            finished.extend(Hypothesis(tokens, lp, lp / length_penalty(length, alpha)) for lp, tokens in live)
    return sorted(finished, key=lambda h: h.score, reverse=True)


@pytest.mark.parametrize("seed, k, alpha, eos_bias", [(0, 3, 0.6, 2.0), (1, 4, 0.0, 3.0), (2, 2, 1.0, 1.0),
                                                     (3, 5, 0.6, 0.0)])
def test_beam_search_equals_a_plain_reference_implementation(seed, k, alpha, eos_bias):
    model = EOSBias(tiny_model(seed), lambda step: eos_bias)
    src = sources(LENGTHS, seed)
    results = beam_search(model, src, beam_size=k, nbest=k, alpha=alpha, max_len_b=4)
    for row in range(len(LENGTHS)):
        expected = reference_beam_search(model, unpadded(src, row), k, alpha, limit_for(src, row, 1.0, 4))
        assert_same_hypotheses(results[row], expected[:k])


# -- length penalty -------------------------------------------------------------------------
def test_length_penalty_values():
    assert length_penalty(1, 0.6) == 1.0  # ((5 + 1) / 6)^α
    assert length_penalty(7, 0.6) == pytest.approx(2.0 ** 0.6)
    assert length_penalty(19, 1.0) == pytest.approx(4.0)
    assert all(length_penalty(n, 0.0) == 1.0 for n in range(1, 30))
    lengths = torch.tensor([1.0, 7.0, 19.0])
    assert torch.allclose(length_penalty(lengths, 0.5), torch.tensor([1.0, 2.0 ** 0.5, 2.0]))
    assert all(length_penalty(n + 1, 0.6) > length_penalty(n, 0.6) for n in range(1, 30))


def test_alpha_zero_scores_are_plain_log_probs():
    model = tiny_model(10)
    for hypotheses in beam_search(model, sources(LENGTHS, 10), beam_size=3, nbest=3, alpha=0.0, max_len_b=4):
        assert all(h.score == h.log_prob for h in hypotheses)


# -- exhaustive search on a tiny vocabulary ---------------------------------------------------
def all_outputs(vocab: int, max_len: int) -> list[list[int]]:
    """Every possible output: ends in EOS within max_len, or is cut at exactly max_len."""
    others = [t for t in range(vocab) if t != EOS]
    outputs = []
    for length in range(1, max_len + 1):
        for prefix in itertools.product(others, repeat=length - 1):
            outputs.append([*prefix, EOS])
            if length == max_len:
                outputs.extend([*prefix, t] for t in others)
    return outputs


def exhaustive(model, src_row: torch.Tensor, outputs: list[list[int]], alpha: float) -> list[tuple[float, list[int]]]:
    width = max(map(len, outputs))
    tgt_in = torch.full((len(outputs), width), PAD, dtype=torch.long)
    targets = torch.full((len(outputs), width), -1, dtype=torch.long)
    for row, tokens in enumerate(outputs):
        tgt_in[row, :len(tokens)] = torch.tensor([BOS] + tokens[:-1])
        targets[row, :len(tokens)] = torch.tensor(tokens)
    with torch.no_grad():
        memory, memory_mask = model.encode(src_row[None].expand(len(outputs), -1))
        log_probs = torch.log_softmax(model.decode(tgt_in, memory, memory_mask).double(), dim=-1)
    picked = log_probs.gather(-1, targets.clamp(min=0)[..., None])[..., 0].masked_fill(targets < 0, 0.0)
    totals = picked.sum(dim=1).tolist()
    scored = [(lp / length_penalty(len(t), alpha), t) for lp, t in zip(totals, outputs)]
    return sorted(scored, key=lambda item: item[0], reverse=True)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_large_beam_equals_exhaustive_search_on_a_tiny_vocabulary(seed, alpha):
    vocab, max_len = 5, 3
    model = tiny_model(seed, vocab=vocab)
    outputs = all_outputs(vocab, max_len)
    assert len(outputs) == 1 + 4 + 16 + 64  # EOS at 1, 2, 3 tokens; or cut at 3
    src = sources([4, 2], seed, vocab=vocab)
    k = len(outputs)
    results = beam_search(model, src, beam_size=k, nbest=k, alpha=alpha, max_len_a=0.0, max_len_b=max_len)
    small_beam = beam_search(model, src, beam_size=2, alpha=alpha, max_len_a=0.0, max_len_b=max_len)
    for row in range(len(src)):
        expected = exhaustive(model, unpadded(src, row), outputs, alpha)
        found = results[row]
        # Every possible output, in the exact order of its length-normalised score.
        assert [h.tokens for h in found] == [tokens for _, tokens in expected]
        assert [h.score for h in found] == pytest.approx([score for score, _ in expected], abs=1e-5)
        assert found[0].score == pytest.approx(expected[0][0], abs=1e-5)
        # A small beam can only find something that exists, at most the exact best.
        assert small_beam[row][0].score <= expected[0][0] + 1e-5
        assert small_beam[row][0].tokens in outputs


# -- bad arguments ----------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, fragment", [
    (dict(beam_size=0), "beam_size=0"),
    (dict(beam_size=-2), "beam_size=-2"),
    (dict(beam_size=2, nbest=3), "nbest=3"),
    (dict(beam_size=2, nbest=0), "nbest=0"),
    (dict(alpha=-0.5), "alpha=-0.5"),
    (dict(max_len_a=-1.0), "max_len_a=-1.0"),
    (dict(max_len_a=0.0, max_len_b=0), "max_len_b=0"),
    (dict(max_len_b=-1), "max_len_b=-1"),
])
def test_bad_beam_search_arguments_are_value_errors(kwargs, fragment):
    with pytest.raises(ValueError) as error:
        beam_search(tiny_model(0), sources([3, 2]), **kwargs)
    assert fragment in str(error.value)


@pytest.mark.parametrize("search", [greedy_search, beam_search])
@pytest.mark.parametrize("bad_src, fragment", [
    (torch.tensor([[3, VOCAB]]), str(VOCAB)),
    (torch.tensor([[-1, 3]]), "-1"),
    (torch.tensor([3, 4]), "(2,)"),
    (torch.zeros(0, 3, dtype=torch.long), "(0, 3)"),
])
def test_bad_sources_are_value_errors(search, bad_src, fragment):
    with pytest.raises(ValueError) as error:
        search(tiny_model(0), bad_src)
    assert fragment in str(error.value)


def test_learned_position_table_bounds_the_output_length():
    """Decoding stops at the end of a learned position table instead of failing."""
    model = EOSBias(tiny_model(11, positional="learned", max_positions=6), lambda step: float("-inf"))
    src = sources([5, 2], 11)
    assert [len(h.tokens) for h in greedy_search(model, src)] == [6, 6]
    assert [len(h.tokens) for h in greedy_search(model, src, max_len_a=0, max_len_b=4)] == [4, 4]
    for hypotheses in beam_search(model, src, beam_size=2, nbest=2):
        assert [len(h.tokens) for h in hypotheses] == [6, 6]


def test_stay_order_keeps_as_many_survivors_as_can_be_in_their_parents_rows():
    from attnlab.generation.search import _stay_order

    # Survivors (by score) of one source extend rows 0, 0, 1, 2: three stay, the second child of
    # row 0 goes to the row whose hypothesis has no child.
    order = _stay_order([0, 0, 1, 2], 4)
    assert order == [0, 2, 3, 1] and [[0, 0, 1, 2][i] for i in order] == [0, 1, 2, 0]
    assert _stay_order([0, 1, 2, 3, 4, 5, 6, 7], 4) is None  # every survivor in its parent's row already
    generator = torch.Generator().manual_seed(0)
    for _ in range(200):
        k, sources = int(torch.randint(1, 6, (1,), generator=generator)), 3
        origin = [s * k + int(p) for s in range(sources) for p in torch.randint(0, k, (k,), generator=generator)]
        order = _stay_order(origin, k) or list(range(len(origin)))
        for s in range(sources):  # a permutation within each source
            assert sorted(order[s * k:(s + 1) * k]) == list(range(s * k, (s + 1) * k))
            placed = [origin[i] for i in order[s * k:(s + 1) * k]]
            stay = sum(placed[j] == s * k + j for j in range(k))
            assert stay == len(set(origin[s * k:(s + 1) * k]))  # one per parent with a child: the most


def test_a_search_gives_its_cache_memory_back_and_the_next_search_is_made_in_it(monkeypatch):
    """Each search's static cache is released at its end (_Decoder.close): the next search of the same
    shapes takes every buffer it asks for from that memory (no fresh pages to fault in) and finds the
    same hypotheses."""
    from attnlab.attention import cache as caches

    torch.manual_seed(0)
    model = attnlab.create_model("transformer_tiny").eval()
    src = torch.randint(4, 60, (5, 9))
    src[1, 6:] = 0
    take, asked = caches._BufferPool.take, []

    def counted(pool, *args):
        buffer = take(pool, *args)
        asked.append(buffer is not None)
        return buffer

    monkeypatch.setattr(caches._BufferPool, "take", counted)
    caches.release_cache_memory()
    for search in (functools.partial(beam_search, beam_size=4), greedy_search):
        first = search(model, src, max_len_a=0, max_len_b=30)
        asked.clear()
        again = search(model, src, max_len_a=0, max_len_b=30)
        assert asked and all(asked)
        assert [repr(h) for h in again] == [repr(h) for h in first]
    caches.release_cache_memory()


def test_searches_in_threads_at_once_take_their_caches_memory_each_for_itself():
    """The pool hands a given-back buffer to one cache at a time: searches running in four threads at once
    (each giving back and taking memory as it goes) find what each finds alone."""
    import threading

    from attnlab.attention import cache as caches

    torch.manual_seed(0)
    model = attnlab.create_model("transformer_tiny").eval()
    sources = [torch.randint(4, 60, (3, 5 + i), generator=torch.Generator().manual_seed(i)) for i in range(4)]
    alone = [[h[0].tokens for h in beam_search(model, src, beam_size=4, max_len_a=0, max_len_b=25)] for src in sources]
    caches.release_cache_memory()
    found, errors = [[] for _ in sources], []

    def run(i):
        try:
            for _ in range(6):
                found[i].append([h[0].tokens for h in beam_search(model, sources[i], beam_size=4, max_len_a=0,
                                                                  max_len_b=25)])
        except Exception as error:  # (reported below: an exception in a thread does not fail the test)
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(sources))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert all(runs == [expected] * 6 for runs, expected in zip(found, alone))
    caches.release_cache_memory()
