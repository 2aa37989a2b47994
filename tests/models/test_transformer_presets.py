"""Presets, the registry and parameter counts of the encoder–decoder Transformer."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch
from torch import nn

import attnlab
from attnlab.models import Transformer, TransformerConfig, get_preset

# torch.nn.Transformer(512, 8, 6, 6, 2048) and (1024, 16, 6, 6, 4096), final LayerNorms included.
BASE_STACK_PARAMETERS = 44_140_544
BIG_STACK_PARAMETERS = 176_361_472


def torch_transformer_parameters(*args) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.device("meta"):  # shapes only: no memory, no initialisation time
            transformer = nn.Transformer(*args, batch_first=True)
    return sum(p.numel() for p in transformer.parameters())


@pytest.fixture(scope="module")
def base_37000():
    """The paper's base model with its 37,000-token shared vocabulary, really built."""
    return attnlab.create_model("transformer_base", vocab_size=37000)


def test_list_presets_has_the_paper_models_and_test_sizes():
    presets = attnlab.list_presets()
    assert {"transformer_base", "transformer_big", "transformer_small", "transformer_tiny"} <= set(presets)
    assert presets == sorted(presets)


def test_create_model_with_a_vocabulary_override(base_37000):
    model = base_37000
    assert isinstance(model, Transformer)
    assert model.config.vocab_size == 37000
    assert model.src_embed.weight.shape == (37000, 512)
    assert model.output_proj.weight.shape == (37000, 512)
    assert model.training  # a fresh model, not yet put in eval mode


def test_base_and_big_hyperparameters_match_the_paper():
    base, big = get_preset("transformer_base"), get_preset("transformer_big")
    assert (base.num_encoder_layers, base.num_decoder_layers, base.d_model, base.d_ff, base.num_heads, base.dropout) \
        == (6, 6, 512, 2048, 8, 0.1)
    assert (big.num_encoder_layers, big.num_decoder_layers, big.d_model, big.d_ff, big.num_heads, big.dropout) \
        == (6, 6, 1024, 4096, 16, 0.3)
    assert base.share_embeddings and base.tie_output_projection  # §3.4: one matrix for all three


def test_base_stack_parameters_equal_torch_transformer(base_37000):
    expected = torch_transformer_parameters(512, 8, 6, 6, 2048)
    assert expected == BASE_STACK_PARAMETERS
    assert base_37000.num_parameters_without_embeddings() == BASE_STACK_PARAMETERS
    # Tied, shared vocabulary: one V × d_model matrix on top (sinusoids have no parameters).
    assert base_37000.num_parameters() == BASE_STACK_PARAMETERS + 37000 * 512


def test_big_stack_parameters_equal_torch_transformer():
    expected = torch_transformer_parameters(1024, 16, 6, 6, 4096)
    assert expected == BIG_STACK_PARAMETERS
    with torch.device("meta"):  # ~200M parameters: count them without allocating or initialising
        model = attnlab.create_model("transformer_big")
    assert model.num_parameters_without_embeddings() == BIG_STACK_PARAMETERS
    assert model.num_parameters() == BIG_STACK_PARAMETERS + model.config.vocab_size * 1024


@pytest.mark.parametrize("overrides, embedding_matrices", [
    (dict(), 1),
    (dict(tie_output_projection=False), 2),
    (dict(share_embeddings=False), 2),
    (dict(share_embeddings=False, tie_output_projection=False), 3),
])
def test_embedding_parameters_follow_the_tying(overrides, embedding_matrices):
    vocab, d_model = 37000, 512
    with torch.device("meta"):
        model = attnlab.create_model("transformer_base", vocab_size=vocab, **overrides)
    assert model.num_parameters_without_embeddings() == BASE_STACK_PARAMETERS
    assert model.num_parameters() == BASE_STACK_PARAMETERS + embedding_matrices * vocab * d_model
    assert sum(p.numel() for p in model.parameters()) == model.num_parameters()  # nn.Module dedups tied too


def test_separate_vocabularies_and_learned_positions_add_their_tables():
    config = dict(vocab_size=50, tgt_vocab_size=30, share_embeddings=False, d_model=32, positional="learned",
                  max_positions=40)
    tied = attnlab.create_model("transformer_tiny", **config)
    untied = attnlab.create_model("transformer_tiny", tie_output_projection=False, **config)
    stacks = tied.num_parameters_without_embeddings()
    assert tied.num_parameters() == stacks + (50 + 30 + 40) * 32
    assert untied.num_parameters() == stacks + (50 + 30 + 30 + 40) * 32
    assert tied.output_proj.weight is tied.tgt_embed.weight
    assert tied.src_embed.weight is not tied.tgt_embed.weight


def test_tied_model_shares_one_tensor():
    model = attnlab.create_model("transformer_tiny")
    assert model.src_embed.weight is model.tgt_embed.weight is model.output_proj.weight
    assert model.output_proj.bias is None


def test_unknown_preset_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match="transformer_huge"):
        attnlab.create_model("transformer_huge")
    with pytest.raises(ValueError, match="transformer_base"):  # and lists what exists
        attnlab.create_model("transformer_huge")


def test_unknown_override_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match="num_layers_typo"):
        attnlab.create_model("transformer_tiny", num_layers_typo=3)


@pytest.mark.parametrize("overrides, fragment", [
    (dict(d_model=30, num_heads=4), "num_heads=4"),
    (dict(tgt_vocab_size=10, share_embeddings=True), "tgt_vocab_size=10"),
    (dict(positional="rotary"), "rotary"),
    (dict(pad_id=64), "pad_id=64"),
    (dict(eos_id=-1), "eos_id=-1"),
    (dict(activation="swish"), "swish"),
    (dict(num_heads=0), "num_heads=0"),
    (dict(d_model=-32), "d_model=-32"),
    (dict(num_decoder_layers=0), "num_decoder_layers=0"),
    (dict(d_model="32"), "d_model='32' is not an integer"),
    (dict(norm_first="no"), "norm_first='no' is not true or false"),
])
def test_inconsistent_configs_are_value_errors(overrides, fragment):
    with pytest.raises(ValueError) as error:
        attnlab.create_model("transformer_tiny", **overrides)
    assert fragment in str(error.value)


def test_configs_are_frozen_and_presets_return_fresh_values():
    config = get_preset("transformer_tiny")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.d_model = 64  # type: ignore[misc]
    assert config.replace(d_model=64).d_model == 64
    assert get_preset("transformer_tiny").d_model == 32
    assert get_preset("transformer_tiny", d_model=64) == config.replace(d_model=64)
    assert isinstance(config, TransformerConfig)
