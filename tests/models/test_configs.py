"""Every family's config derives from the shared LayerConfig: the layer fields are declared
and checked once, and each family only changes defaults and adds its own."""

import dataclasses

import pytest

from attnlab.models.base import LayerConfig, StackConfig
from attnlab.models.bert import BertConfig
from attnlab.models.lm import DecoderLMConfig
from attnlab.models.transformer import TransformerConfig
from attnlab.models.vit import VisionTransformerConfig

FAMILIES = [BertConfig, DecoderLMConfig, TransformerConfig, VisionTransformerConfig]
SMALL = {"d_model": 32, "num_heads": 4, "d_ff": 64}


@pytest.mark.parametrize("config_class", FAMILIES)
@pytest.mark.parametrize("bad, message", [
    ({"num_heads": 5}, "not divisible by num_heads"),
    ({"d_ff": 0}, "d_ff=0 must be >= 1"),
    ({"attention_dropout": 1.0}, "must be in [0, 1)"),
    ({"activation": "swishy"}, "activation='swishy'"),
])
def test_shared_layer_fields_are_checked_the_same_way_in_every_family(config_class, bad, message):
    assert issubclass(config_class, LayerConfig)
    with pytest.raises(ValueError) as error:
        config_class(**{**SMALL, **bad})
    assert message in str(error.value)


def test_layer_fields_are_declared_once():
    shared = {f.name for f in dataclasses.fields(LayerConfig)}
    for config_class in FAMILIES:
        own = set(vars(config_class).get("__annotations__", {}))
        # a family may restate a shared field only to change its default
        for name in own & shared:
            assert getattr(config_class, name) != getattr(LayerConfig, name), (config_class.__name__, name)
    assert issubclass(TransformerConfig, StackConfig) and issubclass(DecoderLMConfig, StackConfig)


def test_families_honour_or_refuse_the_shared_fields():
    import attnlab

    with pytest.raises(ValueError, match="BERT is post-LN"):
        BertConfig(**SMALL, norm_first=True)
    vit = attnlab.create_model("vit_tiny_patch4_28", activation="relu", norm_first=False)
    layer = vit.encoder.layers[0]
    assert layer.norm_first is False and layer.ffn.activation == "relu"
