"""BERT's ONNX graph, ``(ids, attention_mask, token_type_ids) -> hidden`` (exported by
attnlab.interop.onnx_export; its example inputs are the BERT families' shared ones,
attnlab.tasks.bert.onnx_example)."""

from __future__ import annotations

from attnlab.interop.onnx_export import GraphModule, OnnxGraph
from attnlab.tasks.bert import onnx_example


def graph(model) -> OnnxGraph:
    """BERT ``(ids, attention_mask, token_type_ids) -> hidden`` (the last row padded)."""
    module = GraphModule(model, lambda model, ids, attention_mask, token_type_ids: model(
        ids, attention_mask=attention_mask, token_type_ids=token_type_ids).hidden)
    return OnnxGraph(module, ["ids", "attention_mask", "token_type_ids"], ["hidden"], onnx_example(model))
