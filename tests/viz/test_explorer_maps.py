"""The attention interface: every family's groups have the right names, shapes and labels,
rows sum to one, and the weights are the model's own (DecoderLM against HuggingFace GPT-2,
and the hidden states behind them give the model's logits)."""

import pytest
import torch

from attnlab import create_model
from attnlab.viz.explorer import attention_maps, load_source
from attnlab.viz.explorer.maps import AttentionGroup, lm_hidden_and_attention


def _check_group(group, layers, heads):
    w = group.weights
    assert w.dtype == torch.float32 and w.shape[:2] == (layers, heads)
    assert w.shape[2:] == (len(group.query_tokens), len(group.key_tokens))
    assert (w.sum(-1) - 1).abs().max() < 1e-5 * w.shape[-1]
    assert w.min() >= 0


def test_translation_source_has_three_groups(translation_dir):
    source = load_source(translation_dir)
    analysis = source.analyse("ein mann liest")
    assert [g.name for g in analysis.groups] == ["encoder self", "decoder self", "cross"]
    encoder, decoder, cross = analysis.groups
    for g in analysis.groups:
        _check_group(g, 2, 4)
    assert encoder.query_tokens[-1] == "</s>" and cross.key_tokens == encoder.key_tokens
    assert decoder.query_tokens[0] == "<s>" and len(cross.query_tokens) == len(decoder.query_tokens)
    # causal: no decoder query looks at a later position
    assert decoder.weights.triu(1).abs().max() == 0
    assert isinstance(analysis.output, str)


def test_lm_source_generates_and_is_causal(lm_dir):
    source = load_source(lm_dir)
    analysis = source.analyse("But soft", generate=5)
    (group,) = analysis.groups
    _check_group(group, 2, 4)
    assert group.query_tokens[:8] == list("But soft") and len(group.query_tokens) == 13
    assert group.weights.triu(1).abs().max() == 0
    assert len(analysis.output) >= 1
    with pytest.raises(ValueError, match="generate="):
        source.analyse("But", generate=1000)
    with pytest.raises(ValueError, match="limit is 64"):
        source.analyse("a" * 70)
    with pytest.raises(ValueError, match="not in the tokenizer's vocabulary"):
        source.analyse("€")


def test_bert_source_seeds_sentence(minilm_dir):
    source = load_source(minilm_dir)
    analysis = source.analyse(source.default_text)
    (group,) = analysis.groups
    _check_group(group, 6, 12)
    assert group.query_tokens[:3] == ["[CLS]", "the", "animal"] and group.query_tokens[-1] == "[SEP]"
    with pytest.raises(ValueError, match="more than 512 tokens"):
        source.analyse("word " * 600)
    with pytest.raises(ValueError, match="empty"):
        source.analyse("   ")


def test_lm_maps_equal_huggingface_gpt2_attentions():
    transformers = pytest.importorskip("transformers")
    from attnlab.interop import from_hf_gpt2

    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=50, n_positions=32, n_embd=24, n_layer=2,
                                                              n_head=3, attn_implementation="eager")).eval()
    model = from_hf_gpt2(hf)
    ids = torch.randint(0, 50, (1, 11))
    with torch.no_grad():
        expected = hf(ids, output_attentions=True).attentions
    maps = attention_maps(model, ids=ids)["self"]
    assert maps.shape == (2, 3, 11, 11)
    assert (maps - torch.stack([a[0] for a in expected])).abs().max() < 1e-5
    # the stack run behind the maps is the model's forward: its hidden states give the logits
    hidden, _ = lm_hidden_and_attention(model, ids)
    with torch.no_grad():
        assert (model.lm_head(hidden) - model(ids)).abs().max() < 1e-5


def test_transformer_maps_from_the_model_method():
    torch.manual_seed(0)
    model = create_model("transformer_tiny").eval()
    src, tgt = torch.randint(3, 64, (1, 7)), torch.randint(3, 64, (1, 5))
    maps = attention_maps(model, src_ids=src, tgt_in_ids=tgt)
    assert {k: tuple(v.shape) for k, v in maps.items()} == {
        "encoder self": (2, 4, 7, 7), "decoder self": (2, 4, 5, 5), "cross": (2, 4, 5, 7)}


def test_unknown_family_and_bad_group():
    with pytest.raises(ValueError, match="does not expose its attention"):
        attention_maps(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="3x3 weights but 2 query"):
        AttentionGroup("x", torch.zeros(1, 1, 3, 3), ["a", "b"], ["a", "b", "c"])


def test_load_source_errors(tmp_path):
    with pytest.raises(ValueError, match="no such model directory"):
        load_source(tmp_path / "nope")
    with pytest.raises(ValueError, match="config.json: no such file"):
        load_source(tmp_path)
    create_model("bert_tiny").save_pretrained(tmp_path / "b")  # an attnlab-format BERT without its vocabulary
    with pytest.raises(ValueError, match=r"b/vocab.txt: no such file; a BERT directory holds its WordPiece vocabulary"):
        load_source(tmp_path / "b")
