"""ONNX export of attnlab models with dynamic batch and length axes, checked with onnxruntime.

One graph per model: BERT ``(ids, attention_mask, token_type_ids) -> hidden``, the
decoder-only LM ``ids -> logits``, the translation Transformer ``(src_ids, tgt_in_ids) ->
logits`` (teacher-forced: encoder and decoder in one graph). torch's TorchScript-based
exporter with ``dynamic_axes`` keeps batch and length symbolic (checked on other shapes
than the example); Python-side input checks (token ids in range) run at export time only,
so the graph trusts its inputs as any ONNX model does.

The example inputs contain padding, so the padding-mask path is the one recorded (BERT
skips the mask when nothing is padded, a data-dependent branch a trace would freeze).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import torch
from torch import Tensor, nn

__all__ = ["export_onnx", "example_inputs", "onnx_parity"]


class _BertGraph(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> Tensor:
        return self.model(ids, attention_mask=attention_mask, token_type_ids=token_type_ids).hidden


class _LMGraph(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids: Tensor) -> Tensor:
        return self.model(ids)


def _graph(model) -> tuple[nn.Module, list[str], list[str]]:
    """The module to trace, its input names and output names."""
    from attnlab.models.bert import BertEncoder
    from attnlab.models.lm import DecoderLM
    from attnlab.models.transformer import Transformer

    if isinstance(model, BertEncoder):
        return _BertGraph(model), ["ids", "attention_mask", "token_type_ids"], ["hidden"]
    if isinstance(model, DecoderLM):
        return _LMGraph(model), ["ids"], ["logits"]
    if isinstance(model, Transformer):
        return model, ["src_ids", "tgt_in_ids"], ["logits"]
    raise ValueError(f"ONNX export knows BertEncoder, DecoderLM and Transformer, not {type(model).__name__}")


def example_inputs(model, batch: int = 2, length: int = 7, seed: int = 0) -> dict[str, Tensor]:
    """Random valid inputs for ``model``'s graph, with right padding in the last row."""
    from attnlab.models.bert import BertEncoder
    from attnlab.models.transformer import Transformer

    generator = torch.Generator().manual_seed(seed)
    c = model.config
    pad = getattr(c, "pad_id", 0)
    low = 3 if isinstance(model, Transformer) else 0  # keep clear of pad/bos/eos

    def ids(n):
        values = torch.randint(low, c.vocab_size, (batch, n), generator=generator)
        return values.masked_fill(values == pad, (pad + 1) % c.vocab_size if low == 0 else low)

    if isinstance(model, BertEncoder):
        tokens, mask = ids(length), torch.ones(batch, length, dtype=torch.long)
        mask[-1, length - 2:] = 0
        tokens[-1, length - 2:] = pad
        return {"ids": tokens, "attention_mask": mask, "token_type_ids": torch.zeros_like(tokens)}
    if isinstance(model, Transformer):
        source = ids(length)
        source[-1, length - 2:] = pad
        return {"src_ids": source, "tgt_in_ids": ids(max(2, length - 2))}
    return {"ids": ids(length)}


def export_onnx(model, path: str | os.PathLike, *, opset: int = 17) -> list[str]:
    """Write ``model`` (eval mode, CPU, float32) to ``path`` as ONNX with dynamic batch and
    length axes; returns the graph's input names."""
    module, inputs, outputs = _graph(model.eval())
    example = example_inputs(model)
    axes = {name: {0: "batch", 1: f"{name}_length"} for name in inputs}
    axes["attention_mask"] = axes["token_type_ids"] = {0: "batch", 1: "ids_length"}  # BERT: one length
    axes = {name: axes[name] for name in inputs}
    first = inputs[-1] if len(inputs) == 2 else inputs[0]  # outputs follow the decoder's/ids' length
    axes.update({name: {0: "batch", 1: axes[first][1]} for name in outputs})
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the tracer's notes on Python-side checks
        torch.onnx.export(module, tuple(example[name] for name in inputs), str(path), dynamo=False,
                          input_names=inputs, output_names=outputs, dynamic_axes=axes, opset_version=opset)
    return inputs


def onnx_parity(model, path: str | os.PathLike, *, batch: int = 3, length: int = 11, seed: int = 1) -> float:
    """Max |onnxruntime - torch| on fresh random inputs of another batch size and length
    than the export's example (so the dynamic axes are exercised)."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(Path(path)), providers=["CPUExecutionProvider"])
    inputs = example_inputs(model, batch=batch, length=length, seed=seed)
    module, names, _ = _graph(model.eval())
    with torch.no_grad():
        expected = module(*(inputs[name] for name in names))
    got = session.run(None, {name: inputs[name].numpy() for name in names})[0]
    return float((torch.from_numpy(got) - expected).abs().max())
