"""A beam search step's candidates: each source's best continuations of its hypotheses.

Shared by the eager search (:mod:`attnlab.generation.search`) and the ahead-of-time compiled
step (:mod:`attnlab.generation.aot`, whose beam search package ends with the same selection,
:func:`~attnlab.generation.aot.candidates_fused`); neither imports the other for it.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["CHUNK", "beam_and_token", "search_candidates", "top_candidates"]

CHUNK = 64
"""Elements per chunk of :func:`top_candidates`."""


def top_candidates(scores: Tensor, m: int) -> tuple[Tensor, Tensor]:
    """``scores.topk(m, dim=1)`` (values sorted, largest first), faster for long rows.

    The m largest elements of a row lie in the m chunks (of :data:`CHUNK` elements) with the
    largest maxima: an element outside them is smaller than those m maxima. So the chunks'
    maxima (one vectorised pass), their top m, and the top m of those chunks' elements give the
    same values; of elements that tie exactly, which index is returned may differ, as it may
    between top-k kernels. At beam search's k·V candidates (4 × 8,000) ~1.2× aten's top-k, at
    32 sources ~5×, at 4 × 32,000 ~3.7× (one thread, docs/benchmarks.md)."""
    rows, n = scores.shape
    chunks = n // CHUNK
    if chunks < 16 * m:  # short rows: nothing to gain
        return scores.topk(m, dim=1)
    body = scores.narrow(1, 0, chunks * CHUNK).view(rows, chunks, CHUNK)
    best_chunks = body.amax(dim=2).topk(m, dim=1).indices  # (rows, m)
    candidates = body.gather(1, best_chunks[:, :, None].expand(rows, m, CHUNK)).view(rows, m * CHUNK)
    tail = n - chunks * CHUNK  # the elements after the last whole chunk, always candidates
    if tail:
        candidates = torch.cat([candidates, scores.narrow(1, chunks * CHUNK, tail)], dim=1)
    values, position = candidates.topk(m, dim=1)
    in_chunk = position < m * CHUNK
    chunk_start = best_chunks.gather(1, torch.div(position, CHUNK, rounding_mode="floor").clamp_(max=m - 1)) * CHUNK
    index = torch.where(in_chunk, chunk_start + position % CHUNK, position + (chunks - m) * CHUNK)
    return values, index


def search_candidates(log_probs: Tensor, beam_scores: Tensor, beam: int, m: int, *,
                      in_place: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """Beam search's step after the model's: each source's ``m`` best continuations of its ``beam``
    hypotheses (``beam_scores`` ``(B·beam,)``, rows ``b·beam + j``), scored ``beam_scores[row] +
    log_probs[row, token]``: their scores ``(B, m)`` (largest first), the hypothesis each extends
    (``j``) and its token, as :func:`top_candidates` finds them.
    ``log_probs`` has a row per hypothesis, or one per source (a first step: its hypotheses are
    one); ``in_place``: the scores are added into it. The eager search calls this on its step's
    log-probabilities; a beam search package (:attr:`attnlab.generation.aot.Layout.candidates`) ends with the same
    (:func:`attnlab.generation.aot.candidates_fused`), so its step
    returns 3·m numbers a source instead of ``beam`` rows of log-probabilities."""
    vocab = log_probs.shape[-1]
    sources, m = beam_scores.shape[0] // beam, min(m, beam * vocab)
    scores, added = log_probs.view(sources, -1, vocab), beam_scores.view(sources, beam, 1)
    scores = scores.add_(added) if in_place and scores.shape[1] == beam else scores + added
    values, index = top_candidates(scores.view(sources, beam * vocab), m)
    return (values, *beam_and_token(index, vocab))


def beam_and_token(index: Tensor, vocab: int) -> tuple[Tensor, Tensor]:
    """A position in a source's flattened ``beam · vocab`` scores as (the hypothesis, its token)."""
    beams = torch.div(index, vocab, rounding_mode="floor")
    return beams, index - beams * vocab
