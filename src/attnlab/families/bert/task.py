"""Masked-LM pre-training (BERT, Devlin et al. 2019, §3.1 "Task #1: Masked LM"), as the
parts ``attnlab train bert`` runs: text -> WordPiece windows -> masked batches -> loss.

* :func:`text_windows`: the training text as ``[CLS] body [SEP]`` windows, either of whole
  lines ("sentences": consecutive lines packed while they fit, a longer line cut) or of
  the packed token stream ("packed": every window full, RoBERTa's FULL-SENTENCES);
* :class:`MaskedWindows`: the resumable batch source. Of each window's tokens (not [CLS],
  [SEP] or padding) 15 % are chosen, at least one; a chosen token becomes [MASK] 80 % of
  the time, a uniformly random token 10 %, and stays 10 %; the model predicts the original
  at every chosen position. No next-sentence task (RoBERTa, Liu et al. 2019, found it does
  not help). Each batch is masked by a generator seeded from the run's seed and the
  batch's place, so a resumed run masks exactly as an uninterrupted one;
* :func:`mlm_loss`: cross-entropy summed over the chosen positions (the trainer's per-token
  mean is nats per masked token), with the NLL and argmax hits as logs;
* :func:`with_mlm_head`: a BERT whose directory has no masked-LM head (a sentence-embedding
  model such as all-MiniLM-L6-v2, or a classifier) gets a new one, initialised as BERT's.

Held-out figures follow ``evaluate-bert``'s fixed protocol (:mod:`.evaluate`: each line one
sequence, 15 % of its tokens masked, all as [MASK], seed 0).
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.families.bert.evaluate import mask_batch, masked_lm_sums
from attnlab.training.batches import EpochPosition

__all__ = ["WINDOW_MODES", "text_windows", "MaskedWindows", "mlm_loss", "with_mlm_head"]

WINDOW_MODES = ("sentences", "packed")


def tokenize_lines(tokenizer, lines: list[str]) -> list[list[int]]:
    """Each line's WordPiece ids, without [CLS]/[SEP] and without truncation."""
    vocab = tokenizer.tokenizer
    vocab.no_truncation()
    try:
        return [encoding.ids for encoding in vocab.encode_batch(lines, add_special_tokens=False)]
    finally:
        vocab.enable_truncation(tokenizer.max_length)


def text_windows(tokenizer, lines: list[str], *, context: int, mode: str = "sentences") -> list[Tensor]:
    """``[CLS] body [SEP]`` windows of at most ``context`` ids over ``lines`` (see the module
    docstring for ``mode``); lines with no token are skipped."""
    if mode not in WINDOW_MODES:
        raise ValueError(f"windows: {mode!r}; choose one of {', '.join(WINDOW_MODES)}")
    if context < 3:
        raise ValueError(f"context={context}: a window needs room for [CLS], a token and [SEP]")
    vocab = tokenizer.tokenizer
    cls_id, sep_id = vocab.token_to_id("[CLS]"), vocab.token_to_id("[SEP]")
    body = context - 2
    bodies: list[list[int]] = []
    if mode == "packed":
        stream = [token for ids in tokenize_lines(tokenizer, lines) for token in ids]
        bodies = [stream[i:i + body] for i in range(0, len(stream), body)]
    else:
        current: list[int] = []
        for ids in tokenize_lines(tokenizer, lines):
            if not ids:
                continue
            if len(current) + len(ids) > body and current:
                bodies.append(current)
                current = []
            while len(ids) > body:  # a line longer than a window: cut into whole windows
                bodies.append(ids[:body])
                ids = ids[body:]
            current = current + ids
        if current:
            bodies.append(current)
    return [torch.tensor([cls_id, *ids, sep_id]) for ids in bodies if ids]


class MaskedWindows(EpochPosition):
    """Shuffled batches of ``windows``, masked for the masked-LM task (module docstring):
    ``{"ids", "attention_mask", "targets"}`` each ``(B, L)``, padded to the batch's longest
    window. Epoch ``e`` visits the windows in the order ``randperm(seed + e)``."""

    def __init__(self, windows: list[Tensor], *, batch_size: int, tokenizer, seed: int = 0, rate: float = 0.15):
        if not windows:
            raise ValueError("the training text gives no window to train on")
        vocab = tokenizer.tokenizer
        self.windows, self.batch_size, self.seed, self.rate = windows, batch_size, seed, rate
        self.pad_id, self.mask_id = vocab.token_to_id("[PAD]"), vocab.token_to_id("[MASK]")
        if self.mask_id is None:
            raise ValueError("the vocabulary has no [MASK] token; masked-LM training needs one")
        self.vocab_size = tokenizer.vocab_size
        self.special = {vocab.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]")}

    def __len__(self) -> int:
        return -(-len(self.windows) // self.batch_size)

    def __iter__(self):
        if self.position >= len(self):
            self.epoch, self.position = self.epoch + 1, 0
        order = torch.randperm(len(self.windows), generator=torch.Generator().manual_seed(self.seed + self.epoch))
        while self.position < len(self):
            rows = order[self.position * self.batch_size:(self.position + 1) * self.batch_size].tolist()
            generator = torch.Generator().manual_seed((self.seed * 1_000_003 + self.epoch * 65_537 + self.position)
                                                      % 2**63)
            self.position += 1
            yield self.mask([self.windows[i] for i in rows], generator)

    def mask(self, windows: list[Tensor], generator: torch.Generator) -> dict[str, Tensor]:
        """One masked batch of ``windows`` (the 80/10/10 rule)."""
        length = max(len(w) for w in windows)
        ids = torch.full((len(windows), length), self.pad_id, dtype=torch.long)
        attention = torch.zeros_like(ids)
        for row, window in enumerate(windows):
            ids[row, :len(window)] = window
            attention[row, :len(window)] = 1
        masked, targets = mask_batch(ids, attention, self.special, self.mask_id, self.rate, generator)
        chosen = targets != -100
        draw = torch.rand(ids.shape, generator=generator)
        random_ids = torch.randint(0, self.vocab_size, ids.shape, generator=generator)
        masked = torch.where(chosen & (draw >= 0.8) & (draw < 0.9), random_ids, masked)  # 10 %: a random token
        masked = torch.where(chosen & (draw >= 0.9), ids, masked)  # 10 %: the token itself
        return {"ids": masked, "attention_mask": attention, "targets": targets}


def mlm_loss(model, batch: dict[str, Tensor]):
    """``(loss_sum, masked tokens, {"nll": sum, "correct": hits})`` for the shared Trainer:
    its ``nll``/``correct`` means are nats per masked token and masked-token accuracy."""
    loss, nll, correct, count = masked_lm_sums(model, batch)
    return loss, count, {"nll": nll, "correct": correct}


def with_mlm_head(model) -> tuple[object, str | None]:
    """``(model, note)``: ``model`` itself when it has a masked-LM head, else a plain BERT
    encoder with its weights (a classifier's head dropped) and a new masked-LM head
    initialised as BERT's; ``note`` is the one line that says which."""
    from attnlab.models.bert import BertEncoder, encoder_config

    config = model.config
    if config.mlm_head and type(model) is BertEncoder:
        return model, "the model's own masked-LM head is kept"
    new = BertEncoder(encoder_config(config, mlm_head=True)).to(next(model.parameters()).device)
    weights = {name: value for name, value in model.state_dict().items() if not name.startswith("classifier")}
    missing, unexpected = new.load_state_dict(weights, strict=False)
    assert not unexpected and all(name.startswith("mlm_") for name in missing), (missing, unexpected)
    dropped = " (its classification head left out)" if type(model) is not BertEncoder else ""
    note = ("a new masked-LM head (initialised as BERT's: N(0, 0.02) weights, zero bias) is added: the model had none"
            + dropped)
    return new, note
