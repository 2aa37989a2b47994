"""Forward + backward of one encoder–decoder training step at base dimensions:
attnlab vs ``torch.nn.Transformer`` with the same weights and the same batch.

    python benchmarks/train_step.py [--batch 16] [--src-len 32] [--tgt-len 32] [--repeats 10]

Both run in training mode (dropout 0.1 as in transformer_base) on embedded inputs, with
source padding and a causal target mask, and the same loss; the script first checks, in
eval mode, that the two give the same outputs.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import interleaved_medians  # noqa: E402

from attnlab.interop import from_torch_transformer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--src-len", type=int, default=32)
    parser.add_argument("--tgt-len", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)

    d_model = 512
    peer = torch.nn.Transformer(d_model, 8, 6, 6, 2048, dropout=0.1, batch_first=True)
    ours = from_torch_transformer(peer)

    src = torch.randn(args.batch, args.src_len, d_model)
    tgt = torch.randn(args.batch, args.tgt_len, d_model)
    lengths = torch.randint(args.src_len // 2, args.src_len + 1, (args.batch,))
    lengths[0] = args.src_len
    padding = torch.arange(args.src_len)[None, :] >= lengths[:, None]  # True = pad (torch's convention)
    causal = peer.generate_square_subsequent_mask(args.tgt_len)
    target = torch.randn(args.batch, args.tgt_len, d_model)

    def peer_step():
        peer.zero_grad(set_to_none=True)
        out = peer(src, tgt, tgt_mask=causal, src_key_padding_mask=padding, memory_key_padding_mask=padding,
                   tgt_is_causal=True)
        torch.nn.functional.mse_loss(out, target).backward()

    def ours_step():
        ours.zero_grad(set_to_none=True)
        out = ours(src, tgt, src_mask=~padding[:, None, None, :])
        torch.nn.functional.mse_loss(out, target).backward()

    peer.eval(), ours.eval()
    with torch.no_grad():
        ref = peer(src, tgt, tgt_mask=causal, src_key_padding_mask=padding, memory_key_padding_mask=padding,
                   tgt_is_causal=True)
        diff = (ours(src, tgt, src_mask=~padding[:, None, None, :]) - ref).abs().max().item()
    print(f"eval-mode outputs max abs diff: {diff:.2e}")
    peer.train(), ours.train()

    medians = interleaved_medians({"torch.nn.Transformer": peer_step, "attnlab": ours_step}, repeats=args.repeats)
    tokens = args.batch * args.tgt_len
    print(f"batch {args.batch}, src {args.src_len}, tgt {args.tgt_len}, threads {torch.get_num_threads()}, "
          f"median of {args.repeats}")
    for name, seconds in medians.items():
        print(f"  {name:22s} {seconds * 1000:8.1f} ms/step  {tokens / seconds:8.0f} target tokens/s")
    print(f"  speed ratio attnlab / torch.nn.Transformer: {medians['torch.nn.Transformer'] / medians['attnlab']:.3f}x")


if __name__ == "__main__":
    main()
