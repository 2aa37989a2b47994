"""Position-wise feed-forward network ("Attention Is All You Need" §3.3)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.linear import Linear

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu}


class FeedForward(nn.Module):
    """FFN(x) = linear2(dropout(act(linear1(x)))), applied to each position alike.

    ``activation`` is "relu" (the paper), "gelu", "gelu_tanh" (GPT-2's approximation) or
    "silu" (swish: x·sigmoid(x), MarianMT's).
    """

    def __init__(self, d_model: int, d_ff: int, *, activation: str = "relu", dropout: float = 0.0):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}")
        self.activation = activation
        self.linear1 = Linear(d_model, d_ff)
        self.linear2 = Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        # .forward, not __call__: module hooks cost more than a decode step's tiny products.
        h = ACTIVATIONS[self.activation](self.linear1.forward(x))
        if self.training and self.dropout.p > 0:
            h = self.dropout(h)
        return self.linear2.forward(h)
