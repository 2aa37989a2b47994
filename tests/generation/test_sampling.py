"""generate(): cached == uncached, greedy equivalences, seeds, batching, stops, edge cases."""

import pytest
import torch

import attnlab
from attnlab.data.text import CharTokenizer
from attnlab.generation import filter_logits, generate, generate_text


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return attnlab.create_model("lm_tiny").eval()


def uncached_greedy(model, prompt, steps):
    """Reference: recompute the whole sequence for every new token."""
    ids = list(prompt)
    for _ in range(steps):
        ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    return ids[len(prompt):]


@pytest.mark.parametrize("overrides", [{}, {"norm_first": False, "positional": "sinusoidal"}])
def test_cached_generation_equals_uncached_recomputation(overrides):
    model = attnlab.create_model("lm_tiny", **overrides).eval()
    prompt = [3, 14, 15, 9, 26]
    assert generate(model, [prompt], max_new_tokens=30, greedy=True) == [uncached_greedy(model, prompt, 30)]


def test_batched_generation_equals_one_by_one(model):
    prompts = [[5], [1, 2, 3, 4, 5, 6, 7, 8], [9, 9, 40]]
    batched = generate(model, prompts, max_new_tokens=12, greedy=True)
    assert batched == [generate(model, [p], max_new_tokens=12, greedy=True)[0] for p in prompts]
    sampled = generate(model, prompts, max_new_tokens=12, top_k=5, seed=1)
    assert len({len(s) for s in sampled}) == 1 and len(sampled[0]) == 12


def test_top_k_1_and_tiny_top_p_equal_greedy(model):
    prompts = [[1, 2, 3], [7]]
    greedy = generate(model, prompts, max_new_tokens=15, greedy=True)
    assert generate(model, prompts, max_new_tokens=15, top_k=1, seed=3) == greedy
    assert generate(model, prompts, max_new_tokens=15, top_p=1e-6, seed=4) == greedy


def test_seeded_sampling_is_reproducible(model):
    first = generate(model, [[1, 2, 3]], max_new_tokens=20, temperature=1.5, seed=123)
    assert generate(model, [[1, 2, 3]], max_new_tokens=20, temperature=1.5, seed=123) == first
    generator = torch.Generator().manual_seed(123)
    assert generate(model, [[1, 2, 3]], max_new_tokens=20, temperature=1.5, generator=generator) == first
    assert generate(model, [[1, 2, 3]], max_new_tokens=20, temperature=1.5, seed=124) != first


def test_filter_logits():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0]])
    assert torch.isinf(filter_logits(logits, top_k=2)).tolist() == [[True, False, False, True]]
    # probabilities ~ [0.09, 0.64, 0.24, 0.03]: 0.7 needs the top two
    assert torch.isinf(filter_logits(logits, top_p=0.7)).tolist() == [[True, False, False, True]]
    assert not torch.isinf(filter_logits(logits, top_p=1.0)).any()


def test_stop_ids_and_streaming(model):
    free = generate(model, [[1, 2, 3]], max_new_tokens=20, greedy=True)[0]
    stop = free[4]
    streamed = []
    out = generate(model, [[1, 2, 3]], max_new_tokens=20, greedy=True, stop_ids=[stop],
                   on_token=lambda row, token: streamed.append((row, token)))[0]
    assert out == free[:free.index(stop) + 1]
    assert streamed == [(0, t) for t in out]


def test_stop_strings():
    tokenizer = CharTokenizer("abcdefgh")
    model = attnlab.create_model("lm_tiny", vocab_size=8).eval()
    free = generate_text(model, tokenizer, "abc", max_new_tokens=20, greedy=True)[0]
    stop = free[3:5]
    cut = generate_text(model, tokenizer, "abc", max_new_tokens=20, greedy=True, stop_strings=[stop])[0]
    assert cut == free[:free.index(stop) + len(stop)]


def test_bad_inputs(model):
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        generate(model, [[1], []])
    with pytest.raises(ValueError, match="longer than the model's context"):
        generate(model, [list(range(1, 60)) * 2])
    with pytest.raises(ValueError, match="sliding_window"):
        generate(model, [[1] * 60], max_new_tokens=10)
    with pytest.raises(ValueError, match="token id 64"):
        generate(model, [[64]])
    with pytest.raises(ValueError, match="top_p=0"):
        generate(model, [[1]], top_p=0.0)
    with pytest.raises(ValueError, match="temperature"):
        generate(model, [[1]], temperature=0.0)
    with pytest.raises(ValueError, match="not in the tokenizer's vocabulary"):
        generate_text(model, CharTokenizer("abc"), "abz")


def test_sliding_window_generates_past_the_context(model):
    """With sliding_window, generation continues past max_positions=64; after the shift the
    model is conditioned on the last 32 tokens, exactly as a fresh call on them would be."""
    prompt = [1, 2, 3] * 10
    out = generate(model, [prompt], max_new_tokens=60, greedy=True, sliding_window=True)[0]
    assert len(out) == 60
    history = prompt + out
    # The shift happens when the sequence holds 64 tokens (position 64 is outside the table).
    shifted = history[64 - 32:64]
    assert out[64 - len(prompt):] == generate(model, [shifted], max_new_tokens=len(history) - 64, greedy=True)[0]


def test_zero_new_tokens(model):
    assert generate(model, [[1], [2, 3]], max_new_tokens=0) == [[], []]


def test_generate_restores_training_mode():
    model = attnlab.create_model("lm_tiny", dropout=0.1).train()
    first = generate(model, [[1, 2]], max_new_tokens=5, greedy=True)
    assert model.training
    assert generate(model, [[1, 2]], max_new_tokens=5, greedy=True) == first  # no dropout while generating


def test_generation_through_onednn_products_gives_the_same_tokens(monkeypatch):
    """Where linear.onednn_products() (an AMD CPU with AVX-512; forced here on any CPU), generate runs
    inside packed_inference: a batch's steps multiply through oneDNN (skinny_linear) and give the tokens
    of the plain products, greedy and seeded."""
    import attnlab.linear as linear

    if not (linear._ONEDNN and linear._MKL_PACKED):
        pytest.skip("torch without oneDNN or MKL: packed_inference is off")
    model = attnlab.create_model("lm_tiny").eval()
    with torch.no_grad():
        model.decoder.head.weight.mul_(4.0)  # decisive logits: no near-ties for float rounding to flip
    prompts = [[5, 6], [1, 2, 3, 4, 5, 6, 7, 8], [9, 9, 40]]
    plain = generate(model, prompts, max_new_tokens=12, greedy=True)
    sampled = generate(model, prompts, max_new_tokens=12, top_k=3, seed=4)
    calls = []
    product = torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(linear.torch.ops.mkldnn, "_linear_pointwise", lambda *a: calls.append(1) or product(*a))
    monkeypatch.setattr(linear, "_amd_avx512", lambda: True)
    monkeypatch.setattr(linear, "ONEDNN_MIN_WORK", 0)  # lm_tiny's products are smaller than the floor
    assert generate(model, prompts, max_new_tokens=12, greedy=True) == plain
    assert calls, "the oneDNN road was not taken"
    assert generate(model, prompts, max_new_tokens=12, top_k=3, seed=4) == sampled
