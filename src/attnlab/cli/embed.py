"""``attnlab embed``: sentence embeddings from a BERT-family model directory (mean pooling
over the real tokens, unit length, as sentence-transformers' all-MiniLM models are used),
printed as vectors or as the matrix of cosine similarities."""

HELP = "sentence embeddings (mean-pooled, unit length) or their cosine similarities from a BERT model directory"


from attnlab.cli.options import add_runtime_arguments, resolve_device


def add_arguments(parser) -> None:
    parser.add_argument("--model", required=True,
                        help="HuggingFace-format BERT directory (config.json, model.safetensors, vocab.txt)")
    parser.add_argument("sentences", nargs="+", help="one or more sentences")
    parser.add_argument("--vectors", action="store_true",
                        help="print each embedding (one line of numbers per sentence) instead of similarities")
    parser.add_argument("--decimals", type=int, default=4, help="digits after the point (default: 4)")
    add_runtime_arguments(parser)


def run(args) -> int:
    import torch
    import torch.nn.functional as F

    from attnlab.interop.hf_bert import load_hf_bert
    from attnlab.models.bert import mean_pool

    if not 0 <= args.decimals <= 10:
        raise ValueError(f"--decimals {args.decimals}: choose 0 to 10")
    device = resolve_device(args.device)
    model, tokenizer = load_hf_bert(args.model, device=device)
    batch, _ = tokenizer.encode(args.sentences)
    batch = {name: value.to(device) for name, value in batch.items()}
    with torch.inference_mode():
        out = model(batch["ids"], attention_mask=batch["attention_mask"], token_type_ids=batch["token_type_ids"])
        embeddings = F.normalize(mean_pool(out.hidden, batch["attention_mask"]), dim=-1).cpu()
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
        print(f"{i + 1:>3} " + "".join(f"{fmt.format(v):>{width + 1}}" for v in row) + f"  {args.sentences[i]}")
    return 0
