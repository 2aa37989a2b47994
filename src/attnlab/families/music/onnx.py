"""The Music Transformer's ONNX graph, ``ids -> logits`` (exported by attnlab.interop.onnx_export)."""

from __future__ import annotations

from attnlab.interop.onnx_export import GraphModule, OnnxGraph, token_ids


def graph(model) -> OnnxGraph:
    """The Music Transformer, a decoder-only model over event tokens: ``ids -> logits``."""
    ids = token_ids(model)
    return OnnxGraph(GraphModule(model), ["ids"], ["logits"], lambda batch, length, g: {"ids": ids(batch, length, g)})
