"""The translation Transformer's ONNX graphs (named by this family's registration, exported
by attnlab.interop.onnx_export): teacher-forced ``(src_ids, tgt_in_ids) -> logits``
(encoder and decoder in one graph), and for decoding outside torch its two parts, written
beside it: the encoder ``src_ids -> (memory, memory_mask)``, run once per source, and the
decoder ``(tgt_in_ids, memory, memory_mask) -> logits``, run once per generated token over the
prefix (no key/value cache in the graph); :func:`onnx_greedy_translate` decodes with them."""

from __future__ import annotations

import torch

from attnlab.interop.onnx_export import GraphModule, OnnxGraph, pad_last_row, token_ids


def graph(model) -> OnnxGraph:
    """The translation Transformer, teacher-forced: ``(src_ids, tgt_in_ids) -> logits``, with
    its encoder and decoder as the parts this family's registration names (``onnx_parts``)."""
    ids = token_ids(model, low=3)

    def example(batch, length, generator):
        source = ids(batch, length, generator)
        pad_last_row(source, model.config.pad_id)
        return {"src_ids": source, "tgt_in_ids": ids(batch, max(2, length - 2), generator)}

    def encode(model, src_ids):
        memory, memory_mask = model.encode(src_ids)  # mask (B, 1, 1, S) -> (B, S)
        return memory, memory_mask.reshape(src_ids.shape[0], src_ids.shape[1])

    encoder = GraphModule(model, encode)

    def decoder_example(batch, length, generator):
        inputs = example(batch, length, generator)
        with torch.no_grad():
            memory, memory_mask = encoder(inputs["src_ids"])
        return {"tgt_in_ids": inputs["tgt_in_ids"], "memory": memory, "memory_mask": memory_mask}

    source_axes = {0: "batch", 1: "source_length"}
    parts = {
        "encoder": OnnxGraph(encoder, ["src_ids"], ["memory", "memory_mask"],
                             lambda batch, length, generator: {"src_ids": example(batch, length, generator)["src_ids"]},
                             axes={"src_ids": source_axes, "memory": source_axes, "memory_mask": source_axes}),
        "decoder": OnnxGraph(GraphModule(model, lambda model, tgt_in_ids, memory, memory_mask: model.decode(
                                 tgt_in_ids, memory, memory_mask[:, None, None, :])),
                             ["tgt_in_ids", "memory", "memory_mask"], ["logits"], decoder_example,
                             axes={"tgt_in_ids": {0: "batch", 1: "target_length"}, "memory": source_axes,
                                   "memory_mask": source_axes, "logits": {0: "batch", 1: "target_length"}}),
    }
    return OnnxGraph(GraphModule(model), ["src_ids", "tgt_in_ids"], ["logits"], example, parts=parts,
                     parts_note="the halves for step-by-step decoding (onnx_greedy_translate)")


def onnx_greedy_translate(encoder_path, decoder_path, src_ids, *, bos_id: int, eos_id: int,
                          max_length: int) -> list[list[int]]:
    """Greedy decoding with the two parts ``attnlab export-onnx`` writes beside a translation
    model's graph (OUT.encoder.onnx, OUT.decoder.onnx) in onnxruntime (no torch needed):
    ``src_ids`` ``(B, S)`` int64 array -> one token list per source, without BOS, ending at
    EOS or after ``max_length`` tokens. Each step reruns the decoder over the whole prefix
    (the graphs hold no cache), so it costs O(T²) in the target length: fine for sentences,
    the torch decoder's cache is faster for long outputs."""
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
