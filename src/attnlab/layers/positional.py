"""Position information: the paper's sinusoids and learned tables."""

from __future__ import annotations


import torch
from torch import Tensor, nn


SINUSOIDAL_LAYOUTS = ("interleaved", "halves")


def sinusoidal_table(length: int, d_model: int, *, base: float = 10000.0, dtype=torch.float32,
                     layout: str = "interleaved") -> Tensor:
    """``(length, d_model)`` table, "Attention Is All You Need" §3.5:

    PE(pos, 2i) = sin(pos / base^(2i/d_model)),  PE(pos, 2i+1) = cos(pos / base^(2i/d_model)).

    ``layout="interleaved"``: sines on even and cosines on odd dimensions, as in the paper.
    ``layout="halves"``: the same sines and cosines, the sines in the first ceil(d/2)
    dimensions and the cosines after them (Marian's layout, HuggingFace's
    ``MarianSinusoidalPositionalEmbedding``). Computed in float64, then cast.
    """
    if layout not in SINUSOIDAL_LAYOUTS:
        raise ValueError(f"unknown sinusoidal layout {layout!r}; choose one of {SINUSOIDAL_LAYOUTS}")
    position = torch.arange(length, dtype=torch.float64)[:, None]
    even = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = position / base ** (even / d_model)  # (length, ceil(d/2)); frequency falls with i
    sines, cosines = torch.sin(angle), torch.cos(angle[:, : d_model // 2])
    if layout == "halves":
        return torch.cat([sines, cosines], dim=1).to(dtype)
    table = torch.empty(length, d_model, dtype=torch.float64)
    table[:, 0::2] = sines
    table[:, 1::2] = cosines
    return table.to(dtype)


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed sinusoidal positions (nothing is saved). The table grows on demand; with
    ``max_positions`` it is fixed at that many rows, as Marian's is, and a position beyond
    it raises ValueError (as for a learned table). ``layout``: see :func:`sinusoidal_table`."""

    def __init__(self, d_model: int, initial_length: int = 1024, base: float = 10000.0, *,
                 layout: str = "interleaved", max_positions: int | None = None):
        super().__init__()
        self.d_model = d_model
        self.base = base
        self.layout = layout
        if max_positions is not None:
            self.max_positions = max_positions
            initial_length = min(initial_length, max_positions)
        self.register_buffer("table", sinusoidal_table(initial_length, d_model, base=base, layout=layout),
                             persistent=False)

    def forward(self, positions: Tensor) -> Tensor:
        """Integer positions of any shape -> ``(*positions.shape, d_model)``."""
        self.ensure_length(int(positions.max()) + 1 if positions.numel() else 0)
        return self.table[positions]

    def ensure_length(self, needed: int) -> None:
        """Grow the table to cover positions ``< needed`` (before a run of :meth:`lookup`)."""
        if needed > self.table.shape[0]:
            bound = getattr(self, "max_positions", None)
            if bound is not None and needed > bound:
                raise ValueError(f"position {needed - 1} is beyond the sinusoidal position table "
                                 f"(max_positions={bound}); use shorter sequences")
            length = max(needed, 2 * self.table.shape[0])
            length = length if bound is None else min(length, bound)
            # Keep the buffer's device and dtype (the module may have been moved or cast).
            table = sinusoidal_table(length, self.d_model, base=self.base, dtype=self.table.dtype, layout=self.layout)
            self.table = table.to(self.table.device)

    def lookup(self, positions: Tensor) -> Tensor:
        """:meth:`forward` without the length check (no host sync): positions must be covered."""
        return nn.functional.embedding(positions, self.table)

    def extra_repr(self) -> str:
        bound = f", max_positions={self.max_positions}" if hasattr(self, "max_positions") else ""
        return f"d_model={self.d_model}, base={self.base}, layout={self.layout}{bound}"


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


MARIAN_POSITIONAL = "sinusoidal_halves"
"""Marian's table (sines in the first half, cosines in the second, ``max_positions`` rows, a
longer input refused): a kind only the encoder–decoder accepts (``TransformerConfig.
positional_kinds``), for models converted from MarianMT (:mod:`attnlab.interop.hf_marian`)."""


def check_positional(kind: str, allowed: tuple[str, ...] = POSITIONAL_KINDS) -> None:
    """Raise ValueError unless ``kind`` is one of ``allowed`` (default :data:`POSITIONAL_KINDS`)."""
    if kind not in allowed:
        raise ValueError(f"unknown positional encoding {kind!r}; choose one of {', '.join(map(repr, allowed))}")


def build_positional(kind: str, d_model: int, max_positions: int) -> nn.Module | None:
    """The position module of ``kind`` (see :data:`POSITIONAL_KINDS`, :data:`MARIAN_POSITIONAL`);
    None for "none"."""
    check_positional(kind, POSITIONAL_KINDS + (MARIAN_POSITIONAL,))
    if kind == "sinusoidal":
        return SinusoidalPositionalEncoding(d_model, initial_length=min(max_positions, 4096))
    if kind == MARIAN_POSITIONAL:
        return SinusoidalPositionalEncoding(d_model, initial_length=min(max_positions, 4096), layout="halves",
                                            max_positions=max_positions)
    if kind == "learned":
        return LearnedPositionalEmbedding(max_positions, d_model)
    return None

