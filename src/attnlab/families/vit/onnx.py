"""The ViT's ONNX graph, ``images (normalised pixels) -> logits`` (exported by
attnlab.interop.onnx_export; a batch of images of the size it was built for)."""

from __future__ import annotations

import torch

from attnlab.interop.onnx_export import GraphModule, OnnxGraph


def graph(model) -> OnnxGraph:
    """The ViT: ``images (normalised pixels) -> logits``."""
    c = model.config

    def example(batch, length, generator):
        return {"images": torch.randn(batch, c.in_channels, c.image_size, c.image_size, generator=generator)}
    return OnnxGraph(GraphModule(model), ["images"], ["logits"], example, frozenset({"images"}),
                     patches=(c.image_size // c.patch_size) ** 2)
