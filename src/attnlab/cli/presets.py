"""``attnlab presets``: list the model presets."""

HELP = "list the model presets (and their parameter counts with --count)"


def add_arguments(parser) -> None:
    parser.add_argument("--count", action="store_true",
                        help="print each preset's parameter count at its default vocabulary (or class) size")


def run(args) -> int:
    import attnlab

    names = attnlab.list_presets()
    if not args.count:
        print("\n".join(names))
        return 0
    import torch

    print(f"{'preset':28s} {'parameters':>14s}  at")
    for name in names:
        config = attnlab.get_preset(name)
        # With the initialisers switched off the weights are allocated but never written (the
        # pages are not even touched): counting every preset takes milliseconds, not seconds.
        with _no_init(torch):
            model = attnlab.create_model(name)
        sizes = [f"{field} {getattr(config, field):,d}" for field in ("vocab_size", "tgt_vocab_size", "num_classes")
                 if isinstance(getattr(config, field, None), int)]
        print(f"{name:28s} {model.num_parameters():>14,d}  {', '.join(sizes) or '-'}")
    print("Counts depend on the vocabulary (or class) size; e.g. attnlab.create_model(NAME, vocab_size=V)"
          ".num_parameters() for yours.")
    return 0


def _no_init(torch):
    """Turn ``torch.nn.init``'s in-place initialisers into no-ops for a while: only the
    shapes of the parameters are wanted here, not their values."""
    import contextlib

    names = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "xavier_uniform_",
             "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_")

    @contextlib.contextmanager
    def switched_off():
        saved = {name: getattr(torch.nn.init, name) for name in names if hasattr(torch.nn.init, name)}
        try:
            for name in saved:
                setattr(torch.nn.init, name, lambda tensor, *args, **kwargs: tensor)
            yield
        finally:
            for name, function in saved.items():
                setattr(torch.nn.init, name, function)

    return switched_off()
