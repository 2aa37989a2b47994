"""``attnlab classify-text --model DIR [TEXT ...]``: the top-k labels of each text with
their probabilities, from a model ``attnlab train text-classification`` wrote.

Texts come from the arguments, else from ``--file FILE`` (one a line), else from stdin
(one a line). A model trained on text pairs reads each input as ``first<TAB>second``.
"""

from __future__ import annotations

HELP = "classify texts (arguments, --file or stdin) with a trained text classifier: top-k labels with probabilities"

MAX_TEXTS = 1_000_000


def add_arguments(parser) -> None:
    from attnlab.cli.options import add_runtime_arguments, bounded_int

    parser.add_argument("--model", required=True, help="a model directory written by attnlab train text-classification")
    parser.add_argument("texts", nargs="*", metavar="TEXT",
                        help="texts to classify (none: one a line from --file or stdin; a pair: FIRST<TAB>SECOND)")
    parser.add_argument("--file", metavar="FILE", help="read the texts from FILE, one a line")
    parser.add_argument("--top-k", type=bounded_int(1, 2**20), default=3, help="labels shown per text (default: 3)")
    parser.add_argument("--batch-size", type=bounded_int(1, 4096), default=32, help="texts per batch (default: 32)")
    add_runtime_arguments(parser)


def read_inputs(args) -> list[str]:
    """The texts of the arguments, ``--file`` or stdin (blank lines skipped)."""
    import sys

    if args.texts and args.file:
        raise ValueError("--file: give texts as arguments or in --file, not both")
    if args.texts:
        return list(args.texts)
    if args.file:
        from attnlab.data.text import read_text_files

        try:
            text = read_text_files([args.file])
        except (FileNotFoundError, ValueError) as error:
            raise ValueError(f"--file: {error}") from None
        where = f"--file {args.file}"
    else:
        try:
            text = sys.stdin.buffer.read().decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"stdin: not valid UTF-8 ({error})") from None
        where = "stdin"
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"{where}: no text to classify")
    if len(lines) > MAX_TEXTS:
        raise ValueError(f"{where}: {len(lines):,d} texts; at most {MAX_TEXTS:,d} a call")
    return lines


def split_pairs(texts: list[str], pairs: bool, where: str = "TEXT") -> tuple[list[str], list[str] | None]:
    """``(firsts, seconds)`` of ``FIRST<TAB>SECOND`` inputs for a pair model; ``(texts, None)`` otherwise."""
    if not pairs:
        return texts, None
    firsts, seconds = [], []
    for number, text in enumerate(texts, 1):
        if text.count("\t") != 1:
            raise ValueError(f"{where} {number}: the model reads text pairs; give FIRST<TAB>SECOND")
        first, second = text.split("\t")
        firsts.append(first)
        seconds.append(second)
    return firsts, seconds


def run(args) -> int:
    from attnlab.cli.options import apply_threads, require_packages, resolve_device

    require_packages("classify-text", "tokenizers")
    from attnlab.families.text_classification.task import load_text_classifier, predict

    apply_threads(args)
    model, tokenizer, labels, pairs = load_text_classifier(args.model, device=resolve_device(args.device))
    texts = read_inputs(args)
    firsts, seconds = split_pairs(texts, pairs)
    probabilities = predict(model, tokenizer, firsts, seconds, batch_size=args.batch_size)
    k = min(args.top_k, len(labels))
    for text, row in zip(texts, probabilities):
        values, indices = row.topk(k)
        ranked = ", ".join(f"{labels[i]} {100 * float(p):.1f}%" for p, i in zip(values, indices.tolist()))
        print(f"{ranked}\t{_shorten(text)}")
    return 0


def _shorten(text: str, width: int = 60) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[:width - 1] + "…"
