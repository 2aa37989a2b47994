"""``attnlab explore``: the attention explorer for a model directory (a HuggingFace BERT
directory, a translation model, a language model), served on 127.0.0.1 or written as one
self-contained HTML file."""

from attnlab.cli.options import add_runtime_arguments, resolve_device

HELP = "explore a model's attention in the browser: serve it locally, or write a self-contained HTML file"


def add_arguments(parser) -> None:
    parser.add_argument("--model", required=True, help="model directory (fixed for the whole session)")
    parser.add_argument("text", nargs="?", help="the text to show (with --html; default: the model's example)")
    parser.add_argument("--html", metavar="OUT.html", help="write a self-contained page for TEXT instead of serving")
    parser.add_argument("--force", action="store_true", help="with --html: replace an existing file")
    parser.add_argument("--generate", type=int, default=0,
                        help="with --html and a language model: also show N generated tokens (default: 0)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default: 127.0.0.1, this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default: 8000; 0 = any free)")
    add_runtime_arguments(parser)


def run(args) -> int:
    import os
    from pathlib import Path

    from attnlab.viz.explorer import explorer_html, load_source

    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port {args.port}: choose 0 to 65535")
    if args.html is None and args.text is not None:
        raise ValueError("TEXT is for --html; the served page has its own text box")
    if args.html is not None:
        out = Path(args.html)
        if not out.name.lower().endswith((".html", ".htm")):
            raise ValueError(f"--html {args.html}: give a file name ending in .html")
        if out.exists() and not args.force:
            raise ValueError(f"--html {args.html}: the file exists; pass --force to replace it")
        if not out.parent.is_dir():
            raise ValueError(f"--html {args.html}: no such directory {out.parent}")
    source = load_source(args.model, device=resolve_device(args.device))
    if args.html is None:
        from attnlab.viz.explorer.server import serve

        try:
            serve(source, args.host, args.port)
        except KeyboardInterrupt:
            print("attnlab explore: stopped")
        return 0
    options = {"generate": args.generate} if args.generate else {}
    page = explorer_html(source, args.text, **options)
    from attnlab.models.base import _atomic_write  # temp file + rename: never a half-written page

    _atomic_write(out, lambda path: Path(path).write_text(page, encoding="utf-8"))
    print(f"attnlab explore: wrote {out} ({os.path.getsize(out) / 1e6:.1f} MB, self-contained)")
    return 0
