"""``attnlab positions``: the sinusoidal position encoding as a heatmap, its dot products
against the offset k, and the rotation property PE(pos+k) = R(ωk)·PE(pos) checked in
float64, optionally beside a trained model's learned position table."""

HELP = "plot the sinusoidal position encoding and check its rotation property (optionally beside a learned table)"

NAMES = ("positions_sinusoidal.png", "positions_dot_products.png", "positions_rotation.png")


def add_arguments(parser) -> None:
    parser.add_argument("--out", required=True, help="directory for the PNGs (created if missing)")
    parser.add_argument("--length", type=int, default=128, help="positions shown (default: 128)")
    parser.add_argument("--d-model", type=int, default=128, help="width of the encoding (default: 128)")
    parser.add_argument("--model", help="a model directory with a learned position table to show beside it "
                                        "(HuggingFace BERT, or an attnlab model with learned positions)")
    parser.add_argument("--force", action="store_true", help="replace PNGs of an earlier run in --out")


def _learned_table(directory):
    from attnlab.interop.hf_bert import is_hf_bert_directory, load_hf_bert
    from attnlab.models.registry import load_model

    model = load_hf_bert(directory)[0] if is_hf_bert_directory(directory) else load_model(directory)
    table = getattr(getattr(model, "positions", None), "weight", None)
    if table is None:
        raise ValueError(f"--model {directory}: the model has no learned position table")
    return table.detach()


def run(args) -> int:
    from pathlib import Path

    from attnlab.viz.positions import plot_positions, rotation_error

    if not 2 <= args.length <= 4096:
        raise ValueError(f"--length {args.length}: choose 2 to 4096")
    if args.d_model < 2 or args.d_model % 2 or args.d_model > 4096:
        raise ValueError(f"--d-model {args.d_model}: choose an even number from 2 to 4096")
    out = Path(args.out)
    existing = [name for name in NAMES if (out / name).exists()]
    if existing and not args.force:
        raise ValueError(f"--out {out}: {', '.join(existing)} exist; pass --force to replace them")
    learned = _learned_table(args.model) if args.model else None
    errors = rotation_error(args.length, args.d_model, range(1, args.length))
    worst = max(errors.values())
    out.mkdir(parents=True, exist_ok=True)
    paths = plot_positions(out, length=args.length, d_model=args.d_model, learned=learned,
                           learned_name=Path(args.model).name if args.model else "")
    print(f"rotation property PE(pos+k) = R(wk) PE(pos), pos < {args.length}, 1 <= k < {args.length}, "
          f"d_model={args.d_model}: max error {worst:.2e} (float64) -> {'OK' if worst < 1e-6 else 'FAILED'}")
    for path in paths:
        print(path)
    return 0 if worst < 1e-6 else 1
