"""Token-level losses that return sums, not means.

Training normalises by the number of target tokens in the whole (accumulated,
possibly multi-process) batch, so every loss here returns a *sum* over
non-padding tokens together with the count; the trainer divides once at the end.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

__all__ = ["TokenLoss", "label_smoothed_cross_entropy"]


class TokenLoss(NamedTuple):
    """Sums over the non-padding target tokens of a batch.

    ``loss_sum``: the training objective (label-smoothed cross-entropy), float32
    scalar with gradient. ``nll_sum``: plain negative log-likelihood in nats,
    detached, for perplexity ``exp(nll_sum / num_tokens)``. ``num_tokens``: how
    many targets were not ``ignore_index``.
    """

    loss_sum: torch.Tensor
    nll_sum: torch.Tensor
    num_tokens: int


def label_smoothed_cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    *,
    epsilon: float = 0.1,
    ignore_index: int = -100,
) -> TokenLoss:
    """Label-smoothed cross-entropy summed over non-padding tokens.

    Convention (Szegedy et al. 2016, as used by the Transformer paper, section
    5.4, by fairseq before 2020 and by ``torch.nn.functional.cross_entropy(...,
    label_smoothing=epsilon)``): the smoothing mass ``epsilon`` is spread
    uniformly over all ``V`` classes, so the target class gets
    ``1 - epsilon + epsilon / V`` and every other class ``epsilon / V``. The
    per-token loss is therefore::

        (1 - epsilon) * nll + (epsilon / V) * sum_j -log p_j

    (Current fairseq instead gives the target ``1 - epsilon`` and the others
    ``epsilon / (V - 1)``; the difference is O(epsilon / V).) The padding id is
    an ordinary class here; padding *positions* are excluded via ``ignore_index``.

    Args:
        logits: ``(..., V)`` unnormalised scores, any float dtype; computed in
            float32 so bf16 autocast does not degrade the loss.
        target: ``(...)`` integer class ids, ``ignore_index`` where padded.
        epsilon: smoothing mass in ``[0, 1)``.
        ignore_index: target value marking positions that do not count.
    """
    if not 0.0 <= epsilon < 1.0:
        raise ValueError(f"epsilon must be in [0, 1), got {epsilon!r}")
    if logits.shape[:-1] != target.shape:
        raise ValueError(
            f"logits shape {tuple(logits.shape)} must be target shape {tuple(target.shape)} plus a vocabulary axis"
        )
    vocab_size = logits.size(-1)
    logits = logits.reshape(-1, vocab_size).float()  # (N, V)
    target = target.reshape(-1)  # (N,)
    keep = target != ignore_index
    kept_targets = target[keep]
    if kept_targets.numel() and (kept_targets.min() < 0 or kept_targets.max() >= vocab_size):
        bad = kept_targets[(kept_targets < 0) | (kept_targets >= vocab_size)][0].item()
        raise ValueError(f"target id {bad} is outside the vocabulary [0, {vocab_size})")

    log_probs = F.log_softmax(logits[keep], dim=-1)  # (N_kept, V)
    nll = -log_probs.gather(-1, kept_targets.unsqueeze(-1)).squeeze(-1)  # (N_kept,)
    smooth = -log_probs.sum(-1)  # (N_kept,)  sum over the vocabulary of -log p_j
    loss = (1.0 - epsilon) * nll + (epsilon / vocab_size) * smooth
    return TokenLoss(loss.sum(), nll.detach().sum(), int(kept_targets.numel()))
