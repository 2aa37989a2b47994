"""The Music Transformer family: a DecoderLM with a music encoding; the paper's presets."""

import pytest
import torch

import attnlab
from attnlab.data import music
from attnlab.models.music import ENCODING_VOCAB_SIZES, MusicTransformer


def test_vocabularies_match_the_encodings():
    assert ENCODING_VOCAB_SIZES == {"performance": music.PERFORMANCE_VOCAB_SIZE, "jsb": music.JSB_VOCAB_SIZE}


@pytest.mark.parametrize("preset,layers,d_model,d_ff,heads,positional,span", [
    ("music_jsb_baseline", 5, 256, 1024, 8, "sinusoidal", None),
    ("music_jsb_relative", 5, 512, 512, 8, "none", 256),
    ("music_jsb_small", 5, 256, 1024, 8, "none", 256),
    ("music_performance_small", 4, 256, 1024, 8, "none", 256)])
def test_presets_follow_the_paper(preset, layers, d_model, d_ff, heads, positional, span):
    with torch.device("meta"):
        model = attnlab.create_model(preset)
    c = model.config
    assert isinstance(model, MusicTransformer)
    assert (c.num_layers, c.d_model, c.d_ff, c.num_heads, c.positional) == (layers, d_model, d_ff, heads, positional)
    if span is None:
        assert c.attention == "causal"
    else:
        assert c.attention["name"] == "relative_skew" and c.attention["max_relative_position"] == span
        pattern = model.decoder.layers[0].self_attn.pattern
        assert pattern.relative_embeddings.shape == (heads, span + 1, d_model // heads)


def test_config_checks_the_encoding():
    with pytest.raises(ValueError, match="choose one of"):
        attnlab.create_model("music_tiny", encoding="abc")
    with pytest.raises(ValueError, match="does not match the jsb encoding's 132"):
        attnlab.create_model("music_tiny", vocab_size=391)


def test_save_load_keeps_family_encoding_and_outputs(tmp_path):
    model = attnlab.create_model("music_tiny").eval()
    model.save_pretrained(tmp_path)
    loaded = attnlab.load_model(tmp_path)
    assert type(loaded) is MusicTransformer and loaded.config.encoding == "jsb"
    ids = torch.randint(0, 132, (2, 40))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids), model(ids))


def test_relative_model_runs_past_its_span_and_absolute_baseline_switches():
    relative = attnlab.create_model("music_tiny").eval()  # span 16
    absolute = attnlab.create_model("music_tiny", positional="sinusoidal", attention="causal").eval()
    ids = torch.randint(3, 132, (1, 100))
    with torch.no_grad():
        assert torch.isfinite(relative(ids)).all() and torch.isfinite(absolute(ids)).all()
    assert not any("relative" in name for name, _ in absolute.named_parameters())


def test_attention_maps_reach_the_explorer_interface():
    """MusicTransformer is a DecoderLM: the explorer's attention_maps gives its relative
    attention weights (causal rows summing to one)."""
    from attnlab.viz.explorer.maps import attention_maps

    model = attnlab.create_model("music_tiny").eval()
    maps = attention_maps(model, ids=torch.randint(3, 132, (1, 24)))["self"]
    assert maps.shape == (2, 4, 24, 24)
    torch.testing.assert_close(maps.sum(-1), torch.ones(2, 4, 24))
    assert maps.triu(1).abs().max() == 0
