"""Captioning speed: the decoder's eager step against the step compiled ahead of time.

    python benchmarks/caption_decode.py --threads 1 --repeats 7

A ``captioner_scenes``-shaped model (ViT trunk 3 layers + decoder 3 layers, d_model 128,
32x32 images, 8x8 cells; what ``attnlab train caption --data scenes`` trains) with random
weights and a vocabulary of ``--vocab`` words. EOS is barred so that every caption has
``--tokens`` words (a trained model's captions of scenes are 8-14 words; random weights
would stop anywhere): the same work in every run. Each case captions its images with
``beam_search`` (what ``attnlab caption`` runs: encoder + search) three ways, interleaved
(benchmarks/common.py): "growing" is the road captions took before the captioner had a step
path (the EncoderDecoder protocol alone: ``decode`` over a growing cache, the memory copied
per beam row), "eager" the decoder's step path (``decode_step``, ``compile=False``) and "aot"
that step compiled ahead of time (``compile="aot"``; the first call builds or loads the
package, untimed). Checks that all three give the same captions; prints milliseconds per
image (medians) and the ratios.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_medians  # noqa: E402

import attnlab  # noqa: E402
from attnlab.generation import beam_search  # noqa: E402

class Growing:
    """The captioner seen through the EncoderDecoder protocol only (no step path)."""

    def __init__(self, model):
        self.model, self.config = model, model.config

    def encode(self, images):
        return self.model.encode(images)

    def decode(self, *args, **kwargs):
        return self.model.decode(*args, **kwargs)

    def new_cache(self, capacity=64):
        return self.model.new_cache(capacity)

    def max_output_length(self):
        return self.model.max_output_length()


CASES = {"beam 3, 1 image": (3, 1), "beam 3, 8 images": (3, 8), "greedy, 1 image": (1, 1)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--vocab", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=12, help="words per caption (EOS barred)")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = attnlab.create_model("captioner_scenes", vocab_size=args.vocab).eval()
    model.banned[model.config.eos_id] = True
    growing = Growing(model)
    images = torch.rand(8, 3, 32, 32) * 2 - 1
    print(f"captioner_scenes, vocabulary {args.vocab}, {args.tokens} words per caption, "
          f"{args.threads} thread(s), medians of {args.repeats} interleaved runs")
    for name in args.cases:
        beam, count = CASES[name]
        batch = images[:count]

        def caption(mode, batch=batch, beam=beam):
            who = growing if mode == "growing" else model
            return [[h.tokens for h in hyps] for hyps in beam_search(
                who, batch, beam_size=beam, max_len_a=0, max_len_b=args.tokens,
                compile=mode if mode == "aot" else False)]

        same = caption("aot") == caption(False) == caption("growing")  # the package is built or loaded here
        medians = interleaved_medians({mode: (lambda mode=mode: caption(mode)) for mode in ("growing", "eager", "aot")},
                                      repeats=args.repeats)
        ms = {mode: f"{1000 * value / count:.1f}" for mode, value in medians.items()}
        print(f"{name}: ms/image growing {ms['growing']}, eager {ms['eager']}, aot {ms['aot']}; aot/eager speed "
              f"{medians['eager'] / medians['aot']:.2f}x, aot/growing {medians['growing'] / medians['aot']:.2f}x, "
              f"eager/growing {medians['growing'] / medians['eager']:.2f}x; captions "
              f"{'identical' if same else 'DIFFER'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
