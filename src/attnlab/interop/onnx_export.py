"""ONNX export of attnlab models with dynamic batch and length axes, checked with onnxruntime.

One graph per model: BERT ``(ids, attention_mask, token_type_ids) -> hidden`` (a BERT text
classifier: ``-> logits``), the
decoder-only LM and the Music Transformer ``ids -> logits``, the translation Transformer
``(src_ids, tgt_in_ids) -> logits`` (teacher-forced: encoder and decoder in one graph), the
ViT ``images -> logits`` (normalised pixels), the captioner ``(images, tgt_in_ids) ->
logits``, text-to-image ``(text_ids, codes) -> logits`` and the Image Transformer ``images
(+ labels, + low_res) -> logits (B, C, H, W, 256)`` (teacher-forced; batch dynamic, image
sizes as built). The VQ-VAE and the scene-attribute reader are not exported
(:data:`NOT_EXPORTED` says why). Each family's registration (attnlab.families) names its
graph function here (``onnx``), or says why it has none (``not_exported``). For decoding outside torch the
translation model is also exported in two parts (:func:`export_translation_parts`): the
encoder ``src_ids -> (memory, memory_mask)``, run once per source, and the decoder
``(tgt_in_ids, memory, memory_mask) -> logits``, run once per generated token over the
prefix (no key/value cache in the graph); :func:`onnx_greedy_translate` decodes with them. torch's TorchScript-based
exporter with ``dynamic_axes`` keeps batch and length symbolic (checked on other shapes
than the example); Python-side input checks (token ids in range) run at export time only,
so the graph trusts its inputs as any ONNX model does.

The example inputs contain padding, so the padding-mask path is the one recorded (BERT
skips the mask when nothing is padded, a data-dependent branch a trace would freeze).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

__all__ = ["export_onnx", "example_inputs", "OnnxGraph", "onnx_parity", "export_translation_parts", "parts_parity",
           "onnx_greedy_translate"]


class _BertGraph(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> Tensor:
        return self.model(ids, attention_mask=attention_mask, token_type_ids=token_type_ids).hidden


class _BertClassifierGraph(_BertGraph):
    def forward(self, ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> Tensor:
        return self.model.classify(ids, attention_mask=attention_mask, token_type_ids=token_type_ids)


class _LMGraph(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids: Tensor) -> Tensor:
        return self.model(ids)


class _TranslationGraph(nn.Module):
    """The padded teacher-forced forward only (the tracer would pass every parameter of
    ``Transformer.forward`` positionally, its keyword-only ``varlen`` too)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, src_ids: Tensor, tgt_in_ids: Tensor) -> Tensor:
        return self.model(src_ids, tgt_in_ids)


class _EncoderGraph(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, src_ids: Tensor) -> tuple[Tensor, Tensor]:
        memory, memory_mask = self.model.encode(src_ids)  # mask (B, 1, 1, S) -> (B, S)
        return memory, memory_mask.reshape(src_ids.shape[0], src_ids.shape[1])


class _DecoderGraph(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, tgt_in_ids: Tensor, memory: Tensor, memory_mask: Tensor) -> Tensor:
        return self.model.decode(tgt_in_ids, memory, memory_mask[:, None, None, :])


class _ForwardGraph(nn.Module):
    """``model(*inputs)``, positionally (ViT, the captioner, text-to-image)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, *inputs: Tensor) -> Tensor:
        return self.model(*inputs)


class _ImageTransformerGraph(nn.Module):
    """The Image Transformer's teacher-forced logits, with its conditioning by keyword."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.names = [name for name, wanted in (("labels", model.config.num_classes),
                                                ("low_res", model.config.low_resolution)) if wanted]

    def forward(self, images: Tensor, *conditioning: Tensor) -> Tensor:
        return self.model(images, **dict(zip(self.names, conditioning)))


# Models that are parts of a family, not a family (no registration names them), and why
# ONNX export leaves them out.
NOT_EXPORTED = {
    "VQVAE": "the VQ-VAE is the text-to-image model's image tokenizer (its codebook lookup is an argmin over "
             "distances with a straight-through estimator); export the text-to-image model's directory instead",
    "SceneAttributeReader": "the scene-attribute reader is text-to-image's fidelity judge, not a model to deploy",
}


@dataclass
class OnnxGraph:
    """What a family exports: the module to trace, its input and output names,
    ``example(batch, length, generator) -> {input: tensor}`` (valid random inputs, padding
    in the last row where the inputs have any) and the inputs whose non-batch sizes are
    fixed by the model (images, codes, labels); the others get a dynamic length.
    ``per_input`` names the outputs with one row per input and no length axis (a
    classifier's logits)."""

    module: nn.Module
    inputs: list[str]
    outputs: list[str]
    example: Callable[[int, int, torch.Generator], dict[str, Tensor]]
    fixed: frozenset[str] = frozenset()
    per_input: frozenset[str] = frozenset()


def _graph(model) -> OnnxGraph:
    """The graph of ``model``'s family (its registration's ``onnx``, attnlab.families)."""
    from attnlab.families import family_for_config

    family = family_for_config(getattr(model.config, "family", None) or "")
    name = type(model).__name__
    if family is None:
        why = NOT_EXPORTED.get(name, "no ONNX graph is defined for this model class")
        raise ValueError(f"ONNX export does not cover {name}: {why}")
    return family.onnx_graph(model)


def _token_ids(model, low: int = 0):
    """``ids(batch, n, generator)``: random token ids in the vocabulary, never the padding id
    (and at least ``low``: keep clear of pad/bos/eos)."""
    c = model.config
    pad = getattr(c, "pad_id", 0)

    def ids(batch: int, n: int, generator: torch.Generator) -> Tensor:
        values = torch.randint(low, c.vocab_size, (batch, n), generator=generator)
        return values.masked_fill(values == pad, (pad + 1) % c.vocab_size if low == 0 else low)
    return ids


def bert_graph(model) -> OnnxGraph:
    """BERT ``(ids, attention_mask, token_type_ids) -> hidden`` (the last row padded)."""
    ids = _token_ids(model)

    def example(batch, length, generator):
        tokens, mask = ids(batch, length, generator), torch.ones(batch, length, dtype=torch.long)
        mask[-1, length - 2:] = 0
        tokens[-1, length - 2:] = getattr(model.config, "pad_id", 0)
        return {"ids": tokens, "attention_mask": mask, "token_type_ids": torch.zeros_like(tokens)}
    return OnnxGraph(_BertGraph(model), ["ids", "attention_mask", "token_type_ids"], ["hidden"], example)


def bert_classifier_graph(model) -> OnnxGraph:
    """A BERT text classifier ``(ids, attention_mask, token_type_ids) -> logits (B, labels)``."""
    graph = bert_graph(model)
    return OnnxGraph(_BertClassifierGraph(model), graph.inputs, ["logits"], graph.example,
                     per_input=frozenset({"logits"}))


def lm_graph(model) -> OnnxGraph:
    """A decoder-only LM (the Music Transformer is one too): ``ids -> logits``."""
    ids = _token_ids(model)
    return OnnxGraph(_LMGraph(model), ["ids"], ["logits"], lambda batch, length, g: {"ids": ids(batch, length, g)})


def translation_graph(model) -> OnnxGraph:
    """The translation Transformer, teacher-forced: ``(src_ids, tgt_in_ids) -> logits``."""
    ids = _token_ids(model, low=3)

    def example(batch, length, generator):
        source = ids(batch, length, generator)
        source[-1, length - 2:] = model.config.pad_id
        return {"src_ids": source, "tgt_in_ids": ids(batch, max(2, length - 2), generator)}
    return OnnxGraph(_TranslationGraph(model), ["src_ids", "tgt_in_ids"], ["logits"], example)


def vit_graph(model) -> OnnxGraph:
    """The ViT: ``images (normalised pixels) -> logits``."""
    c = model.config

    def example(batch, length, generator):
        return {"images": torch.randn(batch, c.in_channels, c.image_size, c.image_size, generator=generator)}
    return OnnxGraph(_ForwardGraph(model), ["images"], ["logits"], example, frozenset({"images"}))


def captioner_graph(model) -> OnnxGraph:
    """The captioner, teacher-forced: ``(images, tgt_in_ids) -> logits``."""
    c = model.config

    def example(batch, length, generator):
        images = torch.rand(batch, c.in_channels, c.image_size, c.image_size, generator=generator)
        return {"images": images, "tgt_in_ids": torch.randint(3, c.vocab_size, (batch, length), generator=generator)}
    return OnnxGraph(_ForwardGraph(model), ["images", "tgt_in_ids"], ["logits"], example, frozenset({"images"}))


def text_to_image_graph(model) -> OnnxGraph:
    """Text-to-image, teacher-forced: ``(text_ids, codes) -> logits``."""
    c = model.config

    def example(batch, length, generator):
        return {"text_ids": torch.randint(0, c.text_vocab_size, (batch, c.text_length), generator=generator),
                "codes": torch.randint(0, c.image_vocab_size, (batch, c.image_tokens), generator=generator)}
    return OnnxGraph(_ForwardGraph(model), ["text_ids", "codes"], ["logits"], example,
                     frozenset({"text_ids", "codes"}))


def image_transformer_graph(model) -> OnnxGraph:
    """The Image Transformer, teacher-forced: ``images (+ labels, + low_res) -> logits (B, C, H, W, 256)``."""
    c = model.config
    module = _ImageTransformerGraph(model)

    def example(batch, length, generator):
        inputs = {"images": torch.randint(0, 256, (batch, c.channels, c.height, c.width), generator=generator)}
        if c.num_classes:
            inputs["labels"] = torch.randint(0, c.num_classes, (batch,), generator=generator)
        if c.low_resolution:
            inputs["low_res"] = torch.randint(0, 256, (batch, c.channels, c.low_resolution, c.low_resolution),
                                              generator=generator)
        return inputs
    return OnnxGraph(module, ["images", *module.names], ["logits"], example,
                     frozenset({"images", "labels", "low_res"}))


def _dynamic_axes(graph: OnnxGraph) -> dict[str, dict[int, str]]:
    """Batch is dynamic everywhere; token inputs also have a dynamic length (the output
    follows the decoder's, or the only input's, length). Fixed inputs keep the sizes the
    model was built for."""
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
    return _graph(model).example(batch, length, torch.Generator().manual_seed(seed))


def export_onnx(model, path: str | os.PathLike, *, opset: int = 17) -> list[str]:
    """Write ``model`` (eval mode, CPU, float32) to ``path`` as ONNX with dynamic batch and
    length axes; returns the graph's input names."""
    graph = _graph(model.eval())
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
    graph = _graph(model)
    c = model.config
    tokens = [name for name in graph.inputs if name not in graph.fixed]
    images = "images" in graph.inputs
    patches = (c.image_size // c.patch_size) ** 2 if getattr(c, "family", "") == "vit" else None
    if batch is None:
        text = "batch and token length dynamic" if tokens else "batch dynamic"
        if images:
            channels = getattr(c, "in_channels", getattr(c, "channels", None))
            side = getattr(c, "image_size", None) or getattr(c, "height", None)
            text += f" (images of {channels}x{side}x{side}" + (f", {patches} patches each)" if patches else ")")
        return text
    text = f"{batch} images" if images else f"batch {batch}"
    if patches:
        text += f" of {patches} patches each"
    return text + (f", {length} tokens" if tokens else "")


def onnx_parity(model, path: str | os.PathLike, *, batch: int = PARITY_BATCH, length: int = PARITY_LENGTH,
                seed: int = 1) -> float:
    """Max |onnxruntime - torch| on fresh random inputs of another batch size and length
    than the export's example (so the dynamic axes are exercised)."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(Path(path)), providers=["CPUExecutionProvider"])
    graph = _graph(model.eval())
    inputs = graph.example(batch, length, torch.Generator().manual_seed(seed))
    names = graph.inputs
    with torch.no_grad():
        expected = graph.module(*(inputs[name] for name in names))
    got = session.run(None, {name: inputs[name].numpy() for name in names})[0]
    return float((torch.from_numpy(got) - expected).abs().max())


def _check_translation(model):
    from attnlab.models.transformer import Transformer

    if not isinstance(model, Transformer):
        raise ValueError(f"encoder/decoder parts are exported for a translation Transformer, not {type(model).__name__}")


def export_translation_parts(model, encoder_path: str | os.PathLike, decoder_path: str | os.PathLike, *,
                             opset: int = 17) -> None:
    """Write a translation Transformer's encoder and decoder as two ONNX graphs with dynamic
    batch and length axes: ``src_ids (B, S) -> memory (B, S, d), memory_mask (B, S) bool``
    (True = a real source token) and ``tgt_in_ids (B, T), memory, memory_mask -> logits
    (B, T, V)``."""
    _check_translation(model)
    model = model.eval()
    example = example_inputs(model)
    source, target = example["src_ids"], example["tgt_in_ids"]
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        memory, memory_mask = _EncoderGraph(model)(source)
        torch.onnx.export(_EncoderGraph(model), (source,), str(encoder_path), dynamo=False, opset_version=opset,
                          input_names=["src_ids"], output_names=["memory", "memory_mask"],
                          dynamic_axes={"src_ids": {0: "batch", 1: "source_length"},
                                        "memory": {0: "batch", 1: "source_length"},
                                        "memory_mask": {0: "batch", 1: "source_length"}})
        torch.onnx.export(_DecoderGraph(model), (target, memory, memory_mask), str(decoder_path), dynamo=False,
                          opset_version=opset, input_names=["tgt_in_ids", "memory", "memory_mask"],
                          output_names=["logits"],
                          dynamic_axes={"tgt_in_ids": {0: "batch", 1: "target_length"},
                                        "memory": {0: "batch", 1: "source_length"},
                                        "memory_mask": {0: "batch", 1: "source_length"},
                                        "logits": {0: "batch", 1: "target_length"}})


def onnx_greedy_translate(encoder_path, decoder_path, src_ids, *, bos_id: int, eos_id: int,
                          max_length: int) -> list[list[int]]:
    """Greedy decoding with the two graphs of :func:`export_translation_parts` in
    onnxruntime (no torch needed): ``src_ids`` ``(B, S)`` int64 array -> one token list per
    source, without BOS, ending at EOS or after ``max_length`` tokens. Each step reruns the
    decoder over the whole prefix (the graphs hold no cache), so it costs O(T²) in the target
    length: fine for sentences, the torch decoder's cache is faster for long outputs."""
    import numpy as np
    import onnxruntime

    encoder = onnxruntime.InferenceSession(str(encoder_path), providers=["CPUExecutionProvider"])
    decoder = onnxruntime.InferenceSession(str(decoder_path), providers=["CPUExecutionProvider"])
    src_ids = np.asarray(src_ids, dtype=np.int64)
    memory, memory_mask = encoder.run(None, {"src_ids": src_ids})
    batch = src_ids.shape[0]
    prefix = np.full((batch, 1), bos_id, dtype=np.int64)
    done = np.zeros(batch, dtype=bool)
    for _ in range(max_length):
        logits = decoder.run(None, {"tgt_in_ids": prefix, "memory": memory, "memory_mask": memory_mask})[0]
        best = logits[:, -1].argmax(-1)
        best[done] = eos_id  # finished rows only pad with EOS (dropped below)
        prefix = np.concatenate([prefix, best[:, None]], axis=1)
        done |= best == eos_id
        if done.all():
            break
    outputs = []
    for row in prefix[:, 1:].tolist():
        outputs.append(row[: row.index(eos_id) + 1] if eos_id in row else row)
    return outputs


def parts_parity(model, encoder_path, decoder_path, *, batch: int = 3, length: int = 11, seed: int = 1):
    """Max |onnxruntime - torch| of the encoder's memory and of the decoder's logits, on
    inputs of other shapes than the export's."""
    import onnxruntime

    _check_translation(model)
    inputs = example_inputs(model.eval(), batch=batch, length=length, seed=seed)
    with torch.no_grad():
        memory, memory_mask = _EncoderGraph(model)(inputs["src_ids"])
        logits = _DecoderGraph(model)(inputs["tgt_in_ids"], memory, memory_mask)
    encoder = onnxruntime.InferenceSession(str(encoder_path), providers=["CPUExecutionProvider"])
    decoder = onnxruntime.InferenceSession(str(decoder_path), providers=["CPUExecutionProvider"])
    got_memory = encoder.run(None, {"src_ids": inputs["src_ids"].numpy()})[0]
    got_logits = decoder.run(None, {"tgt_in_ids": inputs["tgt_in_ids"].numpy(), "memory": memory.numpy(),
                                    "memory_mask": memory_mask.numpy()})[0]
    return (float((torch.from_numpy(got_memory) - memory).abs().max()),
            float((torch.from_numpy(got_logits) - logits).abs().max()))
