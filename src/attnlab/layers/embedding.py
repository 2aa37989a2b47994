"""Token embeddings."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class TokenEmbedding(nn.Module):
    """Token ids -> vectors, multiplied by sqrt(d_model) ("Attention Is All You Need" §3.4).

    Initialised N(0, d_model^-1/2), so the scaled embedding has unit variance and the same
    matrix can serve as the pre-softmax projection when tied.
    """

    def __init__(self, vocab_size: int, d_model: int, *, padding_idx: int | None = None, scale: bool = True):
        super().__init__()
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.padding_idx = padding_idx
        self.multiplier = math.sqrt(d_model) if scale else 1.0
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model))
        nn.init.normal_(self.weight, std=d_model ** -0.5)
        if padding_idx is not None:
            with torch.no_grad():
                self.weight[padding_idx].zero_()

    def forward(self, ids: Tensor) -> Tensor:
        """``(B, L)`` ids -> ``(B, L, d_model)``."""
        x = nn.functional.embedding(ids, self.weight, self.padding_idx)
        return x * self.multiplier if self.multiplier != 1.0 else x

    def extra_repr(self) -> str:
        return f"{self.vocab_size}, {self.d_model}, padding_idx={self.padding_idx}, multiplier={self.multiplier:.4g}"
