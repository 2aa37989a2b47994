"""What the explorer page reads: JSON-ready summaries, thumbnails and per-layer weights.

The page asks for the overview of an analysis first (tokens and shapes), for full weights
one layer at a time, and for the per-head entropy and mean attention distance and the small
thumbnail of every layer x head when it shows them, so hundreds of tokens and dozens of
layers stay quick. Weights travel as
little-endian uint16 (``round(w * 65535)``): exact to 8e-6, half of float32 — as raw
bytes from the server (:func:`quantize_weights`, no base64 or JSON to encode and parse)
and as base64 inside JSON or a self-contained file (:func:`encode_weights`).
"""

from __future__ import annotations

import base64
import math

import numpy as np
import torch
from torch import Tensor

from attnlab.viz.explorer.maps import Analysis, AttentionGroup

QUANT = 65535
THUMBNAIL = 48  # thumbnails are at most THUMBNAIL x THUMBNAIL cells

__all__ = ["QUANT", "THUMBNAIL", "head_entropy", "mean_distance", "summaries", "thumbnails", "quantize_weights",
           "encode_weights", "decode_weights",
           "overview", "thumbnail_payload", "layer_bytes", "layer_payload", "search_pair", "full_payload"]


def head_entropy(weights: Tensor) -> Tensor:
    """Mean entropy (nats) of each head's query rows: ``(layers, heads, Lq, Lk)`` ->
    ``(layers, heads)``. Low: heads that look at one token; log(Lk): uniform heads."""
    return torch.special.entr(weights).sum(-1).mean(-1)  # entr(p) = -p log p, 0 at p = 0; in the input's dtype


def mean_distance(weights: Tensor) -> Tensor:
    """Mean attention distance ``sum_k w[q, k] |q - k|`` averaged over queries, in
    positions: ``(layers, heads)``. For cross-attention the two sequences share no
    positions; the number is then only a rough diagonal-ness."""
    queries, keys = weights.shape[-2:]
    distance = (torch.arange(queries)[:, None] - torch.arange(keys)[None, :]).abs().to(weights.dtype)
    return (weights * distance).sum(-1).mean(-1)


def thumbnails(weights: Tensor, size: int = THUMBNAIL) -> Tensor:
    """Every map shrunk to at most ``size x size`` cells by averaging blocks (adaptive
    average pooling), scaled so each thumbnail's largest cell is 255: uint8
    ``(layers, heads, h, w)``."""
    layers, heads, queries, keys = weights.shape
    small = torch.nn.functional.adaptive_avg_pool2d(weights.reshape(layers * heads, 1, queries, keys).float(),
                                                    (min(size, queries), min(size, keys)))
    peak = small.amax(dim=(-2, -1), keepdim=True).clamp(min=1e-12)
    return (small / peak * 255).round().to(torch.uint8).reshape(layers, heads, *small.shape[-2:])


def quantize_weights(weights: Tensor) -> bytes:
    """Any-shape weights in [0, 1] -> little-endian uint16 ``round(w * QUANT)``, row-major bytes."""
    array = (weights.float().clamp(0, 1) * QUANT).round().to(torch.int32).numpy().astype("<u2")
    return array.tobytes()


def encode_weights(weights: Tensor) -> str:
    """Any-shape weights in [0, 1] -> base64 of :func:`quantize_weights`."""
    return base64.b64encode(quantize_weights(weights)).decode("ascii")


def decode_weights(data: str, shape: tuple[int, ...]) -> np.ndarray:
    """The inverse of :func:`encode_weights` (float64, for tests and notebooks)."""
    return np.frombuffer(base64.b64decode(data), dtype="<u2").reshape(shape).astype(np.float64) / QUANT


def _rounded(values: Tensor, digits: int = 4) -> list:
    return [[round(float(v), digits) for v in row] for row in values]


def summaries(group: AttentionGroup) -> dict:
    """Per-head entropy and mean attention distance ``(layers, heads)``, rounded."""
    return {"group": group.name, "entropy": _rounded(head_entropy(group.weights)),
            "distance": _rounded(mean_distance(group.weights), 3),
            "max_entropy": round(math.log(group.weights.shape[-1]), 4)}


def thumbnail_payload(group: AttentionGroup) -> dict:
    """:func:`thumbnails` of every layer x head of a group: ``{"height", "width", "data"}``,
    ``data`` = base64 of the uint8 ``(layers, heads, h, w)`` cells."""
    thumbs = thumbnails(group.weights)
    return {"group": group.name, "height": thumbs.shape[2], "width": thumbs.shape[3],
            "data": base64.b64encode(thumbs.numpy().tobytes()).decode("ascii")}


def _group_overview(group: AttentionGroup, with_details: bool) -> dict:
    layers, heads, queries, keys = group.weights.shape
    entry = {"name": group.name, "layers": layers, "heads": heads, "queries": queries, "keys": keys,
             "query_tokens": group.query_tokens, "key_tokens": group.key_tokens}
    for side in ("key_cells", "query_cells"):
        cells = getattr(group, side)
        if cells is not None:
            entry[side] = [None if cell is None else [int(cell[0]), int(cell[1])] for cell in cells]
    if with_details:
        entry["thumbnails"] = thumbnail_payload(group)
        entry["summaries"] = summaries(group)
    return entry


def overview(analysis: Analysis, analysis_id: str, *, with_details: bool = False) -> dict:
    """The first answer for a text: the tokens and shapes of every group. The page asks
    for :func:`thumbnail_payload` and :func:`summaries` when it shows them (the first
    drawing needs neither); ``with_details=True`` puts both in (a self-contained file).
    An image input adds ``image``: ``{"src": PNG data URI, "rows", "cols", "height",
    "width"}``, the grid that groups' ``key_cells`` index."""
    payload = {"id": analysis_id, "text": analysis.text, "output": analysis.output,
               "groups": [_group_overview(g, with_details) for g in analysis.groups]}
    if analysis.image is not None:  # the picture the page draws attention to key_cells over
        from attnlab.viz.explorer.inputs import png_data_uri

        view = analysis.image
        payload["image"] = {"src": png_data_uri(view.pixels), "rows": view.rows, "cols": view.cols,
                            "height": int(view.pixels.shape[-2]), "width": int(view.pixels.shape[-1])}
    return payload


def _check_layer(group: AttentionGroup, layer: int) -> None:
    layers = group.weights.shape[0]
    if not 0 <= layer < layers:
        raise ValueError(f"layer={layer} is outside 0..{layers - 1}")


def layer_bytes(group: AttentionGroup, layer: int) -> bytes:
    """All heads of one layer as :func:`quantize_weights` bytes of ``(heads, Lq, Lk)`` (the
    page knows the shape from the overview)."""
    _check_layer(group, layer)
    return quantize_weights(group.weights[layer])


def layer_payload(group: AttentionGroup, layer: int) -> dict:
    """All heads of one layer: ``{"layer", "heads", "queries", "keys", "scale", "data"}``
    with ``data`` = :func:`encode_weights` of ``(heads, Lq, Lk)``."""
    _check_layer(group, layer)
    layers, heads, queries, keys = group.weights.shape
    return {"group": group.name, "layer": layer, "heads": heads, "queries": queries, "keys": keys, "scale": QUANT,
            "data": encode_weights(group.weights[layer])}


def search_pair(group: AttentionGroup, query: int, key: int, top: int = 10) -> dict:
    """The heads that link query token ``query`` to key token ``key`` most strongly:
    ``{"heads": [{"layer", "head", "weight", "rank"}...]}``, strongest first; ``rank`` is
    where ``key`` stands among that head's keys for this query (1 = its favourite)."""
    layers, heads, queries, keys = group.weights.shape
    if not 0 <= query < queries:
        raise ValueError(f"query={query} is outside 0..{queries - 1}")
    if not 0 <= key < keys:
        raise ValueError(f"key={key} is outside 0..{keys - 1}")
    row = group.weights[:, :, query, :]  # (layers, heads, Lk)
    values = row[:, :, key]
    ranks = (row > values[..., None]).sum(-1) + 1
    order = torch.argsort(values.flatten(), descending=True, stable=True)[:top]
    return {"group": group.name, "query": query, "key": key,
            "heads": [{"layer": int(i) // heads, "head": int(i) % heads, "weight": round(float(values.flatten()[i]), 4),
                       "rank": int(ranks.flatten()[i])} for i in order]}


def full_payload(analysis: Analysis, analysis_id: str = "embedded") -> dict:
    """The overview plus every layer of every group, for a self-contained HTML file."""
    payload = overview(analysis, analysis_id, with_details=True)
    for group, entry in zip(analysis.groups, payload["groups"]):
        entry["layer_data"] = [layer_payload(group, i)["data"] for i in range(group.weights.shape[0])]
    return payload
