"""Position information: the paper's sinusoids and learned tables."""

from __future__ import annotations


import torch
from torch import Tensor, nn


def sinusoidal_table(length: int, d_model: int, *, base: float = 10000.0, dtype=torch.float32) -> Tensor:
    """``(length, d_model)`` table, "Attention Is All You Need" §3.5:

    PE(pos, 2i) = sin(pos / base^(2i/d_model)),  PE(pos, 2i+1) = cos(pos / base^(2i/d_model)).

    Sines on even and cosines on odd dimensions, interleaved as in the paper (some
    libraries concatenate the two halves instead). Computed in float64, then cast.
    """
    position = torch.arange(length, dtype=torch.float64)[:, None]
    even = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = position / base ** (even / d_model)  # (length, ceil(d/2)); frequency falls with i
    table = torch.empty(length, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return table.to(dtype)


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed sinusoidal positions for any length (the table grows on demand; nothing is saved)."""

    def __init__(self, d_model: int, initial_length: int = 1024, base: float = 10000.0):
        super().__init__()
        self.d_model = d_model
        self.base = base
        self.register_buffer("table", sinusoidal_table(initial_length, d_model, base=base), persistent=False)

    def forward(self, positions: Tensor) -> Tensor:
        """Integer positions of any shape -> ``(*positions.shape, d_model)``."""
        self.ensure_length(int(positions.max()) + 1 if positions.numel() else 0)
        return self.table[positions]

    def ensure_length(self, needed: int) -> None:
        """Grow the table to cover positions ``< needed`` (before a run of :meth:`lookup`)."""
        if needed > self.table.shape[0]:
            length = max(needed, 2 * self.table.shape[0])
            # Keep the buffer's device and dtype (the module may have been moved or cast).
            table = sinusoidal_table(length, self.d_model, base=self.base, dtype=self.table.dtype)
            self.table = table.to(self.table.device)

    def lookup(self, positions: Tensor) -> Tensor:
        """:meth:`forward` without the length check (no host sync): positions must be covered."""
        return nn.functional.embedding(positions, self.table)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, base={self.base}"


class LearnedPositionalEmbedding(nn.Module):
    """A learned table of ``max_positions`` position vectors (GPT, BERT, ViT style)."""

    def __init__(self, max_positions: int, d_model: int):
        super().__init__()
        self.max_positions = max_positions
        self.weight = nn.Parameter(torch.empty(max_positions, d_model))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, positions: Tensor) -> Tensor:
        if positions.numel() and int(positions.max()) >= self.max_positions:
            raise ValueError(f"position {int(positions.max())} is beyond the learned position table "
                             f"(max_positions={self.max_positions}); use shorter sequences")
        return self.weight[positions]

    def ensure_length(self, needed: int) -> None:
        if needed > self.max_positions:
            raise ValueError(f"position {needed - 1} is beyond the learned position table "
                             f"(max_positions={self.max_positions}); use shorter sequences")

    def lookup(self, positions: Tensor) -> Tensor:
        """:meth:`forward` without the range check (no host sync)."""
        return nn.functional.embedding(positions, self.weight)


POSITIONAL_KINDS = ("sinusoidal", "learned", "none")
"""What a config's ``positional`` may be. "none" (NoPE) adds no position information: only
a causal stack can then tell positions apart (the mask breaks the permutation symmetry;
Haviv et al. 2022, "Transformer Language Models without Positional Encodings Still Learn
Positional Information")."""


def check_positional(kind: str) -> None:
    """Raise ValueError unless ``kind`` is one of :data:`POSITIONAL_KINDS`."""
    if kind not in POSITIONAL_KINDS:
        raise ValueError(f"unknown positional encoding {kind!r}; choose one of {', '.join(map(repr, POSITIONAL_KINDS))}")


def build_positional(kind: str, d_model: int, max_positions: int) -> nn.Module | None:
    """The position module of ``kind`` (see :data:`POSITIONAL_KINDS`); None for "none"."""
    check_positional(kind)
    if kind == "sinusoidal":
        return SinusoidalPositionalEncoding(d_model, initial_length=min(max_positions, 4096))
    if kind == "learned":
        return LearnedPositionalEmbedding(max_positions, d_model)
    return None

