"""``attnlab embed``: sentence embeddings from a BERT-family model directory (mean pooling
over the real tokens, unit length, as sentence-transformers' all-MiniLM models are used),
printed as vectors or as the matrix of cosine similarities. A sentence longer than the
model's positions is truncated to them, as sentence-transformers does, with a warning
that says how many tokens were dropped."""

HELP = "sentence embeddings (mean-pooled, unit length) or their cosine similarities from a BERT model directory"


from attnlab.cli.options import add_runtime_arguments, resolve_device


def add_arguments(parser) -> None:
    parser.add_argument("--model", required=True,
                        help="a BERT directory: HuggingFace-format (config.json, model.safetensors, vocab.txt) or one "
                             "attnlab train bert / train text-classification wrote")
    parser.add_argument("sentences", nargs="+", help="one or more sentences")
    parser.add_argument("--vectors", action="store_true",
                        help="print each embedding (one line of numbers per sentence) instead of similarities")
    parser.add_argument("--decimals", type=int, default=4, help="digits after the point (default: 4)")
    add_runtime_arguments(parser)


def run(args) -> int:
    import sys

    from attnlab.models.bert import sentence_embeddings
    from attnlab.tasks.bert import load_bert_directory

    from attnlab.cli.options import require_packages

    if not 0 <= args.decimals <= 10:
        raise ValueError(f"--decimals {args.decimals}: choose 0 to 10")
    for number, sentence in enumerate(args.sentences, 1):  # as embed(""): nothing to embed is refused
        if not sentence.strip():
            raise ValueError(f"sentence {number} is {'empty' if not sentence else 'only white space'}; "
                             "there is nothing in it to embed")
    require_packages("embed", "tokenizers")
    device = resolve_device(args.device)
    model, tokenizer = load_bert_directory(args.model, device=device, flag="--model")
    for number, count in enumerate(tokenizer.token_counts(args.sentences), 1):
        if count > tokenizer.max_length:  # as sentence-transformers: truncate, but say so
            print(f"attnlab embed: warning: sentence {number} has {count:,} tokens; the model reads at most "
                  f"{tokenizer.max_length:,}: its last {count - tokenizer.max_length:,} tokens were dropped "
                  f"and its embedding is of the first {tokenizer.max_length:,}", file=sys.stderr)
    batch, _ = tokenizer.encode(args.sentences)
    embeddings = sentence_embeddings(model, batch)
    fmt = f"{{:.{args.decimals}f}}"
    if args.vectors:
        for vector in embeddings.tolist():
            print(" ".join(fmt.format(v) for v in vector))
        return 0
    similarity = (embeddings @ embeddings.T).tolist()
    width = max(len(fmt.format(-1.0)), 3)
    print(f"cosine similarity of {len(args.sentences)} sentence embeddings ({embeddings.shape[1]} dimensions):")
    print(" " * 4 + "".join(f"{i + 1:>{width + 1}}" for i in range(len(args.sentences))))
    for i, row in enumerate(similarity):
        print(f"{i + 1:>3} " + "".join(f"{fmt.format(v):>{width + 1}}" for v in row) + f"  {_shorten(args.sentences[i])}")
    return 0


def _shorten(sentence: str, width: int = 80) -> str:
    """One line of at most ``width`` characters for the similarity table."""
    line = " ".join(sentence.split())
    return line if len(line) <= width else line[:width - 1] + "…"
