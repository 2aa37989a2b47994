"""The Music Transformer's JSB training step on a CPU: float32 vs bf16 autocast, and the
relative logits handed to torch's SDPA as a float mask (attnlab's route before 0da0d9d)
vs attnlab's explicit path for a bias that needs a gradient.

    python benchmarks/music_train_step.py --threads 1 --repeats 5
    python benchmarks/music_train_step.py --threads 2 --repeats 5 --shapes d256

One update as ``attnlab train music --data jsb`` makes it: 16 windows of 256 tokens,
forward, cross-entropy, backward, AdamW step, dropout 0.1, on random JSB token ids
(132-token vocabulary). Shapes: ``d256`` = ``music_jsb_relative`` with d_model 256 and FFN
1,024 (the shape of the JSB runs in docs/results.md), ``d512`` = the preset as the paper
has it (d_model 512, FFN 512). Routes:

* ``sdpa``: the relative bias (which needs a gradient in training) goes to
  ``torch.nn.functional.scaled_dot_product_attention`` as a float mask after
  ``masked_fill(~mask, -inf)``, with a scan of the bias for rows that are -inf
  everywhere, exactly as ``attend_unchecked`` did before 0da0d9d. On a CPU, SDPA's fused
  kernel gives no mask gradient, so it runs its decomposed math path;
* ``attnlab``: ``attend_unchecked`` as it is now (the explicit path, masks added as
  0/-inf, ``finite_bias``).

Both routes compute the same function (tests/attention/test_attend.py); the script checks
that the first update's loss agrees (each update is seeded by its index, so both routes
draw the same dropout masks). Time: medians of interleaved updates in one process
(benchmarks/common.py), each variant on its own model and optimizer.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_medians  # noqa: E402

import attnlab  # noqa: E402
from attnlab.attention import core, relative  # noqa: E402

SHAPES = {"d256": {"d_model": 256, "d_ff": 1024}, "d512": {}}
BATCH, CONTEXT, VOCAB = 16, 256, 132


def sdpa_route(q, k, v, *, mask=None, bias=None, dropout_p=0.0, need_weights=False, finite_bias=False, **kw):
    """attend_unchecked's fused branch for a bias before 0da0d9d: the bias, masked with
    masked_fill, as SDPA's float mask; empty rows from a scan of bias and mask."""
    if need_weights or bias is None:
        return core.attend_unchecked(q, k, v, mask=mask, bias=bias, dropout_p=dropout_p,
                                     need_weights=need_weights, finite_bias=finite_bias, **kw)
    blocked = torch.isneginf(bias) if mask is None else torch.isneginf(bias) | ~mask
    empty_rows = blocked.all(dim=-1, keepdim=True)
    attn_mask = bias.to(q.dtype)
    if mask is not None:
        attn_mask = attn_mask.masked_fill(~mask, float("-inf"))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)
    return out.masked_fill(empty_rows, 0.0), None


def make_update(shape: str, bf16: bool, route: str, ids: torch.Tensor):
    torch.manual_seed(0)
    model = attnlab.create_model("music_jsb_relative", dropout=0.1, **SHAPES[shape])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    attend = sdpa_route if route == "sdpa" else core.attend_unchecked
    losses = []

    def update():
        torch.manual_seed(len(losses))  # the n-th update of every variant draws the same dropout masks
        relative.attend_unchecked = attend  # the name RelativeSkew calls
        try:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = model(ids[:, :-1])
            loss = F.cross_entropy(logits.float().flatten(0, 1), ids[:, 1:].flatten())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
        finally:
            relative.attend_unchecked = core.attend_unchecked

    return update, losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=["d256", "d512"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, VOCAB, (BATCH, CONTEXT + 1), generator=generator)
    print(f"torch {torch.__version__}, {args.threads} thread(s), {BATCH} x {CONTEXT} tokens per update, "
          f"medians of {args.repeats} interleaved updates (after one warm-up)")
    print(f"{'shape':6} {'precision':9} {'sdpa s':>8} {'attnlab s':>9} {'sdpa/attnlab':>12} {'attnlab tok/s':>13}")
    for shape in args.shapes:
        results = {}
        for bf16 in (False, True):
            runs, losses = {}, {}
            for route in ("sdpa", "attnlab"):
                runs[route], losses[route] = make_update(shape, bf16, route, ids)
            medians = interleaved_medians(runs, repeats=args.repeats)
            first = {route: values[0] for route, values in losses.items()}
            # bf16: the routes round differently (the explicit path's softmax is in float32)
            if abs(first["sdpa"] - first["attnlab"]) > (1e-2 if bf16 else 1e-5) * abs(first["sdpa"]):
                raise SystemExit(f"the routes disagree on the first loss: {first}")
            results[bf16] = medians
            print(f"{shape:6} {'bf16' if bf16 else 'float32':9} {medians['sdpa']:8.3f} {medians['attnlab']:9.3f} "
                  f"{medians['sdpa'] / medians['attnlab']:11.2f}x {BATCH * CONTEXT / medians['attnlab']:13,.0f}",
                  flush=True)
        print(f"{shape:6} bf16 vs float32 (attnlab route): {results[False]['attnlab'] / results[True]['attnlab']:.2f}x; "
              f"bf16 attnlab vs float32 sdpa: {results[False]['sdpa'] / results[True]['attnlab']:.2f}x", flush=True)


if __name__ == "__main__":
    main()
