"""Weights copied from a HuggingFace GPT-2 give the same logits and the same greedy tokens."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from attnlab.generation import generate  # noqa: E402
from attnlab.interop import from_hf_gpt2  # noqa: E402
from attnlab.interop.hf_gpt2 import config_from_hf_gpt2  # noqa: E402


@pytest.fixture(scope="module")
def hf_model():
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=97, n_positions=40, n_embd=48, n_layer=3, n_head=4,
                                     bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config).eval()


def test_same_logits(hf_model):
    model = from_hf_gpt2(hf_model)
    ids = torch.randint(0, 97, (2, 17))
    with torch.no_grad():
        expected = hf_model(ids).logits
    assert (model(ids) - expected).abs().max() < 1e-4


def test_same_logits_from_state_dict_with_left_padding(hf_model):
    model = from_hf_gpt2(hf_model.state_dict(), config_from_hf_gpt2(hf_model.config))
    ids = torch.randint(0, 97, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[0, :3] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        expected = hf_model(ids, attention_mask=mask, position_ids=positions).logits
    assert (model(ids, attention_mask=mask)[mask.bool()] - expected[mask.bool()]).abs().max() < 1e-4


def test_same_greedy_tokens(hf_model):
    model = from_hf_gpt2(hf_model)
    prompt = torch.randint(0, 97, (1, 6))
    with torch.no_grad():
        theirs = hf_model.generate(prompt, max_new_tokens=20, min_new_tokens=20, do_sample=False, pad_token_id=0,
                                   eos_token_id=None)[0, 6:].tolist()
    assert generate(model, prompt, max_new_tokens=20, greedy=True) == [theirs]


def test_shape_mismatch_is_a_value_error(hf_model):
    config = config_from_hf_gpt2(hf_model.config).replace(d_ff=64)
    with pytest.raises(ValueError, match="ffn.linear1.weight"):
        from_hf_gpt2(hf_model.state_dict(), config)
