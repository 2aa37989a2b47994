"""Scoring a held-out token sequence with a causal model, in windows: what ``evaluate-lm``
(the language models' ``evaluate_text``) and ``evaluate-music`` (the Music Transformer's
``evaluate_nll``) share.

Every token after the first is predicted once (:func:`scoring_windows`,
:func:`score_windows`). By default the sequence is cut into consecutive windows of
``context`` tokens, each predicted on its own (the first tokens of a window see little
before them); with ``stride=S`` the windows overlap, their ends advancing by S, and each
scores only the tokens the previous one did not, so every token has at least
``context - S`` tokens of context before it (all of them near the start), at about
``context / S`` times the cost.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

__all__ = ["scoring_windows", "score_windows"]


def scoring_windows(sequence: Sequence[int], *, context: int, stride: int | None = None
                    ) -> list[tuple[list[int], list[int]]]:
    """``(inputs, targets)`` windows that score ``sequence[1:]``, each token once (see the
    module docstring): input position t predicts ``targets[t]``; -100 marks a target that
    is context only (scored by an earlier window)."""
    if context < 1:
        raise ValueError(f"context={context} must be >= 1")
    if stride is not None and not 1 <= stride <= context:
        raise ValueError(f"stride={stride} must be between 1 and the context ({context})")
    sequence = list(sequence)
    scored_total = len(sequence) - 1  # tokens to score: sequence[1:]
    windows = []
    if stride is None:
        for first in range(0, scored_total, context):
            targets = sequence[first + 1:first + 1 + context]
            windows.append((sequence[first:first + len(targets)], targets))
        return windows
    scored = 0  # targets before this one are scored already
    while scored < scored_total:
        end = min(scored_total, context if scored == 0 else scored + stride)
        begin = max(0, end - context)
        targets = [-100] * (scored - begin) + sequence[scored + 1:end + 1]
        windows.append((sequence[begin:end], targets))
        scored = end
    return windows


@torch.no_grad()
def score_windows(model, windows: Sequence[tuple[Sequence[int], Sequence[int]]], *, batch_size: int,
                  pad_id: int, device=None, progress=None) -> tuple[float, int]:
    """Summed negative log-likelihood (nats, accumulated in float64) and the number of
    scored targets of ``windows`` (from :func:`scoring_windows`), run through a causal
    ``model`` in batches of similar lengths, right-padded with ``pad_id`` (a causal model's
    earlier positions never see the padding; it is not scored). ``progress(n)`` is called
    with the number of windows done after each batch."""
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be >= 1")
    was_training = model.training
    model.eval()
    device = device or next(model.parameters()).device
    ordered = sorted(windows, key=lambda window: len(window[0]))
    total, count = 0.0, 0
    try:
        for start in range(0, len(ordered), batch_size):
            batch = ordered[start:start + batch_size]
            width = max(len(inputs) for inputs, _ in batch)
            ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            targets = torch.full((len(batch), width), -100, dtype=torch.long)
            for row, (inputs, wanted) in enumerate(batch):
                ids[row, :len(inputs)] = torch.tensor(list(inputs), dtype=torch.long)
                targets[row, :len(wanted)] = torch.tensor(list(wanted), dtype=torch.long)
            logits = model(ids.to(device)).float()
            total += float(F.cross_entropy(logits.flatten(0, 1), targets.to(device).flatten(), ignore_index=-100,
                                           reduction="sum"))
            count += int((targets != -100).sum())
            if progress is not None:
                progress(len(batch))
    finally:
        model.train(was_training)
    return total, count
