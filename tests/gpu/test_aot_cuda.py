"""The ahead-of-time compiled step on a CUDA GPU (skipped elsewhere; on a GPU machine:
``pytest -m gpu tests/gpu``): each decoding layout's CUDA package gives the eager step's
tokens, built with the machine's own compiler setting ($CXX as the machine sets it: on the GPU
image of 2026-11-27/28 a compiler with no shared libstdc++, which aot.package_compiler
replaces). Each test builds one package (about 20-70 s there)."""

import warnings

import pytest
import torch

import attnlab
from attnlab.generation import generate
from attnlab.generation.compiled import unavailable_reason

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))


def test_greedy_through_the_cuda_package_gives_the_eager_tokens():
    torch.manual_seed(0)
    model = attnlab.create_model("lm_tiny", vocab_size=97).cuda().eval()
    prompts = [[5, 9, 17, 3, 44], [8]]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a fallback to the eager step fails the test
        for prompt in prompts:
            assert generate(model, [prompt], max_new_tokens=24, greedy=True, compile="aot") == \
                generate(model, [prompt], max_new_tokens=24, greedy=True, cuda_graph=False)


def test_beam_and_greedy_search_through_the_cuda_package():
    from reference.aot_search import assert_search_through_the_package

    torch.manual_seed(0)
    model = attnlab.create_model("transformer_tiny").cuda().eval()
    src = torch.randint(4, 60, (5, 9), device="cuda")
    src[1, 6:] = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert_search_through_the_package(model, (src, src[:1]), beam=4, nbest=2, max_len_a=0, max_len_b=20)


def test_image_samples_through_the_cuda_package():
    from attnlab.generation import sample_images

    torch.manual_seed(0)
    model = attnlab.create_model("imagetransformer_mnist_small", height=6, width=6, channels=1, d_model=16,
                                 num_heads=2, d_ff=24, num_layers=2, dropout=0.0,
                                 attention={"name": "local_2d", "query_shape": [2, 3], "memory_flange": [1, 2]})
    model = model.cuda().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert torch.equal(sample_images(model, 2, temperature=0, compile="aot"), sample_images(model, 2, temperature=0))
