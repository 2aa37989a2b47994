"""Text-to-image's ONNX graph, teacher-forced ``(text_ids, codes) -> logits`` (exported by
attnlab.interop.onnx_export). Its VQ-VAE and scene-attribute reader are not exported: this
family's registration says why (``parts_not_exported``)."""

from __future__ import annotations

import torch

from attnlab.interop.onnx_export import GraphModule, OnnxGraph


def graph(model) -> OnnxGraph:
    """Text-to-image, teacher-forced: ``(text_ids, codes) -> logits``."""
    c = model.config

    def example(batch, length, generator):
        return {"text_ids": torch.randint(0, c.text_vocab_size, (batch, c.text_length), generator=generator),
                "codes": torch.randint(0, c.image_vocab_size, (batch, c.image_tokens), generator=generator)}
    return OnnxGraph(GraphModule(model), ["text_ids", "codes"], ["logits"], example,
                     frozenset({"text_ids", "codes"}))
