"""``attnlab data``: the named data sets, where each comes from, and one command to get it.

    attnlab data list                        # every set: what it is, its source, whether it is here
    attnlab data get jsb                     # download the published JSB file, check it, convert it
    attnlab data get multi30k --to DIR       # into DIR/multi30k (then ATTNLAB_DATA=DIR)
    attnlab data get jsb --from Jsb16thSeparated.npz   # a copy you have (or a mirror URL)

Downloads are checked against the SHA-256 of the published files; a file that does not
match is refused and nothing is left behind (attnlab.data.download).
"""

from __future__ import annotations

HELP = "list the named data sets, or get one from its official source (checked download)"


def add_arguments(parser) -> None:
    from attnlab.cli.options import add_force_argument

    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="every named data set, its source, and whether it is here",
                                 description="Every named data set, its official source, and whether it is here.")
    listing.add_argument("--to", metavar="DIR", help="the data root to look in (default: $ATTNLAB_DATA, "
                                                     "else ~/.cache/attnlab/data)")
    listing.set_defaults(run=run_list)
    get = actions.add_parser("get", help="download a named set (checksum-checked) or say how to install it",
                             description="Download a named data set from its official source, check its "
                                         "SHA-256 and write it where attnlab reads it; for sets that ship in a "
                                         "package, say how to install them.")
    get.add_argument("name", metavar="NAME", help="a set from `attnlab data list` (downloads: multi30k, jsb, emoji)")
    get.add_argument("--to", metavar="DIR", help="the data root to write into (default: $ATTNLAB_DATA, else "
                                                 "~/.cache/attnlab/data); the set goes into DIR/<its folder>")
    get.add_argument("--from", dest="source", metavar="URL_OR_PATH",
                     help="fetch the same files from here instead of the official URL: a URL (https://, "
                          "file://; a base ending in / for several files), a file or a directory; the "
                          "checksum is checked all the same")
    add_force_argument(get, "a file already there that is not the published one")
    get.set_defaults(run=run_get)


def run_list(args) -> int:
    import os

    from attnlab.data.download import describe_sets, print_table
    from attnlab.data.registry import data_root

    if args.to is not None:
        print(f"data root: {args.to} (--to)")
    else:
        origin = "$ATTNLAB_DATA" if os.environ.get("ATTNLAB_DATA") else "the default; set ATTNLAB_DATA to move it"
        print(f"data root: {data_root()} ({origin})")
    print_table(describe_sets(args.to))
    return 0


def run_get(args) -> int:
    import sys

    from attnlab.data.download import get_data_set

    get_data_set(args.name, args.to, source=args.source, force=args.force,
                 say=lambda line: print(line, file=sys.stderr, flush=True))
    return 0


def run(args) -> int:  # the sub-parsers set their own run; kept for the verb protocol
    return args.run(args)
