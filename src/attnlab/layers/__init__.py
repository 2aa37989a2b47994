"""Building blocks shared by every model family."""

from attnlab.layers.blocks import DecoderLayer, EncoderLayer, LayerAttention, TransformerLayer, TransformerStack
from attnlab.layers.embedding import TokenEmbedding
from attnlab.layers.feedforward import FeedForward
from attnlab.layers.positional import (LearnedPositionalEmbedding, SinusoidalPositionalEncoding, build_positional,
                                       sinusoidal_table)

__all__ = ["DecoderLayer", "EncoderLayer", "LayerAttention", "TransformerLayer", "TransformerStack", "TokenEmbedding",
           "FeedForward", "LearnedPositionalEmbedding", "SinusoidalPositionalEncoding", "build_positional",
           "sinusoidal_table"]
