"""``attnlab evaluate-lm``: held-out negative log-likelihood of a language model.

    attnlab evaluate-lm --model runs/shakespeare/model                 # Shakespeare's held-out split
    attnlab evaluate-lm --model runs/mine/model --text held_out.txt --stride 64

The text (``--text FILE...``, default: the held-out 10 % of every Shakespeare play that
``attnlab train lm`` validates on) is encoded with the model's own tokenizer and every token
after the first is predicted once: in consecutive windows of ``--context`` tokens (default:
the model's context), or with ``--stride S`` in overlapping windows whose ends advance by S
(each token then sees at least context - S tokens before it). Prints nats per token, bits
per token, bits per character of the text and perplexity; ``--json FILE`` also writes them
(atomically; an existing file only with ``--force``). ``attnlab evaluate --model DIR`` of a
language model runs this verb.
"""

from __future__ import annotations

HELP = "held-out NLL of a language model (nats/token, bits/char, perplexity) on a text"

MAX_WINDOW_TOKENS = 1 << 24  # windows x context tokens scored; beyond this --stride is refused


def add_arguments(parser) -> None:
    from attnlab.cli.options import add_force_argument, add_runtime_arguments, bounded_int

    parser.add_argument("--model", required=True, help="language model directory (attnlab train lm)")
    parser.add_argument("--text", nargs="+", metavar="FILE",
                        help="held-out text files (default: the model's own held-out text, as train lm validated "
                             "it (lm.json); Shakespeare's held-out split for a model without lm.json)")
    parser.add_argument("--context", type=bounded_int(1, 1 << 20), help="window length in tokens "
                        "(default: the model's max_positions)")
    parser.add_argument("--stride", type=bounded_int(1, 1 << 20),
                        help="overlapping windows whose ends advance by STRIDE tokens (default: consecutive windows)")
    parser.add_argument("--batch-size", type=bounded_int(1, 4096), default=8, help="windows per batch (default: 8)")
    from attnlab.cli.options import add_limit_argument

    add_limit_argument(parser, "tokens of the text", low=2, help_default="all of it")
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_force_argument(parser, "--json")
    add_runtime_arguments(parser)
    from attnlab.cli.options import add_quantize_argument

    add_quantize_argument(parser)


def run(args) -> int:
    import math
    import sys
    import time

    from attnlab.cli.options import apply_threads, resolve_device
    from attnlab.files import atomic_write_json, check_output_file, json_safe

    json_path = check_output_file(args.json, force=args.force, flag="--json", suffixes=(".json",)) if args.json else None
    if args.stride is not None and args.context is not None and args.stride > args.context:
        raise ValueError(f"--stride {args.stride} must be at most --context {args.context}")
    apply_threads(args)

    from attnlab.data.text import read_text_files, shakespeare_text
    from attnlab.families.lm.task import evaluate_text
    from attnlab.tasks.lm import load_language_model

    device = resolve_device(args.device)
    model, tokenizer = load_language_model(args.model, device=device, name=f"--model {args.model}")
    from attnlab.cli.options import apply_quantize

    apply_quantize(model, args.quantize, device)
    if args.text:
        try:
            text = read_text_files(args.text)
        except FileNotFoundError as error:
            raise ValueError(f"--text: {error}") from None
        source = ", ".join(args.text)
    else:  # the model's own held-out data when its directory says (lm.json), else Shakespeare's
        from attnlab.families.lm.task import own_held_out_text

        text, source = own_held_out_text(args.model) or (shakespeare_text("valid"), "Shakespeare (held-out split)")
    context = args.context or model.config.max_positions
    if context > model.config.max_positions:
        raise ValueError(f"--context {context} exceeds the model's max_positions={model.config.max_positions}")
    if args.stride is not None and args.stride > context:
        raise ValueError(f"--stride {args.stride} must be at most the context ({context})")
    try:
        ids = tokenizer.encode(text)
    except (KeyError, ValueError) as error:
        named = "--text" if args.text else f"{source} (no --text given)"  # never blame a flag the user did not give
        raise ValueError(f"{named}: cannot be encoded with the model's tokenizer ({error}); give text it reads "
                         "with --text") from None
    if args.limit is not None and len(ids) > args.limit:
        ids = ids[:args.limit]
        text = tokenizer.decode(ids)
        source += f", its first {args.limit:,d} tokens (--limit)"
    if len(ids) < 2:
        raise ValueError(f"{'--text ' if args.text else ''}{source}: {len(ids)} token(s); scoring needs at least 2")
    step = args.stride or context
    windows = -(-(len(ids) - 1) // step)
    if windows * context > MAX_WINDOW_TOKENS:
        raise ValueError(f"--stride {step}: {windows:,d} windows of {context} tokens ({windows * context:,d} token "
                         f"positions) is more than {MAX_WINDOW_TOKENS:,d}; use a larger --stride or a shorter text")
    print(f"scoring {len(ids) - 1:,d} tokens of {source} ({len(text):,d} characters) in {windows:,d} windows of "
          f"{context} tokens" + (f", ends every {args.stride}" if args.stride else ""), flush=True)
    bar = None
    if not args.no_progress:
        from tqdm import tqdm

        bar = tqdm(total=windows, desc="scoring", unit="window", file=sys.stderr, leave=False)
    started = time.perf_counter()
    try:
        result = evaluate_text(model, ids, context=context, stride=args.stride, batch_size=args.batch_size,
                               pad_id=getattr(model.config, "pad_id", 0) or 0, device=device,
                               progress=None if bar is None else bar.update)
    finally:
        if bar is not None:
            bar.close()
    first_chars = len(tokenizer.decode(ids[:1]))
    result["bits_per_char"] = result["nll"] * result["tokens"] / math.log(2) / max(1, len(text) - first_chars)
    result["seconds"] = round(time.perf_counter() - started, 1)
    finite = math.isfinite(result["nll"])
    print(f"held-out NLL {result['nll']:.4f} nats/token ({result['bits_per_token']:.4f} bits/token, "
          f"{result['bits_per_char']:.4f} bits/char, perplexity {result['perplexity']:.2f}) over "
          f"{result['tokens']:,d} tokens ({result['seconds']} s)", flush=True)
    if json_path is not None:
        atomic_write_json(json_path, json_safe({"model": str(args.model), "text": source, "quantize": args.quantize,
                                                **result}))
    if not finite:
        raise ValueError("the model's negative log-likelihood is not finite (its weights or outputs hold NaN "
                         "or infinity); the JSON records it as null")
    return 0
