"""``attnlab evaluate-music``: validation NLL of a Music Transformer in nats per token.

    attnlab evaluate-music --model runs/jsb/model --data jsb --context 256 512

Every validation piece (JSB: the 76 validation chorales; ``bach`` or a MIDI folder: the
last 10 % of pieces, as ``train music`` holds them out) is cut into consecutive chunks of
``--context`` tokens, each predicted on its own; the score is the mean negative
log-likelihood per music token (END is not scored). Several contexts measure how a model
trained at L holds up at 2L. ``--json FILE`` also writes the figures (atomically).
"""

from __future__ import annotations

HELP = "validation NLL (nats/token) of a Music Transformer, at one or more context lengths"


def add_arguments(parser) -> None:
    from attnlab.cli.options import add_runtime_arguments

    parser.add_argument("--model", required=True, help="Music Transformer directory")
    parser.add_argument("--data", default="jsb", help="jsb (default), bach or a directory of .mid files")
    parser.add_argument("--data-dir", help="where named data lives (default: $ATTNLAB_DATA)")
    parser.add_argument("--context", type=int, nargs="+", default=[256], help="chunk lengths in tokens (default: 256)")
    parser.add_argument("--stride", type=int,
                        help="score with overlapping windows of each --context whose ends advance by STRIDE tokens "
                             "(every token once, with at least context - STRIDE tokens before it; costs about "
                             "context/STRIDE times more); default: consecutive chunks, each predicted on its own")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--json", help="also write the results to this JSON file")
    add_runtime_arguments(parser)


def run(args) -> int:
    import time

    import torch

    from attnlab.cli.options import resolve_device
    from attnlab.files import atomic_write_json
    from attnlab.tasks.music import load_music_model, evaluate_nll, load_music_data

    for context in args.context:
        if context < 1:
            raise ValueError(f"--context {context} must be at least 1")
        if args.stride is not None and not 1 <= args.stride <= context:
            raise ValueError(f"--stride={args.stride} must be between 1 and --context {context}")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    model = load_music_model(args.model, device=device)
    encoding = model.config.encoding
    data = load_music_data(args.data, data_dir=args.data_dir, augment=False, progress=False)
    if data.encoding != encoding:
        raise ValueError(f"--data {args.data} is {data.encoding} tokens, but the model reads {encoding} tokens")
    results = []
    for context in args.context:
        started = time.perf_counter()
        result = evaluate_nll(model, data.valid, context=context, batch_size=args.batch_size, device=device,
                              stride=args.stride)
        result["seconds"] = round(time.perf_counter() - started, 1)
        results.append(result)
        windows = f" (windows every {args.stride})" if args.stride else ""
        print(f"context {context}{windows}: valid NLL {result['nll']:.4f} nats/token over {result['tokens']:,d} tokens "
              f"({result['seconds']} s)", flush=True)
    if args.json:
        atomic_write_json(args.json, {"model": str(args.model), "data": args.data, "results": results})
    return 0
