"""The compiled decode step (attnlab.generation.compiled): the model's own step over a
fixed-shape cache, compiled by torch.compile, gives the eager step's logits up to float
rounding at every position (teacher-forced, so a near-tie cannot make the two runs feed
different tokens), keeps the host's count of positions, and falls back to eager steps with a
warning when no C++ compiler is found."""

import warnings

import pytest
import torch

import attnlab
from attnlab.generation import generate, sample_images
from attnlab.generation import compiled as compiled_module
from attnlab.generation.compiled import bucket_capacity, compiled_step, unavailable_reason

needs_compiler = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
# Fused kernels add in another order than the eager ones: float32 rounding, on any CPU.
TOLERANCE = dict(atol=2e-5, rtol=2e-5)


def lm(attention="causal"):
    torch.manual_seed(0)
    return attnlab.create_model("lm_tiny", vocab_size=23, d_model=16, num_heads=2, d_ff=24, num_layers=2,
                                max_positions=40, attention=attention).eval()


def image_model(attention):
    torch.manual_seed(0)
    return attnlab.create_model("imagetransformer_mnist_small", height=6, width=6, channels=1, d_model=16,
                                num_heads=2, d_ff=24, num_layers=2, dropout=0.0, attention=attention).eval()


@needs_compiler
@pytest.mark.slow
@pytest.mark.parametrize("attention", ["causal", {"name": "local_1d", "block_length": 4}])
def test_compiled_lm_step_gives_the_eager_logits_at_every_position(attention):
    model = lm(attention)
    torch.manual_seed(1)
    ids = torch.randint(1, 23, (2, 30))
    mask = torch.ones(2, 30, dtype=torch.bool)
    mask[1, :3] = False  # left padding
    eager_cache = model.new_cache(2, 32)
    fixed_cache = model.new_cache(2, 32, fixed_shape=True)
    step = compiled_step(model)
    with torch.inference_mode():
        torch.testing.assert_close(model.prefill(ids[:, :5], fixed_cache, mask[:, :5]),
                                   model.prefill(ids[:, :5], eager_cache, mask[:, :5]), **TOLERANCE)
        for t in range(5, 30):
            torch.testing.assert_close(step(model, ids[:, t], fixed_cache), model.step(ids[:, t], eager_cache),
                                       **TOLERANCE)
            assert fixed_cache.length == eager_cache.length == t + 1  # counted on the host
    assert fixed_cache.positions.tolist() == eager_cache.positions.tolist()


@needs_compiler
@pytest.mark.slow
@pytest.mark.parametrize("attention", [{"name": "local_1d", "block_length": 8},
                                       {"name": "local_2d", "query_shape": [2, 3], "memory_flange": [1, 2]}])
def test_compiled_image_step_gives_the_eager_logits_at_every_sub_pixel(attention):
    model = image_model(attention)
    torch.manual_seed(1)
    sequence = torch.randint(0, 256, (2, model.config.sequence_length))
    eager_cache, fixed_cache = model.new_cache(2), model.new_cache(2, fixed_shape=True)
    step = compiled_step(model)
    with torch.inference_mode():
        torch.testing.assert_close(model.prefill(sequence[:, :3], fixed_cache),
                                   model.prefill(sequence[:, :3], eager_cache), **TOLERANCE)
        for t in range(3, model.config.sequence_length - 1):
            torch.testing.assert_close(step(model, sequence[:, t], fixed_cache),
                                       model.step(sequence[:, t], eager_cache), **TOLERANCE)
    assert fixed_cache.length == eager_cache.length == model.config.sequence_length  # (prefill: a start + 3)


def test_without_a_compiler_it_warns_and_decodes_eagerly(monkeypatch):
    monkeypatch.setattr(compiled_module, "unavailable_reason", lambda: "no C++ compiler here")
    model = lm()
    eager = generate(model, [[3, 4, 5]], max_new_tokens=6, greedy=True)
    with pytest.warns(RuntimeWarning, match="no C\\+\\+ compiler here; decoding eagerly"):
        assert generate(model, [[3, 4, 5]], max_new_tokens=6, greedy=True, compile=True) == eager
    images = image_model({"name": "local_1d", "block_length": 8})
    expected = sample_images(images, 1, temperature=0)
    with pytest.warns(RuntimeWarning, match="decoding eagerly"):
        assert torch.equal(sample_images(images, 1, temperature=0, compile=True), expected)


def test_compile_refuses_a_sliding_window_and_buckets_capacities():
    with pytest.raises(ValueError, match="sliding_window"):
        generate(lm(), [[3, 4]], max_new_tokens=4, compile=True, sliding_window=True)
    assert bucket_capacity(19, 1024) == 256 and bucket_capacity(257, 1024) == 512
    assert bucket_capacity(300, 400) == 400 and bucket_capacity(500, 400) == 500  # never below what is needed
    assert bucket_capacity(19, None) == 256


def test_a_compiled_step_needs_a_fixed_shape_cache():
    model = lm()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = compiled_step(model)
    assert compiled_step(model) is step  # one per model
    with pytest.raises(ValueError, match="fixed-shape cache"):
        step(model, torch.tensor([1]), model.new_cache(1, 8))


def test_a_compilation_that_fails_on_the_first_call_falls_back_to_the_eager_step():
    model = lm()
    step = compiled_module.CompiledStep(model)

    def broken(*args):
        raise RuntimeError("C++ compile error: cannot build the kernel\nmore lines")

    step._compiled = broken  # what inductor raises when the compiler cannot build its code
    fixed, eager = model.new_cache(1, 8, fixed_shape=True), model.new_cache(1, 8)
    with torch.inference_mode():
        model.prefill(torch.tensor([[3, 4]]), fixed), model.prefill(torch.tensor([[3, 4]]), eager)
        with pytest.warns(RuntimeWarning, match="torch.compile failed \\(RuntimeError: C\\+\\+ compile error"):
            logits = step(model, torch.tensor([5]), fixed)
        torch.testing.assert_close(logits, model.step(torch.tensor([5]), eager), **TOLERANCE)
        torch.testing.assert_close(step(model, torch.tensor([6]), fixed), model.step(torch.tensor([6]), eager),
                                   **TOLERANCE)  # eager from then on, no second warning needed
    assert fixed.length == eager.length == 4
