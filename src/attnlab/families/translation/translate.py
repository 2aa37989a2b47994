"""``attnlab translate``: sentences in (stdin or --input), translations out, same order and count."""

HELP = "translate sentences (one a line, from stdin or --input) with a trained model directory"


def add_decoding_arguments(parser) -> None:
    """Options shared by translate, evaluate and attention."""
    parser.add_argument("--model", required=True,
                        help="model directory (e.g. OUT/model from attnlab train, or a HuggingFace MarianMT "
                             "directory such as Helsinki-NLP/opus-mt-de-en)")
    from attnlab.cli.options import BEAM, MAX_BEAM, bounded_float

    parser.add_argument("--beam", type=BEAM, default=None, metavar="K",
                        help=f"beam size, 1 to {MAX_BEAM}; 1 = greedy (default: a MarianMT model's num_beams, else 4)")
    parser.add_argument("--alpha", type=bounded_float(0.0, include_low=True), default=0.6,
                        help="GNMT length penalty alpha, >= 0 (default: 0.6)")
    parser.add_argument("--max-len-a", type=bounded_float(0.0, include_low=True), default=1.5,
                        help="output tokens <= a * source tokens + b (default a: 1.5)")
    parser.add_argument("--max-len-b", type=bounded_float(0.0, include_low=True), default=10,
                        help="(default b: 10)")
    from attnlab.cli.options import add_runtime_arguments

    add_runtime_arguments(parser)


def set_threads(threads: int | None) -> None:
    """Apply ``--threads``: on a machine shared with other jobs, 1 thread per process is
    often several times faster than oversubscribed cores."""
    if threads is None:
        return
    if threads < 1:
        raise ValueError(f"--threads={threads} must be at least 1")
    import torch

    torch.set_num_threads(threads)


def add_arguments(parser) -> None:
    from attnlab.cli.options import add_quantize_argument

    add_decoding_arguments(parser)
    add_batch_arguments(parser)
    parser.add_argument("--input", "-i", help="file of sentences, one a line (plain or .gz; default: stdin)")
    parser.add_argument("--output", "-o", "--out", dest="output", help="write translations here (default: stdout)")
    from attnlab.cli.options import add_force_argument

    add_force_argument(parser, "--output")
    add_quantize_argument(parser)
    from attnlab.cli.options import add_decode_compile_argument

    add_decode_compile_argument(parser)


def add_batch_arguments(parser) -> None:
    """Options of the verbs that translate batches of sentences (translate, evaluate)."""
    parser.add_argument("--batch-size", type=int, default=32, help="sentences decoded together (default: 32)")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="on a CUDA GPU, replay each batch's beam search from a captured CUDA graph "
                             "(captures kept per batch and length bucket; the same translations)")


def decoding_options(args) -> dict:
    return dict(beam=args.beam, alpha=args.alpha, max_len_a=args.max_len_a, max_len_b=args.max_len_b)


def batch_options(args, device: str) -> dict:
    """``translate()``'s batch options from the arguments, checked against the device."""
    if args.batch_size < 1:
        raise ValueError(f"--batch-size={args.batch_size} must be at least 1")
    if args.cuda_graph and not device.startswith("cuda"):
        raise ValueError(f"--cuda-graph needs a CUDA GPU; the model runs on {device} (see --device)")
    return dict(batch_size=args.batch_size, cuda_graph=args.cuda_graph)


def run(args) -> int:
    import sys

    from pathlib import Path

    from attnlab.data import read_lines
    from attnlab.files import atomic_write_bytes, check_output_file
    from attnlab.families.translation.translator import Translator

    set_threads(args.threads)
    if args.output:  # before reading anything: an existing file is replaced only with --force
        check_output_file(args.output, force=args.force, flag="--output")
    if args.input is not None:
        try:
            sentences = read_lines(args.input)
        except FileNotFoundError:
            raise ValueError(f"{args.input}: no such file") from None
    else:
        stream = getattr(sys.stdin, "buffer", None)  # bytes, so bad UTF-8 can be located
        data = stream.read() if stream is not None else sys.stdin.read().encode("utf-8")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            line = data[: error.start].count(b"\n") + 1
            raise ValueError(f"stdin, line {line}: not valid UTF-8 (byte {data[error.start]:#04x})") from None
        sentences = [line.strip() for line in text.split("\n")]
        if sentences and sentences[-1] == "":
            sentences.pop()  # the final newline
    from attnlab.cli.options import apply_quantize, decode_compile, resolve_device

    device = resolve_device(args.device)
    batching = batch_options(args, device)
    translator = Translator.load(args.model, device=device)
    apply_quantize(translator.model, args.quantize, device)
    translations = translator.translate(sentences, **batching, **decoding_options(args),
                                        compile=decode_compile(args))
    text = "".join(t + "\n" for t in translations)
    if args.output:
        atomic_write_bytes(args.output, text.encode("utf-8"))  # a killed run leaves no half-written file
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0
