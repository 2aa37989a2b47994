"""The fixed-shape greedy loop that CUDA graphs replay: on the CPU it runs eagerly and must
give the tokens (and the logits) of the ordinary cached loop and of full recomputation."""

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
