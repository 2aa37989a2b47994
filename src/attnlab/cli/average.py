"""``attnlab average``: average checkpoints' weights into a model directory (Vaswani et al.
2017, section 6.1, average the last 5 or 20 checkpoints).

``-o DIR`` follows the output rule (docs/files.md): a missing or empty DIR is written; an
existing non-empty one (even an earlier average) is replaced as a whole only with
``--force``; DIR is never one of the inputs nor a directory holding one of them, with or
without ``--force``.
"""

HELP = "average the weights of checkpoints (or model directories) into a new model directory"


def add_arguments(parser) -> None:
    from attnlab.cli.options import add_force_argument, bounded_int

    parser.add_argument("checkpoints", nargs="+", metavar="CKPT",
                        help="checkpoint or model directories; with --last, directories holding step_* checkpoints")
    parser.add_argument("-o", "--out", required=True, help="model directory to write")
    parser.add_argument("--last", type=bounded_int(1, 10**6), metavar="N",
                        help="average the newest N checkpoints found under each CKPT")
    add_force_argument(parser, "a non-empty -o directory")


def run(args) -> int:
    from pathlib import Path

    from attnlab.files import check_output_directory, refuse_replacing_inputs
    from attnlab.training import average_checkpoints_to_directory, list_checkpoints
    from attnlab.training.outputs import describe_model_directory

    paths = [Path(p) for p in args.checkpoints]
    for path in paths:
        if not path.exists():
            raise ValueError(f"{path}: no such checkpoint")
    if args.last is not None:
        found = []
        for root in paths:
            root_checkpoints = list_checkpoints(root) or list_checkpoints(root / "checkpoints")
            if not root_checkpoints:
                raise ValueError(f"{root}: holds no step_* checkpoints")
            found.extend(root_checkpoints[-args.last:])
        paths = found
    out = Path(args.out)
    refuse_replacing_inputs(out, [Path(p) for p in args.checkpoints] + paths, flag="-o", verb="averaging")
    if out.is_dir() and not out.is_symlink() and any(out.iterdir()) and not args.force:
        raise ValueError(f"-o {out}: the directory holds {describe_model_directory(out)}; pass --force to replace it "
                         "as a whole, or choose a new directory")
    check_output_directory(out, force=args.force, flag="-o")
    average_checkpoints_to_directory(paths, out, replace=True)  # checked above: missing, empty, or --force
    print(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) -> {out}")
    return 0
