"""Translation throughput with the KV cache vs naive decoding without it, same model and weights.

    python benchmarks/translate_cache.py MODEL_DIR [--data multi30k] [--split valid] [--beam 4]
        [--batch-size 32] [--limit N] [--repeats 3] [--threads N]

Translates the source side of a data set split (default: all 1,014 Multi30k validation
sentences) with ``Translator.translate(..., use_cache=True)`` (each step feeds one new
token; self-attention keys/values and the cross-attention keys/values are cached) and
``use_cache=False`` (each step recomputes the decoder over the whole prefix, the encoder
output is reused), interleaved, median of ``--repeats``. Both must produce identical
translations; the script fails otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import interleaved_medians  # noqa: E402

from attnlab.data import get_parallel_dataset  # noqa: E402
from attnlab.translation import Translator  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a trained translation model directory (e.g. runs/multi30k_de_en/model)")
    parser.add_argument("--data", default="multi30k")
    parser.add_argument("--split", default="valid")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--limit", type=int, help="only the first N sentences")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    translator = Translator.load(args.model)
    info = translator.info or {}
    corpus = get_parallel_dataset(args.data, args.split, info.get("src_lang", "de"), info.get("tgt_lang", "en"))
    sentences = [src for src, _ in corpus.pairs][: args.limit]
    outputs: dict[str, list[str]] = {}

    def run(use_cache: bool):
        def translate():
            outputs[use_cache] = translator.translate(sentences, beam=args.beam, alpha=args.alpha,
                                                      batch_size=args.batch_size, use_cache=use_cache)
        return translate

    started = time.perf_counter()
    medians = interleaved_medians({"cached": run(True), "naive": run(False)}, repeats=args.repeats, warmup=0)
    if outputs[True] != outputs[False]:
        different = sum(a != b for a, b in zip(outputs[True], outputs[False]))
        raise SystemExit(f"{different} translations differ between cached and naive decoding")
    words = sum(len(line.split()) for line in outputs[True])
    print(f"{args.model}: {len(sentences)} {args.data} {args.split} sentences, beam {args.beam}, batch "
          f"{args.batch_size}, threads {torch.get_num_threads()}, median of {args.repeats} "
          f"(whole run {time.perf_counter() - started:.0f} s); translations identical: True")
    for name, seconds in medians.items():
        print(f"  {name:7s} {seconds:8.2f} s  {len(sentences) / seconds:7.1f} sentences/s  "
              f"{words / seconds:8.1f} output words/s")
    print(f"  cache speed-up (sentences/s, cached / naive): {medians['naive'] / medians['cached']:.2f}x")


if __name__ == "__main__":
    main()
