"""The Image Transformer's ONNX graph, teacher-forced ``images (+ labels, + low_res) -> logits
(B, C, H, W, 256)`` (exported by attnlab.interop.onnx_export; batch dynamic, image sizes as built)."""

from __future__ import annotations

import torch

from attnlab.interop.onnx_export import GraphModule, OnnxGraph


def graph(model) -> OnnxGraph:
    """The Image Transformer, teacher-forced: ``images (+ labels, + low_res) -> logits (B, C, H, W, 256)``,
    its conditioning passed by keyword."""
    c = model.config
    names = [name for name, wanted in (("labels", c.num_classes), ("low_res", c.low_resolution)) if wanted]

    def example(batch, length, generator):
        inputs = {"images": torch.randint(0, 256, (batch, c.channels, c.height, c.width), generator=generator)}
        if c.num_classes:
            inputs["labels"] = torch.randint(0, c.num_classes, (batch,), generator=generator)
        if c.low_resolution:
            inputs["low_res"] = torch.randint(0, 256, (batch, c.channels, c.low_resolution, c.low_resolution),
                                              generator=generator)
        return inputs
    module = GraphModule(model, lambda model, images, *conditioning: model(images, **dict(zip(names, conditioning))))
    return OnnxGraph(module, ["images", *names], ["logits"], example, frozenset({"images", "labels", "low_res"}))
