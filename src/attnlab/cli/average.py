"""``attnlab average``: average checkpoints' weights into a model directory (Vaswani et al.
2017, section 6.1, average the last 5 or 20 checkpoints)."""

HELP = "average the weights of checkpoints (or model directories) into a new model directory"


def add_arguments(parser) -> None:
    parser.add_argument("checkpoints", nargs="+", metavar="CKPT",
                        help="checkpoint or model directories; with --last, directories holding step_* checkpoints")
    parser.add_argument("-o", "--out", required=True, help="model directory to write")
    parser.add_argument("--last", type=int, help="average the newest N checkpoints found under each CKPT")


def run(args) -> int:
    from pathlib import Path

    from attnlab.training import average_checkpoints_to_directory, list_checkpoints

    paths = [Path(p) for p in args.checkpoints]
    for path in paths:
        if not path.exists():
            raise ValueError(f"{path}: no such checkpoint")
    if args.last is not None:
        if args.last < 1:
            raise ValueError(f"--last={args.last} must be at least 1")
        found = []
        for root in paths:
            root_checkpoints = list_checkpoints(root) or list_checkpoints(root / "checkpoints")
            if not root_checkpoints:
                raise ValueError(f"{root}: holds no step_* checkpoints")
            found.extend(root_checkpoints[-args.last:])
        paths = found
    average_checkpoints_to_directory(paths, args.out)
    print(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) -> {args.out}")
    return 0
