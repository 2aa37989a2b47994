"""``attnlab generate``: continue prompts with a saved decoder-only language model.

    attnlab generate --model runs/shakespeare/model --prompt "ROMEO:" --max-new-tokens 300
    attnlab generate --model DIR --prompt "To be" --prompt "KING" --greedy      # a batch, no streaming

One prompt streams its text to the terminal as it is produced; several prompts are
generated as one left-padded batch and printed at the end. The model directory must hold
the tokenizer written by ``attnlab train lm``: characters (``char_tokenizer.json``) or
sentencepiece BPE (``tokenizer.model``, lines joined by EOS as the line break); the one
found is used for the prompts, the output and ``--stop``.
"""

from __future__ import annotations

HELP = "continue text prompts with a saved language model (greedy, temperature, top-k, top-p)"
DEFAULT_NEW_TOKENS = 200


def add_arguments(parser) -> None:
    parser.add_argument("--model", required=True, help="model directory (config.json, model.safetensors, tokenizer)")
    parser.add_argument("--prompt", action="append", default=None,
                        help="prompt text; repeat for a batch (default: a newline)")
    from attnlab.cli.options import SEED, TEMPERATURE, bounded_float, bounded_int

    parser.add_argument("--max-new-tokens", type=bounded_int(0, 1_000_000), metavar="N",
                        help=f"(default: {DEFAULT_NEW_TOKENS}, or what the model's context holds after the prompt, "
                             "said when fewer)")
    parser.add_argument("--greedy", action="store_true", help="argmax decoding instead of sampling")
    parser.add_argument("--temperature", type=TEMPERATURE, default=1.0, metavar="T",
                        help="above 0 (default: 1.0; --greedy for argmax)")
    parser.add_argument("--top-k", type=bounded_int(1), metavar="K", help="sample among the k most probable tokens")
    parser.add_argument("--top-p", type=bounded_float(0.0, 1.0), metavar="P",
                        help="nucleus sampling: smallest set with probability >= p, in (0, 1]")
    parser.add_argument("--seed", type=SEED, help="seed for reproducible sampling")
    parser.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    parser.add_argument("--sliding-window", action="store_true",
                        help="allow generating past the model's context (drops the oldest half when full)")
    from attnlab.cli.options import add_runtime_arguments
    from attnlab.cli.options import add_decode_compile_argument, add_quantize_argument

    add_runtime_arguments(parser)
    add_quantize_argument(parser)
    add_decode_compile_argument(parser)


class Continuation:
    """The text of generated tokens, one token at a time. Subword pieces decode differently
    at the start of a text (no leading space), so each step decodes the whole context —
    the prompt, then only the current line once a newline has been produced — and returns
    what it adds."""

    def __init__(self, tokenizer, prompt_ids):
        self.tokenizer, self.context = tokenizer, list(prompt_ids)
        self.length = len(tokenizer.decode(self.context))

    def add(self, token: int) -> str:
        self.context.append(token)
        text = self.tokenizer.decode(self.context)
        new = text[self.length:]
        if text.endswith("\n"):  # what follows a line break does not depend on what came before
            self.context = [token]
            text = self.tokenizer.decode(self.context)
        self.length = len(text)
        return new


def run(args) -> int:
    import sys

    import torch

    from attnlab.tasks.lm import load_language_model
    from attnlab.generation import generate

    if args.threads:
        torch.set_num_threads(args.threads)
    if getattr(args, "compile", None) == "aot" and args.sliding_window:  # (before the model is read)
        raise ValueError("--compile aot decodes with a cache of fixed capacity; it cannot go with --sliding-window "
                         "(leave --compile at auto: a sliding window decodes eagerly)")
    from attnlab.cli.options import resolve_device
    from attnlab.cli.options import apply_quantize, decode_compile

    device = resolve_device(args.device)
    model, tokenizer = load_language_model(args.model, device=device, name=f"--model {args.model}")
    apply_quantize(model, args.quantize, device)
    prompts = args.prompt or ["\n"]
    encoded = [tokenizer.encode(p) for p in prompts]
    context = model.config.max_positions
    longest = max(len(ids) for ids in encoded)
    if args.max_new_tokens is None:  # the default: as many as the context holds, up to DEFAULT_NEW_TOKENS
        args.max_new_tokens = DEFAULT_NEW_TOKENS
        room = context - longest
        if not args.sliding_window and 0 < room < DEFAULT_NEW_TOKENS:
            args.max_new_tokens = room
            print(f"generating {room} new tokens: the prompt has {longest} and the model's context holds {context} "
                  "(--max-new-tokens N --sliding-window for more)", file=sys.stderr)
    if not args.sliding_window and longest + args.max_new_tokens > context:  # before a word is printed
        raise ValueError(f"--max-new-tokens {args.max_new_tokens}: the prompt has {longest} tokens and the model's "
                         f"context holds {context}: ask for at most {max(0, context - longest)}, or pass "
                         "--sliding-window")
    stream = len(prompts) == 1
    on_token = None
    if stream:
        sys.stdout.write(prompts[0])
        streamed = Continuation(tokenizer, encoded[0])
        on_token = lambda row, token: (sys.stdout.write(streamed.add(token)), sys.stdout.flush())  # noqa: E731
    outputs = generate(model, encoded, max_new_tokens=args.max_new_tokens, greedy=args.greedy,
                       temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                       stop_strings=args.stop, tokenizer=tokenizer, on_token=on_token,
                       sliding_window=args.sliding_window, compile=decode_compile(args))
    if stream:
        sys.stdout.write("\n")
    else:
        for prompt, prompt_ids, tokens in zip(prompts, encoded, outputs):
            continuation = Continuation(tokenizer, prompt_ids)
            print(prompt + "".join(continuation.add(token) for token in tokens))
            print("-" * 40)
    return 0
