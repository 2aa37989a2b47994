"""The BERT text classifier's ONNX graph, ``(ids, attention_mask, token_type_ids) -> logits
(B, labels)`` (exported by attnlab.interop.onnx_export; its example inputs are the BERT
families' shared ones, attnlab.tasks.bert.onnx_example)."""

from __future__ import annotations

from attnlab.interop.onnx_export import GraphModule, OnnxGraph
from attnlab.tasks.bert import onnx_example


def graph(model) -> OnnxGraph:
    """A BERT text classifier ``(ids, attention_mask, token_type_ids) -> logits (B, labels)``."""
    module = GraphModule(model, lambda model, ids, attention_mask, token_type_ids: model.classify(
        ids, attention_mask=attention_mask, token_type_ids=token_type_ids))
    return OnnxGraph(module, ["ids", "attention_mask", "token_type_ids"], ["logits"], onnx_example(model),
                     per_input=frozenset({"logits"}))
