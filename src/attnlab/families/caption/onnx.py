"""The captioner's ONNX graph, teacher-forced ``(images, tgt_in_ids) -> logits`` (exported by
attnlab.interop.onnx_export)."""

from __future__ import annotations

import torch

from attnlab.interop.onnx_export import GraphModule, OnnxGraph


def graph(model) -> OnnxGraph:
    """The captioner, teacher-forced: ``(images, tgt_in_ids) -> logits``."""
    c = model.config

    def example(batch, length, generator):
        images = torch.rand(batch, c.in_channels, c.image_size, c.image_size, generator=generator)
        return {"images": images, "tgt_in_ids": torch.randint(3, c.vocab_size, (batch, length), generator=generator)}
    return OnnxGraph(GraphModule(model), ["images", "tgt_in_ids"], ["logits"], example, frozenset({"images"}))
