"""Label-smoothed cross-entropy, forward + backward: attnlab's fused function vs the composed
formula it replaced vs ``F.cross_entropy(label_smoothing=...)``.

    python benchmarks/label_smoothing_loss.py [--rows 2856] [--vocab 8000] [--repeats 6] [--threads 1]

Logits of one Multi30k-sized batch (2,856 target positions x 8,000 pieces), every 20th
target padding; interleaved, median of the repeats after the first.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from attnlab.training.allocator import tune_allocator
from attnlab.training.losses import label_smoothed_cross_entropy


def composed(logits, target, epsilon, pad):
    keep = target != pad
    log_probs = torch.log_softmax(logits[keep], dim=-1)
    nll = -log_probs.gather(-1, target[keep][:, None]).squeeze(-1)
    return ((1 - epsilon) * nll + epsilon / logits.shape[-1] * -log_probs.sum(-1)).sum()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2856)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tune_allocator()  # as in training
    x = torch.randn(args.rows, args.vocab, requires_grad=True)
    target = torch.randint(1, args.vocab, (args.rows,))
    target[::20] = 0
    runs = {
        "attnlab fused": lambda: label_smoothed_cross_entropy(x, target, epsilon=0.1, ignore_index=0).loss_sum,
        "composed": lambda: composed(x, target, 0.1, 0),
        "F.cross_entropy": lambda: torch.nn.functional.cross_entropy(x, target, ignore_index=0, label_smoothing=0.1,
                                                                     reduction="sum"),
    }
    times = {name: [] for name in runs}
    for _ in range(args.repeats):
        for name, fn in runs.items():
            x.grad = None
            start = time.perf_counter()
            fn().backward()
            times[name].append(time.perf_counter() - start)
    print(f"{args.rows} x {args.vocab} logits, threads {args.threads}, median of {args.repeats - 1}")
    for name, values in times.items():
        print(f"  {name:16s} {statistics.median(values[1:]) * 1000:7.1f} ms")


if __name__ == "__main__":
    main()
