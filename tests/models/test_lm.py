"""DecoderLM: shapes, causality, padding, the fast decode step, presets, save/load."""

import pytest
import torch

import attnlab
from attnlab.models.lm import DecoderLM, DecoderLMConfig


def tiny(**overrides) -> DecoderLM:
    return attnlab.create_model("lm_tiny", **overrides).eval()


@pytest.mark.parametrize("name", ["lm_tiny", "lm_char_mini", "lm_char_small", "gpt2_small"])
def test_presets_are_registered_and_valid(name):
    config = attnlab.models.get_preset(name)
    assert isinstance(config, DecoderLMConfig) and config.family == "decoder_lm"


def test_gpt2_small_has_124m_parameters():
    with torch.device("meta"):
        model = DecoderLM(attnlab.models.get_preset("gpt2_small"))
    assert model.num_parameters() == 124_439_808  # GPT-2 small, tied output projection


def test_forward_shape_and_tied_output():
    model = tiny()
    logits = model(torch.randint(0, 64, (3, 10)))
    assert logits.shape == (3, 10, 64)
    assert model.lm_head.weight is model.embed.weight


@pytest.mark.parametrize("overrides", [{}, {"norm_first": False}, {"positional": "sinusoidal"},
                                       {"scale_embeddings": True, "activation": "relu"}])
def test_causality(overrides):
    """Changing a future token never changes an earlier position's logits."""
    model = tiny(**overrides)
    ids = torch.randint(0, 64, (2, 12))
    changed = ids.clone()
    changed[:, 7:] = (changed[:, 7:] + 1) % 64
    torch.testing.assert_close(model(ids)[:, :7], model(changed)[:, :7])


@pytest.mark.parametrize("overrides", [{}, {"norm_first": False}, {"positional": "sinusoidal"}])
def test_left_padding_equals_unpadded(overrides):
    model = tiny(**overrides)
    ids = torch.randint(1, 64, (1, 9))
    padded = torch.cat([torch.zeros(1, 4, dtype=torch.long), ids], dim=1)
    mask = torch.cat([torch.zeros(1, 4, dtype=torch.bool), torch.ones(1, 9, dtype=torch.bool)], dim=1)
    torch.testing.assert_close(model(padded, attention_mask=mask)[:, 4:], model(ids))


@pytest.mark.parametrize("overrides", [{}, {"norm_first": False}, {"positional": "sinusoidal", "activation": "gelu"},
                                       {"scale_embeddings": True, "activation": "relu"}])
def test_prefill_and_decode_step_equal_full_forward(overrides):
    model = tiny(**overrides)
    ids = torch.randint(1, 64, (3, 14))
    mask = torch.ones(3, 14, dtype=torch.bool)
    mask[1, :5] = False
    mask[2, :2] = False
    ids[~mask] = 0
    full = model(ids, attention_mask=mask)
    cache = model.new_cache(3, 20)
    torch.testing.assert_close(model.prefill(ids[:, :8], cache, mask[:, :8]), full[:, 7])
    for t in range(8, 14):
        torch.testing.assert_close(model.step(ids[:, t], cache), full[:, t], atol=1e-5, rtol=1e-5)
    assert cache.length == 14 and cache.positions.tolist() == [14, 9, 12]


def test_bad_inputs_raise_value_error():
    model = tiny()
    with pytest.raises(ValueError, match="token id 64"):
        model(torch.tensor([[1, 64]]))
    with pytest.raises(ValueError, match="max_positions=64"):
        model(torch.zeros(1, 65, dtype=torch.long))
    with pytest.raises(ValueError, match="attention_mask"):
        model(torch.zeros(1, 5, dtype=torch.long), attention_mask=torch.ones(1, 4))
    with pytest.raises(ValueError, match="num_heads=5"):
        DecoderLMConfig(d_model=32, num_heads=5)


def test_save_and_load(tmp_path):
    model = tiny(positional="sinusoidal")
    model.save_pretrained(tmp_path)
    loaded = attnlab.load_model(tmp_path)
    assert loaded.config == model.config
    ids = torch.randint(0, 64, (2, 6))
    torch.testing.assert_close(loaded(ids), model(ids))
    assert loaded.lm_head.weight is loaded.embed.weight


def test_overfits_a_short_text():
    """A tiny model memorises one sentence and regenerates it greedily."""
    from attnlab.data.text import CharTokenizer
    from attnlab.generation import generate_text

    text = "to be, or not to be: that is the question."
    tokenizer = CharTokenizer.from_text(text)
    model = tiny(vocab_size=tokenizer.vocab_size).train()
    ids = torch.tensor([tokenizer.encode(text)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(150):
        logits = model(ids[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05
    assert generate_text(model, tokenizer, "to be, o", max_new_tokens=len(text) - 8, greedy=True) == [text[8:]]
