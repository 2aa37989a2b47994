"""``attnlab evaluate-music``: validation NLL of a Music Transformer in nats per token.

    attnlab evaluate-music --model runs/jsb/model --data jsb --context 256 512

Every validation piece (JSB: the 76 validation chorales; ``bach`` or a MIDI folder: the
last 10 % of pieces, as ``train music`` holds them out) is cut into consecutive chunks of
``--context`` tokens, each predicted on its own; the score is the mean negative
log-likelihood per music token (END is not scored). Several contexts measure how a model
trained at L holds up at 2L. ``--json FILE`` also writes the figures (atomically; an
existing FILE only with ``--force``; a result that is not finite is written as null, said
on stderr, and the exit status is 1).
"""

from __future__ import annotations

HELP = "validation NLL (nats/token) of a Music Transformer, at one or more context lengths"


def add_arguments(parser) -> None:
    from attnlab.cli.options import (add_data_dir_argument, add_force_argument, add_limit_argument,
                                     add_runtime_arguments, bounded_int)

    parser.add_argument("--model", required=True, help="Music Transformer directory")
    parser.add_argument("--data", help="jsb, bach or a directory of .mid files (default: the data the model was "
                                       "trained on, as its music.json records; else jsb)")
    add_data_dir_argument(parser, help="where named data sets live (default: where the model's training data was, "
                                       "else $ATTNLAB_DATA)")
    parser.add_argument("--context", type=bounded_int(1, 2**24), nargs="+", default=[256], metavar="N",
                        help="chunk lengths in tokens (default: 256)")
    parser.add_argument("--stride", type=int, metavar="S",
                        help="score with overlapping windows of each --context whose ends advance by STRIDE tokens "
                             "(every token once, with at least context - STRIDE tokens before it; costs about "
                             "context/STRIDE times more); default: consecutive chunks, each predicted on its own")
    parser.add_argument("--batch-size", type=bounded_int(1, 2**16), default=8, metavar="N",
                        help="chunks scored at once (default: 8)")
    parser.add_argument("--json", help="also write the results to this JSON file (a non-finite result is null)")
    add_force_argument(parser, "the --json file")
    add_limit_argument(parser, "validation pieces")
    add_runtime_arguments(parser)


def run(args) -> int:
    import math
    import sys
    import time

    from attnlab.cli.options import apply_threads, check_recorded_data, own_data_line, resolve_device
    from attnlab.files import atomic_write_json, check_output_file, json_safe
    from attnlab.families.music.task import (MUSIC_FILE, evaluate_nll, load_music_data, load_music_model,
                                           recorded_data)

    for context in args.context:
        if args.stride is not None and not 1 <= args.stride <= context:
            raise ValueError(f"--stride={args.stride} must be between 1 and --context {context}")
    if args.json:
        check_output_file(args.json, force=args.force, flag="--json")
    apply_threads(args)
    device = resolve_device(args.device)
    model = load_music_model(args.model, device=device)
    encoding = model.config.encoding
    for context in args.context:
        if context > model.config.max_positions:
            raise ValueError(f"--context {context}: longer than the model's max_positions={model.config.max_positions}")
    record = recorded_data(args.model)
    own = args.data is None and bool(record.get("data"))  # the model's own held-out pieces (music.json)
    if own:  # a MIDI folder that is gone is named with music.json and --data
        check_recorded_data(args.model, MUSIC_FILE, record["data"], "--data", named=("jsb", "bach"))
    source = args.data or record.get("data") or "jsb"
    data_dir = args.data_dir
    if data_dir is None and source == record.get("data") and record.get("data_dir"):
        data_dir = record["data_dir"]  # where the model's own training data was found
    data = load_music_data(source, data_dir=data_dir, augment=False, progress=False)
    if data.encoding != encoding:
        raise ValueError(f"--data {source} is {data.encoding} tokens, but the model reads {encoding} tokens")
    if not any(data.valid):
        raise ValueError(f"--data {source}: its {len(data.valid)} validation pieces hold no notes to score")
    pieces = data.valid
    if own:
        print(own_data_line(args.model, f"the validation pieces of {data.description}", len(pieces), "pieces"),
              flush=True)
    elif args.data is None:
        print(f"{args.model} has no {MUSIC_FILE} saying what it was trained on: scoring JSB's validation chorales "
              "(pass --data to score other music)", flush=True)
    if args.limit is not None and args.limit < len(pieces):
        print(f"scoring the first {args.limit:,d} of the {len(pieces):,d} validation pieces (--limit)", flush=True)
        pieces = pieces[:args.limit]
    results, finite = [], True
    for context in args.context:
        started = time.perf_counter()
        result = evaluate_nll(model, pieces, context=context, batch_size=args.batch_size, device=device,
                              stride=args.stride)
        result["seconds"] = round(time.perf_counter() - started, 1)
        results.append(result)
        windows = f" (windows every {args.stride})" if args.stride else ""
        print(f"context {context}{windows}: valid NLL {result['nll']:.4f} nats/token over {result['tokens']:,d} tokens "
              f"({result['seconds']} s)", flush=True)
        if not math.isfinite(result["nll"]):
            finite = False
            print(f"warning: context {context}: the NLL is not finite (the model's outputs overflow or are NaN)"
                  + (f"; {args.json} records it as null" if args.json else ""), file=sys.stderr, flush=True)
    if args.json:
        atomic_write_json(args.json, json_safe({"model": str(args.model), "data": source, "results": results}))
    return 0 if finite else 1
