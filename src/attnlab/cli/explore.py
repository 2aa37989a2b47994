"""``attnlab explore``: the attention explorer for a model directory of any family whose
registration names an explorer source (BERT, translation, language, ViT, captioner, Image
Transformer, Music Transformer, text-to-image), served on 127.0.0.1 or written as one
self-contained HTML file. The input (TEXT) is what the family reads: a text, a prompt, an
image (a file, ``example:N``) or a music primer (token ids, a MIDI file, ``example:N``,
``jsb-valid:N``); docs/explorer.md lists them."""

from attnlab.cli.options import add_runtime_arguments, resolve_device

HELP = "explore a model's attention in the browser: serve it locally, or write a self-contained HTML file"

MAX_GENERATE = 256  # as the server's limit


def add_arguments(parser) -> None:
    from attnlab.cli.options import bounded_int

    parser.add_argument("--model", required=True, help="model directory (fixed for the whole session)")
    parser.add_argument("text", nargs="?", help="with --html: the input to show (default: the model's example): "
                        "a text or prompt; for an image model an image file or example:N; for a music model a "
                        "primer (token ids, a MIDI file, example:N, jsb-valid:N or start)")
    parser.add_argument("--html", metavar="OUT.html", help="write a self-contained page for TEXT instead of serving")
    parser.add_argument("--force", action="store_true", help="with --html: replace an existing file (atomically)")
    parser.add_argument("--generate", type=bounded_int(0, MAX_GENERATE), default=0, metavar="N",
                        help="with --html and a language or music model: also show N generated tokens, within the "
                             f"model's context (at most {MAX_GENERATE}; default: 0)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default: 127.0.0.1, this machine only)")
    parser.add_argument("--port", type=bounded_int(0, 65535), default=8000, metavar="PORT",
                        help="port to listen on (default: 8000; 0 = any free)")
    add_runtime_arguments(parser)


def run(args) -> int:
    import os
    from pathlib import Path

    from attnlab.files import atomic_write, check_output_file
    from attnlab.viz.explorer import explorer_html, load_source

    if args.html is None and args.text is not None:
        raise ValueError("TEXT is for --html; the served page has its own text box")
    if args.html is None and args.generate:
        raise ValueError("--generate is for --html; the served page has its own control")
    out = None
    if args.html is not None:
        out = check_output_file(args.html, force=args.force, flag="--html", suffixes=(".html", ".htm"))
    from attnlab.cli.options import require_packages
    from attnlab.interop.hf_bert import is_hf_bert_directory

    if is_hf_bert_directory(args.model):
        require_packages("explore", "tokenizers")
    source = load_source(args.model, device=resolve_device(args.device))
    if getattr(source, "default_note", "") and (out is None or args.text is None):
        print(f"attnlab explore: {source.default_note}")  # where the default input comes from
    if out is None:
        from attnlab.viz.explorer.server import serve

        try:
            serve(source, args.host, args.port)
        except KeyboardInterrupt:
            print("attnlab explore: stopped")
        return 0
    text = args.text if args.text is not None else source.default_text
    if not text:
        raise ValueError(f"{args.model}: no example input fits this model (no example text fits its vocabulary, "
                         "or this installation has no examples/ images); give TEXT")
    options = {}
    if args.generate:
        if not hasattr(source, "generated_limit"):
            raise ValueError(f"--generate: {args.model} holds a {source.family} model, which does not continue "
                             "its input; --generate is for language and music models")
        limit = source.generated_limit(text)
        if args.generate > limit:
            raise ValueError(f"--generate {args.generate}: the text uses {source.max_tokens - limit} of the "
                             f"model's {source.max_tokens} positions; at most {limit} tokens can be generated")
        options["generate"] = args.generate
    page = explorer_html(source, text, **options)
    atomic_write(out, lambda path: Path(path).write_text(page, encoding="utf-8"))  # never a half-written page
    print(f"attnlab explore: wrote {out} ({os.path.getsize(out) / 1e6:.1f} MB, self-contained)")
    return 0
