"""``attnlab complexity``: Table 1 of "Attention Is All You Need" measured on this machine:
time, operation count and largest allocation of one self-attention, recurrent (LSTM),
convolutional and restricted-attention layer over a grid of n and d, log–log slopes beside
the paper's orders, the n at which self-attention becomes dearer than recurrence, and
maximum path lengths from each layer's connectivity."""

HELP = "measure the paper's Table 1 (cost per layer, crossover, path length) on this machine; PNG + JSON"

FILES = ("complexity.png", "complexity.json")


def _sizes(text: str, flag: str) -> list[int]:
    try:
        values = sorted({int(v) for v in text.split(",")})
    except ValueError:
        raise ValueError(f"{flag} {text!r}: give comma-separated integers, e.g. 64,128,256") from None
    if len(values) < 2 or values[0] < 8 or values[-1] > 8192:
        raise ValueError(f"{flag} {text!r}: give at least two sizes from 8 to 8192")
    return values


def add_arguments(parser) -> None:
    parser.add_argument("--out", required=True, help="directory for complexity.png and complexity.json")
    parser.add_argument("--n", default="64,128,256,512,1024", help="sequence lengths (default: 64,...,1024)")
    parser.add_argument("--d", default="64,128,256,512", help="widths, multiples of 4 (default: 64,...,512)")
    parser.add_argument("--repeats", type=int, default=3, help="timed forwards per point; the median is kept")
    from attnlab.cli.options import MAX_THREADS, bounded_int

    parser.add_argument("--threads", type=bounded_int(1, MAX_THREADS), default=1, metavar="N",
                        help="torch CPU threads (default: 1)")
    parser.add_argument("--force", action="store_true", help="replace the files of an earlier run in --out")


def run(args) -> int:
    import dataclasses
    import json
    import platform
    from pathlib import Path

    import torch

    from attnlab.models.base import _atomic_write
    from attnlab.viz.complexity import (LAYERS, PAPER_ORDERS, crossover, fit_slopes, max_path_length, measure,
                                        plot_complexity)

    ns, ds = _sizes(args.n, "--n"), _sizes(args.d, "--d")
    if any(d % 4 for d in ds):
        raise ValueError(f"--d {args.d}: widths must be multiples of 4 (4 heads)")
    if not 1 <= args.repeats <= 50:
        raise ValueError("--repeats must be 1 to 50")
    out = Path(args.out)
    existing = [name for name in FILES if (out / name).exists()]
    if existing and not args.force:
        raise ValueError(f"--out {out}: {', '.join(existing)} exist; pass --force to replace them")
    torch.set_num_threads(args.threads)
    results = measure(ns, ds, repeats=args.repeats)
    slopes, flop_slopes, memory_slopes = fit_slopes(results), fit_slopes(results, "flops"), fit_slopes(
        results, "peak_bytes")
    paths = {kind: {n: max_path_length(kind, n) for n in ns} for kind in LAYERS}
    cross = crossover(results)
    print(f"{'layer':<16} {'paper n^a d^b':>13} {'time: a, b':>12} {'ops: a, b':>11} {'memory: a, b':>13}   "
          f"max path length at n={ns[-1]}")
    for kind in LAYERS:
        a, b = PAPER_ORDERS[kind]
        flops = flop_slopes[kind]
        ops = "not counted" if flops["n"] != flops["n"] else f"{flops['n']:.2f}, {flops['d']:.2f}"
        print(f"{kind:<16} {f'{a}, {b}':>13} {slopes[kind]['n']:>6.2f},{slopes[kind]['d']:>5.2f} {ops:>11} "
              f"{memory_slopes[kind]['n']:>7.2f},{memory_slopes[kind]['d']:>5.2f}   {paths[kind][ns[-1]]}")
    for d, n in cross.items():
        where = f"from n = {n}" if n is not None else f"not up to n = {ns[-1]}"
        print(f"d = {d}: self-attention is slower than the LSTM {where} (the paper: when n > d)")
    out.mkdir(parents=True, exist_ok=True)
    report = {"machine": {"processor": platform.processor() or platform.machine(), "threads": args.threads,
                          "torch": torch.__version__},
              "paper_orders": {k: {"n": a, "d": b} for k, (a, b) in PAPER_ORDERS.items()},
              "slopes": {"seconds": slopes, "flops": flop_slopes, "peak_bytes": memory_slopes},
              "self_attention_dearer_than_lstm_from_n": {str(d): n for d, n in cross.items()},
              "max_path_length": paths, "measurements": [dataclasses.asdict(r) for r in results]}
    _atomic_write(out / "complexity.json", lambda p: Path(p).write_text(json.dumps(report, indent=1) + "\n"))
    _atomic_write(out / "complexity.png", lambda p: plot_complexity(results, p))
    print(f"wrote {out / 'complexity.png'} and {out / 'complexity.json'}")
    return 0
