"""TextToImage: one causal stack over [text; image tokens]; cached sampling equals
recomputation; the text conditions the image logits."""

import pytest
import torch

import attnlab
from attnlab.generation.protocols import CausalLM
from attnlab.generation.sampling import choose_next, generate


def _model():
    torch.manual_seed(0)
    return attnlab.create_model("text_to_image_tiny").double().eval()


def _batch(model, batch=3):
    c = model.config
    text = torch.randint(3, c.text_vocab_size, (batch, c.text_length))
    text[:, 0] = c.bos_id
    codes = torch.randint(0, c.image_vocab_size, (batch, c.grid, c.grid))
    return text, codes


def test_shapes_positions_and_protocol():
    model = _model()
    assert isinstance(model, CausalLM)
    c = model.config
    assert c.max_positions == 8 + 16 and c.vocab_size == 32 + 16
    text, codes = _batch(model)
    assert model(text, codes).shape == (3, 16, 16)
    table = model.decoder.positions.table()
    assert table.shape == (24, 32)
    # image cell (r, k) = row r + column k; the text slots have their own vectors
    positions = model.decoder.positions
    torch.testing.assert_close(table[8 + 2 * 4 + 3], positions.row[2] + positions.column[3])
    torch.testing.assert_close(table[:8], positions.text)
    with pytest.raises(ValueError, match="beyond"):
        positions(torch.tensor([24]))


def test_image_tokens_never_attend_to_later_positions():
    model = _model()
    text, codes = _batch(model)
    logits, weights = model(text, codes, need_weights=True)
    for layer in weights:
        attention = layer.self_attn  # (B, H, L, L)
        assert torch.equal(attention.triu(1), torch.zeros_like(attention))
    # changing image token j leaves the predictions of tokens 0..j unchanged, and changes later ones
    changed = codes.clone().view(3, -1)
    changed[:, 9] = (changed[:, 9] + 1) % 16
    other = model(text, changed)
    torch.testing.assert_close(other[:, :10], logits[:, :10], rtol=1e-12, atol=1e-12)
    assert (other[:, 10:] - logits[:, 10:]).abs().max() > 1e-6


def test_text_conditioning_changes_the_logits():
    model = _model()
    text, codes = _batch(model)
    other_text = text.clone()
    other_text[:, 3] = (other_text[:, 3] + 1) % 32
    difference = (model(other_text, codes) - model(text, codes)).abs()
    assert difference[:, 0].max() > 1e-6  # from the very first image token
    assert difference.max() > 1e-6


@pytest.mark.parametrize("greedy", [True, False])
def test_cached_sampling_equals_recomputation(greedy):
    model = _model()
    c = model.config
    text, _ = _batch(model)
    tokens = generate(model, text, max_new_tokens=c.image_tokens, greedy=greedy, temperature=0.9, top_k=5, seed=7)
    assert all(len(row) == c.image_tokens and all(c.text_vocab_size <= t < c.vocab_size for t in row) for row in tokens)
    # recompute: the whole sequence through the teacher-forced forward at every step
    generator = torch.Generator().manual_seed(7)
    prefix = text.clone()
    with torch.no_grad():
        for step in range(c.image_tokens):
            ids = prefix
            hidden = model.decoder(ids, torch.arange(ids.shape[1]))[:, -1]
            logits = hidden.masked_fill(model.text_columns, float("-inf"))
            chosen = choose_next(logits, greedy=greedy, temperature=0.9, top_k=5, generator=generator)
            prefix = torch.cat([prefix, chosen[:, None]], 1)
    assert prefix[:, c.text_length:].tolist() == tokens
    # and the image logits of the forward equal those the cached road saw
    codes = torch.tensor(tokens) - c.text_vocab_size
    cache = model.new_cache(3)
    step_logits = [model.prefill(text, cache)]
    for k in range(c.image_tokens - 1):
        step_logits.append(model.step(torch.tensor(tokens)[:, k], cache))
    cached = torch.stack(step_logits, 1)[..., c.text_vocab_size:]
    torch.testing.assert_close(cached, model(text, codes), rtol=1e-10, atol=1e-10)


def test_bad_inputs():
    model = _model()
    text, codes = _batch(model)
    with pytest.raises(ValueError, match="text_length=8"):
        model(text[:, :5], codes)
    with pytest.raises(ValueError, match="codes"):
        model(text, codes + 16)
    with pytest.raises(ValueError, match="text_ids"):
        model(text + 32, codes)
    with pytest.raises(ValueError, match="4x4 = 16 tokens"):
        model(text, codes.view(3, -1)[:, :10])
    with pytest.raises(ValueError, match="never padded"):
        model.prefill(text, model.new_cache(3), torch.zeros(3, 8))
    with pytest.raises(ValueError, match="positional"):
        attnlab.create_model("text_to_image_tiny", positional="sinusoidal")


def test_save_and_load(tmp_path):
    model = _model().float()
    model.save_pretrained(tmp_path / "m")
    loaded = attnlab.load_model(tmp_path / "m")
    assert loaded.config == model.config
    text, codes = _batch(model)
    torch.testing.assert_close(loaded(text, codes), model(text, codes))


def test_attention_maps_for_the_explorer():
    from attnlab.viz.explorer.maps import attention_maps

    model = _model()
    text, codes = _batch(model, 1)
    groups = attention_maps(model, text_ids=text, codes=codes)
    assert list(groups) == ["self"] and groups["self"].shape == (2, 4, 23, 23)
    assert torch.equal(groups["self"].triu(1), torch.zeros_like(groups["self"]))
