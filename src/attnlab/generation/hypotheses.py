"""What every encoder–decoder search shares: the :class:`Hypothesis` it returns, the GNMT
length penalty, the argument checks and the output-length limits.

Both the eager searches (:mod:`attnlab.generation.search`) and the fixed-shape / CUDA-graph
beam search (:mod:`attnlab.generation.graphs`) import these from here, so neither imports
the other's internals (search only dispatches to graphs, lazily, for ``cuda_graph=True``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import Tensor

__all__ = ["Hypothesis", "check_beam_arguments", "check_common", "length_penalty", "max_lengths"]


@dataclass(frozen=True)
class Hypothesis:
    """One output: ``tokens`` (without BOS, with EOS if it ended), total ``log_prob``,
    length-penalised ``score``."""

    tokens: list[int]
    log_prob: float
    score: float


def length_penalty(length: int | Tensor, alpha: float):
    """GNMT length penalty lp(L) = ((5 + L) / 6)^alpha."""
    return ((5.0 + length) / 6.0) ** alpha


def check_common(source, max_len_a: float, max_len_b: float, alpha: float) -> None:
    """Every search's argument checks: a non-empty batched source, length limits that allow a
    token, a non-negative length-penalty ``alpha`` (ValueError naming the argument)."""
    if not hasattr(source, "shape") or len(source.shape) < 2 or source.shape[0] == 0:
        raise ValueError(f"the source must be a non-empty (batch, ...) tensor, got "
                         f"{tuple(source.shape) if hasattr(source, 'shape') else type(source).__name__}")
    if max_len_a < 0 or max_len_b < 0:
        raise ValueError(f"max_len_a={max_len_a} and max_len_b={max_len_b} must be >= 0")
    # Any positive a or b allows at least one token (the limit is rounded up), e.g. a=0.5, b=0.
    if max_len_a == 0 and max_len_b == 0:
        raise ValueError(f"max_len_a={max_len_a}, max_len_b={max_len_b} allow no output token")
    if alpha < 0:
        raise ValueError(f"alpha={alpha} must be >= 0")


def check_beam_arguments(source, beam_size: int, nbest: int, max_len_a: float, max_len_b: float,
                         alpha: float) -> None:
    """:func:`check_common` plus the beam's own: ``beam_size >= 1``, ``1 <= nbest <= beam_size``."""
    if beam_size < 1:
        raise ValueError(f"beam_size={beam_size} must be >= 1")
    if not 1 <= nbest <= beam_size:
        raise ValueError(f"nbest={nbest} must be between 1 and beam_size={beam_size}")
    check_common(source, max_len_a, max_len_b, alpha)


def max_lengths(model, memory: Tensor, memory_mask: Tensor | None, max_len_a: float, max_len_b: float) -> list[int]:
    """Each source's output limit ``ceil(a * real_source_length + b)`` (at least 1), capped by
    the model's ``max_output_length()``."""
    batch, source_len = memory.shape[0], memory.shape[1]
    if memory_mask is None:
        source_lengths = [source_len] * batch
    else:
        source_lengths = memory_mask.expand(batch, *memory_mask.shape[1:]).reshape(batch, -1).sum(-1).tolist()
    limits = [max(1, math.ceil(max_len_a * n + max_len_b)) for n in source_lengths]
    bound = model.max_output_length()  # e.g. a learned position table
    return limits if bound is None else [min(limit, bound) for limit in limits]
