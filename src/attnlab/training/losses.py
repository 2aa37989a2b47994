"""Token-level losses that return sums, not means.

Training normalises by the number of target tokens in the whole (accumulated,
possibly multi-process) batch, so every loss here returns a *sum* over
non-padding tokens together with the count; the trainer divides once at the end.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["TokenLoss", "label_smoothed_cross_entropy", "lm_loss"]


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
        logits: ``(..., V)`` unnormalised scores; float16/bfloat16 are scored in
            float32 so bf16 autocast does not degrade the loss, float64 stays float64.
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
    logits = logits.reshape(-1, vocab_size)  # (N, V), a view
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    target = target.reshape(-1)  # (N,)
    keep = target != ignore_index
    kept_targets = target[keep]
    if kept_targets.numel() and (kept_targets.min() < 0 or kept_targets.max() >= vocab_size):
        bad = kept_targets[(kept_targets < 0) | (kept_targets >= vocab_size)][0].item()
        raise ValueError(f"target id {bad} is outside the vocabulary [0, {vocab_size})")
    loss, nll = _SmoothedCrossEntropy.apply(logits, target.masked_fill(~keep, 0), keep, epsilon)
    return TokenLoss(loss, nll.detach(), int(kept_targets.numel()))


class _SmoothedCrossEntropy(torch.autograd.Function):
    """The loss above in few passes over the ``(N, V)`` logits, with its gradient written
    directly: d loss / d logits = w · (softmax(logits) - (1 - eps) · onehot(target) - eps / V),
    ``w`` = 1 on kept rows and 0 on ignored ones.

    The composed version (index the kept rows, log_softmax, gather, sum) made about nine
    passes over ``(N, V)`` tensors forward and backward, including zero-filled gradient
    buffers for the indexing and the gather; the loss is a memory-bound share of a small
    model's training step (the vocabulary is the widest axis). Equality with the composed
    formula, values and gradients, in float64 and with padding, is tested.
    """

    @staticmethod
    def forward(ctx, logits, target, keep, epsilon):  # logits (N, V) float, target (N,), keep (N,) bool
        vocab_size = logits.shape[-1]
        log_probs = torch.log_softmax(logits, dim=-1)  # (N, V), one fused kernel
        ignored = ~keep
        if ignored.any():  # ignored rows may hold inf or nan; zeros keep every later step finite
            log_probs[ignored] = 0.0
        nll = -log_probs.gather(-1, target[:, None]).squeeze(-1) * keep
        smooth = -log_probs.sum(-1) * keep  # sum_j -log p_j
        loss = ((1.0 - epsilon) * nll + (epsilon / vocab_size) * smooth).sum()
        ctx.save_for_backward(log_probs, target, keep)
        ctx.epsilon = epsilon
        ctx.mark_non_differentiable(nll)
        return loss, nll.sum()

    @staticmethod
    def backward(ctx, grad_loss, _grad_nll):
        log_probs, target, keep = ctx.saved_tensors
        epsilon, vocab_size = ctx.epsilon, log_probs.shape[-1]
        weight = keep * grad_loss  # (N,)
        # |w| * softmax as exp(log p + log |w|), one pass: log 0 = -inf gives exact zeros on
        # ignored rows.
        grad = (log_probs + weight.abs().log()[:, None]).exp_()
        if grad_loss < 0:
            grad.neg_()
        grad.sub_((epsilon / vocab_size) * weight[:, None])
        grad.scatter_add_(-1, target[:, None], (-(1.0 - epsilon) * weight)[:, None])
        return grad, None, None, None


def lm_loss(model, batch):
    """Summed next-token cross-entropy of a ``{"ids": (B, T+1)}`` batch (nats), for the Trainer:
    the loss of every window-trained language model (``train lm``, ``train music``)."""
    ids = batch["ids"]
    logits = model(ids[:, :-1])  # (B, T, V)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten(), reduction="sum")
    return loss, ids[:, 1:].numel(), {"nll": loss.detach()}
