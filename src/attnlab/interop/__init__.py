"""Converters from other libraries: key maps plus transposes, tested for exact outputs."""

from attnlab.interop.torch_nn import TransformerStacks, from_torch_transformer

__all__ = ["TransformerStacks", "from_torch_transformer"]
