"""The fixed-shape greedy loop that CUDA graphs replay: on the CPU it runs eagerly and must
give the tokens (and the logits) of the ordinary cached loop and of full recomputation."""

import copy

import pytest
import torch

import attnlab
from attnlab.generation import generate
from attnlab.generation.graphs import GreedyGraphs, greedy_fixed_shape, greedy_graphs
from attnlab.generation.sampling import _left_pad


@pytest.mark.parametrize("overrides", [{}, {"positional": "sinusoidal", "norm_first": False},
                                       {"positional": "none"}, {"activation": "relu"}])
def test_fixed_shape_greedy_equals_the_cached_loop(overrides):
    torch.manual_seed(0)
    model = attnlab.create_model("lm_tiny", **overrides).eval()
    prompts = [[5, 9, 2], [1, 2, 3, 4, 5, 6, 7, 8], [40]]  # left padding of different amounts
    ids, mask = _left_pad(prompts, model.config.pad_id, torch.device("cpu"))
    fixed = greedy_fixed_shape(model, ids, mask, 20, use_graph=False).tolist()
    assert fixed == generate(model, prompts, max_new_tokens=20, greedy=True)


def test_fixed_shape_step_logits_equal_full_recomputation():
    torch.manual_seed(1)
    model = attnlab.create_model("lm_tiny").eval()
    prompt = torch.tensor([[3, 14, 15, 9, 26]])
    cache = model.new_cache(1, 12, fixed_shape=True)
    logits = model.prefill(prompt, cache)
    ids = prompt[0].tolist()
    for _ in range(6):
        token = int(logits.argmax(-1))
        ids.append(token)
        full = model(torch.tensor([ids]))[:, -1]
        logits = model.step(torch.tensor([token]), cache)
        torch.testing.assert_close(logits, full, rtol=0, atol=1e-5)


def test_zero_and_one_new_token():
    torch.manual_seed(2)
    model = attnlab.create_model("lm_tiny").eval()
    ids = torch.tensor([[1, 2, 3]])
    assert greedy_fixed_shape(model, ids, None, 0, use_graph=False).shape == (1, 0)
    assert greedy_fixed_shape(model, ids, None, 1, use_graph=False).tolist() == generate(
        model, [[1, 2, 3]], max_new_tokens=1, greedy=True)


# -- kept captures, bucketed by batch and length (GreedyGraphs), run eagerly on the CPU ---------
def _double_lm(seed: int, **overrides):
    """lm_tiny in float64 (no near-ties in an argmax) with larger random weights: at its
    initial scale the tied head only repeats the last token, whatever the context."""
    torch.manual_seed(seed)
    model = attnlab.create_model("lm_tiny", **overrides).double().eval()
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if weight.dim() == 2 and not name.startswith("decoder.embed."):
                weight.normal_(0, 0.5)
    return model


def _pooled(pool, model, prompts, new):
    ids, mask = _left_pad(prompts, model.config.pad_id, torch.device("cpu"))
    return pool(ids, mask, new).tolist()


@pytest.mark.parametrize("overrides", [{}, {"positional": "sinusoidal"}])
def test_kept_captures_equal_generate_call_after_call(overrides):
    # Calls of different batch sizes and lengths, padded and not, in an order where a bucket's
    # cache is reused after a longer, padded call left keys, values and a key mask behind.
    model = _double_lm(3, **overrides)
    pool = GreedyGraphs(model, batch_buckets=(1, 2, 4), length_multiple=16, max_graphs=8, use_graph=False)
    calls = [([[7, 8, 9, 10, 11, 12, 13], [1], [2, 3]], 9),   # rows 4, capacity 16, padded
             ([[4, 4, 5]], 5),                                  # rows 1, capacity 16
             ([[9, 9, 9], [3, 1, 4], [2, 7, 1]], 6),            # rows 4 again: no padding, shorter
             ([[5, 6], [6, 5]], 20),                            # rows 2, capacity 32
             ([[1, 2, 3, 4, 5, 6], [7], [8, 9], [10], [11, 12, 13]], 4)]  # 5 rows: 2 x 4 = 8
    for prompts, new in calls:
        assert _pooled(pool, model, prompts, new) == generate(model, prompts, max_new_tokens=new, greedy=True)
    assert sorted(key[:2] for key in pool._captures) == [(1, 16), (2, 32), (4, 16), (8, 16)]


def test_a_kept_capture_is_reused_in_place():
    model = _double_lm(4)
    pool = GreedyGraphs(model, batch_buckets=(2,), length_multiple=32, use_graph=False)
    _pooled(pool, model, [[1, 2, 3], [4]], 10)
    (capture,) = pool._captures.values()
    buffers = [kv.data_ptr() for kv in capture.cache.kv] + [capture.cache.key_mask.data_ptr(),
                                                          capture.cache.write_index.data_ptr()]
    assert _pooled(pool, model, [[5, 6]], 7) == generate(model, [[5, 6]], max_new_tokens=7, greedy=True)
    (again,) = pool._captures.values()
    assert again is capture
    assert [kv.data_ptr() for kv in again.cache.kv] + [again.cache.key_mask.data_ptr(),
                                                       again.cache.write_index.data_ptr()] == buffers


def test_buckets():
    model = _double_lm(5)  # max_positions 64
    pool = GreedyGraphs(model, batch_buckets=(1, 2, 4, 8), length_multiple=16, use_graph=False)
    assert pool.bucket(1, 1) == (1, 16)
    assert pool.bucket(3, 16) == (4, 16)
    assert pool.bucket(3, 17) == (4, 32)
    assert pool.bucket(9, 30) == (16, 32)  # beyond the last bucket: a multiple of it
    assert pool.bucket(17, 60) == (24, 64)
    assert pool.bucket(1, 50) == (1, 64)  # rounded up to 64, the model's context: not beyond it
    exact = GreedyGraphs(model, batch_buckets=(), length_multiple=1)
    assert exact.bucket(3, 17) == (3, 17)


def test_least_recently_used_capture_is_dropped_and_moving_the_model_drops_all():
    model = _double_lm(6)
    pool = GreedyGraphs(model, batch_buckets=(1, 2, 4), length_multiple=8, max_graphs=2, use_graph=False)
    _pooled(pool, model, [[1]], 3)           # (1, 8)
    _pooled(pool, model, [[1], [2]], 3)      # (2, 8)
    _pooled(pool, model, [[3]], 3)           # (1, 8) used again
    _pooled(pool, model, [[1]] * 3, 3)       # (4, 8): drops (2, 8)
    assert [key[:2] for key in pool._captures] == [(1, 8), (4, 8)]
    model.float()  # new parameter tensors: a capture would read the old ones
    assert _pooled(pool, model, [[1, 2]], 4) == generate(model, [[1, 2]], max_new_tokens=4, greedy=True)
    assert [key[:2] for key in pool._captures] == [(1, 8)]
    pool.clear()
    assert len(pool) == 0


def test_greedy_graphs_bad_arguments():
    model = _double_lm(7)
    for bad in [dict(batch_buckets=(4, 2)), dict(batch_buckets=(0,)), dict(batch_buckets=(2, 2)),
                dict(length_multiple=0), dict(max_graphs=0), dict(max_graphs=True)]:
        with pytest.raises(ValueError, match=next(iter(bad))):
            GreedyGraphs(model, **bad)
    with pytest.raises(ValueError, match="CUDA device"):
        GreedyGraphs(model, use_graph=True)(torch.tensor([[1, 2]]), None, 3)
    assert GreedyGraphs(model)(torch.tensor([[1, 2]]), None, 0).shape == (1, 0)
    assert len(GreedyGraphs(model)) == 0


def test_generate_keeps_one_pool_per_model_and_lets_the_model_go():
    import gc
    import weakref

    model = _double_lm(8)
    pool = greedy_graphs(model)
    assert greedy_graphs(model) is pool
    assert greedy_graphs(_double_lm(8)) is not pool
    _pooled(pool, model, [[1, 2]], 3)
    gone = weakref.ref(model)
    del model
    gc.collect()
    assert gone() is None  # the pool (and its caches) did not keep the model alive
    with pytest.raises(ValueError, match="no longer exists"):
        pool(torch.tensor([[1, 2]]), None, 3)


# -- beam search as one fixed-shape step -----------------------------------------------------
def _beam_model(seed: int, eos_boost: float):
    """A tiny Transformer in float64 whose EOS logit is raised by ``eos_boost`` times the
    final norm's bias (an untied head, so only the output side changes): hypotheses then end
    at scattered steps, and some are cut at the length limit."""
    from tests.generation.test_search import tiny_model

    model = copy.deepcopy(tiny_model(seed, tie_output_projection=False)).double()  # not the shared one
    with torch.no_grad():
        model.decoder.head.weight[2] += eos_boost * model.decoder.stack.final_norm.bias
    return model


@pytest.mark.parametrize("seed, k, alpha, eos_boost, max_len_b", [(0, 1, 0.6, 0.0, 4), (1, 2, 0.0, 1.0, 3),
                                                                  (2, 3, 0.6, 1.5, 5), (3, 4, 1.0, 0.7, 4),
                                                                  (4, 5, 0.6, 3.0, 2)])
def test_fixed_shape_beam_search_equals_the_eager_beam_search(seed, k, alpha, eos_boost, max_len_b):
    _compare_beam_searches(seed, k, alpha, eos_boost, max_len_b)


def _compare_beam_searches(seed, k, alpha, eos_boost, max_len_b):
    from attnlab.generation import beam_search
    from attnlab.generation.graphs import beam_search_fixed_shape
    from tests.generation.test_search import LENGTHS, assert_same_hypotheses, sources

    model = _beam_model(seed, eos_boost)
    src = sources(LENGTHS, seed)
    expected = beam_search(model, src, beam_size=k, nbest=k, alpha=alpha, max_len_b=max_len_b)
    fixed = beam_search_fixed_shape(model, src, beam_size=k, nbest=k, alpha=alpha, max_len_b=max_len_b,
                                    use_graph=False)
    for got, want in zip(fixed, expected, strict=True):
        assert_same_hypotheses(got, want)
    assert [h.tokens for h in beam_search_fixed_shape(model, src, beam_size=k, nbest=1, alpha=alpha,
                                                      max_len_b=max_len_b, use_graph=False)[0]] == \
        [expected[0][0].tokens]
    return fixed


def test_the_fixed_shape_cases_reach_both_ways_of_ending():
    """The cases above are not all cut at the limit, nor all ended by EOS."""
    from tests.generation.test_search import LENGTHS, limit_for, sources

    ended = cut = 0
    for seed, k, eos_boost, max_len_b in [(1, 2, 1.0, 3), (2, 3, 1.5, 5), (3, 4, 0.7, 4)]:
        src = sources(LENGTHS, seed)
        fixed = _compare_beam_searches(seed, k, 0.6, eos_boost, max_len_b)
        for row, hypotheses in enumerate(fixed):
            for h in hypotheses:
                ended += h.tokens[-1] == 2
                cut += h.tokens[-1] != 2 and len(h.tokens) == limit_for(src, row, 1.0, max_len_b)
    assert ended >= 10 and cut >= 10


def test_fixed_shape_beam_search_refuses_a_graph_on_the_cpu_and_bad_arguments():
    from attnlab.generation import beam_search
    from attnlab.generation.graphs import beam_search_fixed_shape
    from tests.generation.test_search import sources

    model = _beam_model(0, 0.0)
    src = sources([3, 2])
    with pytest.raises(ValueError, match="needs the model on a CUDA device"):
        beam_search_fixed_shape(model, src, use_graph=True)
    with pytest.raises(ValueError, match="needs the model on a CUDA device"):
        beam_search(model, src, cuda_graph=True)
    with pytest.raises(ValueError, match="use_cache=False cannot go with it"):
        beam_search(model, src, cuda_graph=True, use_cache=False)
    with pytest.raises(ValueError, match="nbest=5 must be between 1 and beam_size=4"):
        beam_search_fixed_shape(model, src, nbest=5)


def test_kept_beam_captures_equal_the_eager_search_call_after_call():
    # Batches, source lengths, beam sizes and limits that share buckets, so kept buffers
    # (state, cache, memory, cross-attention keys) are reset and refilled by later calls.
    from attnlab.generation import beam_search
    from attnlab.generation.graphs import BeamGraphs
    from tests.generation.test_search import assert_same_hypotheses, sources

    model = _beam_model(2, 1.5)
    pool = BeamGraphs(model, batch_buckets=(2, 4), length_multiple=8, max_graphs=8, use_graph=False)
    calls = [([5, 3, 7], 1, 3, 5), ([2], 2, 3, 4), ([6, 6, 1, 4], 3, 3, 5), ([4, 3], 4, 2, 3), ([9, 2, 5], 5, 3, 5),
             ([1, 8, 3], 6, 3, 2)]
    ended = 0
    for lengths, seed, k, max_len_b in calls:
        src = sources(lengths, seed)
        expected = beam_search(model, src, beam_size=k, nbest=k, alpha=0.6, max_len_b=max_len_b)
        got = pool(src, beam_size=k, nbest=k, alpha=0.6, max_len_b=max_len_b)
        for g, w in zip(got, expected, strict=True):
            assert_same_hypotheses(g, w)
            ended += sum(h.tokens[-1] == 2 for h in g)
    assert ended >= 5  # not only length-cut hypotheses
    # (rows, k, steps, source): [5, 3, 7] -> 4 rows, steps 7 + 5 = 12 -> 16, source 7 -> 8; the
    # third and the last call ([1, 8, 3]: 8 + 2 = 10 -> 16) search in the same kept buffers.
    assert sorted(pool._captures) == [(2, 2, 8, 8, False), (2, 3, 8, 8, False), (4, 3, 16, 8, False),
                                      (4, 3, 16, 16, False)]


def test_beam_graphs_reuse_buffers_and_let_the_model_go():
    import gc
    import weakref

    from attnlab.generation.graphs import BeamGraphs, beam_graphs
    from tests.generation.test_search import sources

    model = _beam_model(3, 0.7)
    pool = BeamGraphs(model, batch_buckets=(4,), length_multiple=16, use_graph=False)
    first = pool(sources([3, 2], 1), beam_size=2)
    (capture,) = pool._captures.values()
    buffers = [capture.memory.data_ptr(), capture.state["history"].data_ptr()] + [
        k.data_ptr() for k, _ in capture.cross]
    assert pool(sources([3, 2], 1), beam_size=2) == first
    (again,) = pool._captures.values()
    assert [again.memory.data_ptr(), again.state["history"].data_ptr()] + [
        k.data_ptr() for k, _ in again.cross] == buffers
    assert beam_graphs(model) is beam_graphs(model)
    beam_graphs(model)
    gone = weakref.ref(model)
    del model, pool, capture, again
    gc.collect()
    assert gone() is None
