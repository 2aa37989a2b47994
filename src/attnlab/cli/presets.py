"""``attnlab presets``: list the model presets."""

HELP = "list the model presets (and their parameter counts with --count)"


def add_arguments(parser) -> None:
    parser.add_argument("--count", action="store_true", help="build each preset and print its parameter count")


def run(args) -> int:
    import attnlab

    for name in attnlab.list_presets():
        if args.count:
            model = attnlab.create_model(name)
            print(f"{name:28s} {model.num_parameters():>14,d} parameters")
        else:
            print(name)
    return 0
