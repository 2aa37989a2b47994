"""Add-one unigram and bigram baselines for a language-model directory, on its own data.

    python scripts/recipes/lm_ngram_baseline.py runs/mine/model

Tokenizes the model's training and held-out text (as its ``lm.json`` records them, the
split ``train lm`` made) with the model's own tokenizer, fits add-one unigram and bigram
counts on the training tokens and prints their nats per token on the held-out tokens: the
figures a model that learned nothing beyond token frequencies (or pairs) would score, to
read beside ``attnlab evaluate --model DIR`` (the same unit, the same text).
"""
from __future__ import annotations

import json
import math
import sys
from collections import Counter
from pathlib import Path


def main(directory: str) -> None:
    import attnlab
    from attnlab.families.lm.task import load_lm_texts

    record = json.loads((Path(directory) / "lm.json").read_text())
    train, held_out = load_lm_texts(record.get("text"), record.get("valid_text"))
    tokenizer = attnlab.load(directory).tokenizer
    train_ids, held_ids = tokenizer.encode(train), tokenizer.encode(held_out)
    vocab = tokenizer.vocab_size
    unigram = Counter(train_ids)
    total = len(train_ids)
    uni = -sum(math.log((unigram[t] + 1) / (total + vocab)) for t in held_ids) / len(held_ids)
    pairs = Counter(zip(train_ids, train_ids[1:]))
    bi = -sum(math.log((pairs[(a, b)] + 1) / (unigram[a] + vocab))
              for a, b in zip(held_ids, held_ids[1:])) / (len(held_ids) - 1)
    print(f"{directory}: {len(train_ids):,} training tokens, {len(held_ids):,} held-out, vocabulary {vocab}: "
          f"uniform {math.log(vocab):.3f}, add-one unigram {uni:.3f}, add-one bigram {bi:.3f} nats/token")


if __name__ == "__main__":
    main(sys.argv[1])
