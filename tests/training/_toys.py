"""Tiny model, data and loss shared by the training tests and the torchrun worker.

Nothing here depends on attnlab's models: the trainer must work on any module.
"""

from __future__ import annotations

import torch

from attnlab.training import ListBatchSource, label_smoothed_cross_entropy

PAD = 0
VOCAB = 11


class TinyLM(torch.nn.Module):
    """Embedding -> dropout -> linear: enough parameters and randomness to test a training loop."""

    def __init__(self, vocab: int = VOCAB, dim: int = 8, dropout: float = 0.0) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.dropout = torch.nn.Dropout(dropout)
        self.hidden = torch.nn.Linear(dim, dim)
        self.out = torch.nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # (B, T) -> (B, T, V)
        return self.out(torch.tanh(self.hidden(self.dropout(self.embed(tokens)))))


def make_model(seed: int = 0, dropout: float = 0.0) -> TinyLM:
    torch.manual_seed(seed)
    return TinyLM(dropout=dropout)


def loss_fn(model: torch.nn.Module, batch: dict) -> tuple[torch.Tensor, int, dict]:
    """The trainer's loss contract: summed smoothed loss, token count, summed NLL."""
    loss = label_smoothed_cross_entropy(model(batch["tokens"]), batch["target"], epsilon=0.1, ignore_index=PAD)
    return loss.loss_sum, loss.num_tokens, {"nll": loss.nll_sum}


def make_batches(count: int, seed: int = 0, batch_size: int = 3, max_len: int = 7) -> list[dict]:
    """Random batches with different amounts of padding, so token counts differ between batches."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        tokens = torch.randint(1, VOCAB, (batch_size, max_len), generator=generator)
        target = torch.randint(1, VOCAB, (batch_size, max_len), generator=generator)
        lengths = torch.randint(1, max_len + 1, (batch_size,), generator=generator)
        padding = torch.arange(max_len) >= lengths[:, None]
        batches.append({"tokens": tokens.masked_fill(padding, PAD), "target": target.masked_fill(padding, PAD)})
    return batches


def make_source(count: int = 8, seed: int = 0) -> ListBatchSource:
    return ListBatchSource(make_batches(count, seed), shuffle=True, seed=seed)
