"""ONNX export of attnlab models with dynamic batch and length axes, checked with onnxruntime.

The shared machinery only: each family's registration (attnlab.families) names its graph
function (``onnx``, in the family's package: ``families/<name>/onnx.py``), or says why it has
none (``not_exported``; a model that is a part of a family, such as text-to-image's VQ-VAE,
is named in its family's ``parts_not_exported``). A graph function returns an
:class:`OnnxGraph`: the module to trace (:class:`GraphModule`), its input and output names
and valid random example inputs. This module traces it with torch's TorchScript-based
exporter, whose ``dynamic_axes`` keep batch and length symbolic (checked on other shapes than
the example: :func:`onnx_parity`); Python-side input checks (token ids in range) run at
export time only, so the graph trusts its inputs as any ONNX model does. A family may also
export named parts beside the whole graph (``Family.onnx_parts``, ``OnnxGraph.parts``): the
translation Transformer's encoder and decoder, for decoding outside torch.

The example inputs contain padding, so the padding-mask path is the one recorded (BERT
skips the mask when nothing is padded, a data-dependent branch a trace would freeze).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor, nn

__all__ = ["export_onnx", "example_inputs", "OnnxGraph", "GraphModule", "onnx_graph", "onnx_parity",
           "token_ids", "pad_last_row", "describe_shapes"]


class GraphModule(nn.Module):
    """What the tracer runs: ``call(model, *inputs)``, by default ``model(*inputs)``
    (positionally: the tracer would otherwise pass every parameter of the model's
    ``forward``, keyword-only ones too)."""

    def __init__(self, model, call: Callable[..., Tensor | tuple[Tensor, ...]] | None = None):
        super().__init__()
        self.model = model
        self.call = call

    def forward(self, *inputs: Tensor):
        return self.model(*inputs) if self.call is None else self.call(self.model, *inputs)


@dataclass
class OnnxGraph:
    """What a family exports: the module to trace, its input and output names,
    ``example(batch, length, generator) -> {input: tensor}`` (valid random inputs, padding
    in the last row where the inputs have any) and the inputs whose non-batch sizes are
    fixed by the model (images, codes, labels); the others get a dynamic length.
    ``per_input`` names the outputs with one row per input and no length axis (a
    classifier's logits); ``axes`` replaces that rule with the graph's own dynamic axes.
    ``patches``: what each image is cut into (the ViT), for the command line's words.
    ``parts``: the graphs exported beside this one (by the names of the family's
    ``onnx_parts``), and ``parts_note`` what they are for."""

    module: nn.Module
    inputs: list[str]
    outputs: list[str]
    example: Callable[[int, int, torch.Generator], dict[str, Tensor]]
    fixed: frozenset[str] = frozenset()
    per_input: frozenset[str] = frozenset()
    axes: Mapping[str, Mapping[int, str]] | None = None
    patches: int | None = None
    parts: Mapping[str, OnnxGraph] = field(default_factory=dict)
    parts_note: str = ""


def onnx_graph(model, part: str | None = None) -> OnnxGraph:
    """The graph of ``model``'s family (its registration's ``onnx``, attnlab.families), or
    its part ``part``; ValueError saying why for a model no family exports."""
    from attnlab.families import families, family_for_config

    config_family = getattr(getattr(model, "config", None), "family", None) or ""
    family = family_for_config(config_family)
    name = type(model).__name__
    if family is None:
        why = next((f.parts_not_exported[config_family] for f in families()
                    if config_family in f.parts_not_exported), "no ONNX graph is defined for this model class")
        raise ValueError(f"ONNX export does not cover {name}: {why}")
    graph = family.onnx_graph(model)
    if part is None:
        return graph
    if part not in graph.parts:
        raise ValueError(f"{family.title} models have no ONNX part {part!r}; parts: {', '.join(graph.parts) or 'none'}")
    return graph.parts[part]


def token_ids(model, low: int = 0):
    """``ids(batch, n, generator)``: random token ids in the vocabulary, never the padding id
    (and at least ``low``: keep clear of pad/bos/eos)."""
    c = model.config
    pad = getattr(c, "pad_id", 0)

    def ids(batch: int, n: int, generator: torch.Generator) -> Tensor:
        values = torch.randint(low, c.vocab_size, (batch, n), generator=generator)
        return values.masked_fill(values == pad, (pad + 1) % c.vocab_size if low == 0 else low)
    return ids


def pad_last_row(tokens: Tensor, pad_id: int, count: int = 2) -> Tensor:
    """Pad the last ``count`` tokens of ``tokens``' last row in place (so the example records
    the padding path); returns the attention mask (1 = a real token)."""
    mask = torch.ones_like(tokens)
    mask[-1, tokens.shape[1] - count:] = 0
    tokens[-1, tokens.shape[1] - count:] = pad_id
    return mask


def _dynamic_axes(graph: OnnxGraph) -> dict[str, dict[int, str]]:
    """Batch is dynamic everywhere; token inputs also have a dynamic length (the output
    follows the decoder's, or the only input's, length). Fixed inputs keep the sizes the
    model was built for."""
    if graph.axes is not None:
        return {name: dict(axes) for name, axes in graph.axes.items()}
    inputs, fixed = graph.inputs, graph.fixed
    axes = {name: {0: "batch"} if name in fixed else {0: "batch", 1: f"{name}_length"} for name in inputs}
    if "attention_mask" in axes:  # BERT: one length for its three inputs
        axes["attention_mask"] = axes["token_type_ids"] = {0: "batch", 1: "ids_length"}
    token_inputs = [name for name in inputs if name not in fixed and name not in ("attention_mask", "token_type_ids")]
    for name in graph.outputs:
        axes[name] = ({0: "batch", 1: axes[token_inputs[-1]][1]} if token_inputs and name not in graph.per_input
                      else {0: "batch"})
    return axes


def example_inputs(model, batch: int = 2, length: int = 7, seed: int = 0) -> dict[str, Tensor]:
    """Random valid inputs for ``model``'s graph, with right padding in the last row."""
    return onnx_graph(model).example(batch, length, torch.Generator().manual_seed(seed))


def export_onnx(model, path: str | os.PathLike, *, opset: int = 17, part: str | None = None) -> list[str]:
    """Write ``model`` (eval mode, CPU, float32), or its part ``part``, to ``path`` as ONNX
    with dynamic batch and length axes; returns the graph's input names."""
    graph = onnx_graph(model.eval(), part)
    example = graph.example(2, 7, torch.Generator().manual_seed(0))
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the tracer's notes on Python-side checks
        torch.onnx.export(graph.module, tuple(example[name] for name in graph.inputs), str(path), dynamo=False,
                          input_names=graph.inputs, output_names=graph.outputs, dynamic_axes=_dynamic_axes(graph),
                          opset_version=opset)
    return graph.inputs


PARITY_BATCH, PARITY_LENGTH = 3, 11  # onnx_parity's other shapes than the export's example (2, 7)


def describe_shapes(model, batch: int | None = None, length: int | None = None) -> str:
    """How the command line says ``model``'s graph shapes in the words of its inputs: with no
    ``batch``, what is dynamic ("batch and token length dynamic"; an image model: "batch
    dynamic (images of 1x28x28, 16 patches each)"); with ``batch`` and ``length``, the
    shapes :func:`onnx_parity` checks ("3 images of 16 patches each", "batch 3, 11 tokens")
    — never a token length for a model that takes no tokens."""
    graph = onnx_graph(model)
    tokens = [name for name in graph.inputs if name not in graph.fixed]
    images = "images" in graph.inputs
    patches = graph.patches
    if batch is None:
        text = "batch and token length dynamic" if tokens else "batch dynamic"
        if images:
            shape = graph.example(1, 2, torch.Generator().manual_seed(0))["images"].shape[1:]
            text += f" (images of {'x'.join(map(str, shape))}" + (f", {patches} patches each)" if patches else ")")
        return text
    text = f"{batch} images" if images else f"batch {batch}"
    if patches:
        text += f" of {patches} patches each"
    return text + (f", {length} tokens" if tokens else "")


def onnx_parity(model, path: str | os.PathLike, *, part: str | None = None, batch: int = PARITY_BATCH,
                length: int = PARITY_LENGTH, seed: int = 1) -> float:
    """Max |onnxruntime - torch| of the first output of ``model``'s graph (or its part
    ``part``) on fresh random inputs of another batch size and length than the export's
    example (so the dynamic axes are exercised)."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(Path(path)), providers=["CPUExecutionProvider"])
    graph = onnx_graph(model.eval(), part)
    inputs = graph.example(batch, length, torch.Generator().manual_seed(seed))
    names = graph.inputs
    with torch.no_grad():
        expected = graph.module(*(inputs[name] for name in names))
    if isinstance(expected, tuple):
        expected = expected[0]
    got = torch.from_numpy(session.run(None, {name: inputs[name].numpy() for name in names})[0]).to(expected.dtype)
    # A logit the model suppresses (MarianMT's pad: -inf) matches the same infinity; an
    # infinity in one output only, or a NaN, stays a mismatch (inf or nan).
    same_infinity = torch.isinf(got) & torch.isinf(expected) & (got.sign() == expected.sign())
    return float((got - expected).abs().masked_fill(same_infinity, 0.0).max())
