"""The fixed-shape greedy loop that CUDA graphs replay: on the CPU it runs eagerly and must
give the tokens (and the logits) of the ordinary cached loop and of full recomputation."""

import copy

import pytest
import torch

import attnlab
from attnlab.generation import generate
from attnlab.generation.graphs import greedy_fixed_shape
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
