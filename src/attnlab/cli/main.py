"""``attnlab <verb>``: one small module per verb, thin over the library.

Verb modules must not import torch at module level: ``attnlab --help`` stays fast
because nothing heavy is imported until a verb runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# verb name -> module under attnlab.cli; each module has ``HELP``, ``add_arguments(parser)``, ``run(args) -> int``.
VERBS = {
    "presets": "attnlab.cli.presets",
    "demo": "attnlab.cli.demo",
    "train": "attnlab.cli.train",
    "translate": "attnlab.cli.translate",
    "evaluate": "attnlab.cli.evaluate",
    "attention": "attnlab.cli.attention",
    "average": "attnlab.cli.average",
    "generate": "attnlab.cli.generate",
    "classify": "attnlab.cli.classify",
    "evaluate-vit": "attnlab.cli.evaluate_vit",
    "vit-figures": "attnlab.cli.vit_figures",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnlab", description="The Transformer family: train, decode, inspect.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    for name, module_name in VERBS.items():
        module = importlib.import_module(module_name)
        sub = verbs.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("attnlab")
    except PackageNotFoundError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verb is None:
        parser.print_help()
        return 0
    try:
        return args.run(args) or 0
    except ValueError as error:  # bad user input: a clear message, no traceback
        print(f"attnlab {args.verb}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
