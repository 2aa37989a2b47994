"""One translation training step (forward + backward of the label-smoothed loss) on real
Multi30k batches: padded vs ``varlen=True`` (only the real tokens; attention on packed
variable-length sequences), in one process, interleaved.

    python benchmarks/varlen.py [--data-root ../shared/data/multi30k] [--preset multi30k] [--batches 6]
                                [--max-tokens 4096] [--repeats 5] [--threads 1]

Two kinds of batches of the same training pairs: the trainer's (``TranslationBatches``:
pairs of similar length together, little padding) and random ones (the same number of
pairs per batch drawn at random: much padding). The script first checks, without
dropout, that the two losses agree, then times the steps in training mode (the preset's
dropout), medians of interleaved repeats, and prints the padding and the ratio. On the
CPU the varlen attention scatters back into a padded batch (the reference path); the
saving is in everything else (embeddings, projections, FFN, norms, head, loss).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from common import interleaved_medians  # noqa: E402

import attnlab  # noqa: E402
from attnlab.data import Tokenizer, TranslationBatches, collate_translation  # noqa: E402
from attnlab.families.translation.task import (TranslationTrainOptions, encode_and_filter,  # noqa: E402
                                       load_training_corpora, translation_loss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-root", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"))
    parser.add_argument("--preset", default="multi30k")
    parser.add_argument("--pairs", type=int, default=5000, help="training pairs to read and tokenise")
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    options = TranslationTrainOptions(out="unused", data="multi30k", data_root=args.data_root,
                                      max_train_pairs=args.pairs)
    corpus, _ = load_training_corpora(options)
    tokenizer = Tokenizer.train(list(corpus.sources) + list(corpus.targets), vocab_size=8000, seed=1)
    examples, _ = encode_and_filter(tokenizer, corpus, 128)
    trainer_batches = list(TranslationBatches(examples, args.max_tokens, seed=1))[:args.batches]
    rng = random.Random(1)
    random_batches = [collate_translation(rng.sample(examples, batch["src"].shape[0]))
                      for batch in trainer_batches]

    torch.manual_seed(0)
    model = attnlab.create_model(args.preset, vocab_size=tokenizer.vocab_size, tgt_vocab_size=None,
                                 pad_id=tokenizer.pad_id, bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id)
    losses = {varlen: translation_loss(0.1, tokenizer.pad_id, varlen=varlen) for varlen in (False, True)}
    model.eval()
    with torch.no_grad():
        check = [losses[varlen](model, trainer_batches[0])[0].item() for varlen in (False, True)]
    print(f"{args.preset}, {model.num_parameters():,d} parameters, {torch.get_num_threads()} thread(s); "
          f"loss of the first batch without dropout: padded {check[0]:.6f}, varlen {check[1]:.6f}")
    model.train()

    def steps(batches, varlen):
        def run():
            for batch in batches:
                model.zero_grad(set_to_none=True)
                loss_sum, tokens, _ = losses[varlen](model, batch)
                (loss_sum / tokens).backward()
        return run

    print("| batches | pairs | padded tokens (src + tgt) | real | padding | padded step | varlen step | speed-up |")
    print("|---|---|---|---|---|---|---|---|")
    for name, batches in (("trainer's (similar lengths)", trainer_batches), ("random", random_batches)):
        padded = sum(b["src"].numel() + b["tgt_in"].numel() for b in batches)
        real = sum(int((b["src"] != tokenizer.pad_id).sum() + (b["tgt_in"] != tokenizer.pad_id).sum())
                   for b in batches)
        pairs = sum(b["src"].shape[0] for b in batches)
        times = interleaved_medians({"padded": steps(batches, False), "varlen": steps(batches, True)},
                                    repeats=args.repeats)
        print(f"| {name}, {len(batches)} | {pairs} | {padded:,d} | {real:,d} | {1 - real / padded:.1%} | "
              f"{times['padded'] / len(batches) * 1e3:.0f} ms | {times['varlen'] / len(batches) * 1e3:.0f} ms | "
              f"**{times['padded'] / times['varlen']:.2f}×** |")


if __name__ == "__main__":
    main()
