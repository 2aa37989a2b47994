"""Validation NLL of a saved character-level Shakespeare model on the whole valid split,
the unigram/bigram baselines on the same split, and a sample.

Run:  python benchmarks/eval_char_lm.py MODEL_DIR [CONTEXT]

CONTEXT (default: the model's max_positions) is the window the model was trained on; when
it is shorter than max_positions the unused rows of the position table are cut off.
"""

from __future__ import annotations

import collections
import math
import sys

import torch

import attnlab
from attnlab.data.text import CharTokenizer, consecutive_windows, shakespeare_text
from attnlab.generation import generate_text
from attnlab.models.lm import DecoderLM


def baselines(train: str, valid: str, vocabulary: int) -> dict[str, float]:
    """Add-one unigram and bigram nats/char of ``valid`` with counts from ``train``."""
    unigram = collections.Counter(train)
    bigram = collections.Counter(zip(train, train[1:]))
    uni = -sum(math.log((unigram[c] + 1) / (len(train) + vocabulary)) for c in valid) / len(valid)
    bi = -sum(math.log((bigram[a, b] + 1) / (unigram[a] + vocabulary)) for a, b in zip(valid, valid[1:]))
    return {"unigram": uni, "bigram": bi / (len(valid) - 1)}


@torch.inference_mode()
def main() -> None:
    directory = sys.argv[1]
    model, tokenizer = attnlab.load_model(directory), CharTokenizer.load(directory)
    if len(sys.argv) > 2 and int(sys.argv[2]) < model.config.max_positions:
        context = int(sys.argv[2])
        short = DecoderLM(model.config.replace(max_positions=context))
        state = model.state_dict()
        state["decoder.positions.weight"] = state["decoder.positions.weight"][:context]
        short.load_state_dict(state)
        model = short.eval()
    train, valid = shakespeare_text("train"), shakespeare_text("valid")
    ids = torch.tensor(tokenizer.encode(valid))
    total, count = 0.0, 0
    for batch in consecutive_windows(ids, batch_size=64, context=model.config.max_positions):
        windows = batch["ids"]
        logits = model(windows[:, :-1])
        total += torch.nn.functional.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten(),
                                                   reduction="sum").item()
        count += windows[:, 1:].numel()
    for name, nll in baselines(train, valid, tokenizer.vocab_size).items():
        print(f"{name}: {nll:.3f} nats/char = {nll / math.log(2):.3f} bits/char")
    print(f"model ({model.num_parameters()} parameters), {count} valid characters: {total / count:.4f} nats/char "
          f"= {total / count / math.log(2):.4f} bits/char")
    print(generate_text(model, tokenizer, "ROMEO:\n", max_new_tokens=400, top_k=20, temperature=0.8, seed=0,
                        sliding_window=True)[0])


if __name__ == "__main__":
    main()
