"""``attnlab attention``: translate one sentence and plot its encoder–decoder attention
(every layer and head; source tokens across, target tokens down) to a PNG."""

from attnlab.cli.options import add_force_argument, bounded_int
from attnlab.families.translation.translate import add_decoding_arguments, decoding_options, set_threads

HELP = "translate a sentence and write a PNG of the encoder-decoder attention per layer and head"


def add_arguments(parser) -> None:
    add_decoding_arguments(parser)
    parser.add_argument("sentence", help="the source sentence")
    parser.add_argument("-o", "--out", default="attention.png", help="PNG file to write (default: attention.png)")
    parser.add_argument("--dpi", type=bounded_int(10, 600), default=100, metavar="N", help="(default: 100)")
    add_force_argument(parser, "the PNG")


def run(args) -> int:
    from pathlib import Path

    from attnlab.cli.options import resolve_device
    from attnlab.files import check_output_file
    from attnlab.families.translation.translator import Translator
    from attnlab.viz import plot_attention_grid

    out = check_output_file(Path(args.out), force=args.force, flag="-o", suffixes=(".png",))
    set_threads(args.threads)
    translator = Translator.load(args.model, device=resolve_device(args.device))
    example = translator.attention(args.sentence, **decoding_options(args))
    layers, heads = example.cross.shape[:2]
    path = plot_attention_grid(example.cross, example.source_pieces, example.target_pieces, args.out,
                               title=f"{example.source}  →  {example.translation}", dpi=args.dpi)
    print(example.translation)
    print(f"encoder-decoder attention, {layers} layers x {heads} heads -> {path}")
    return 0
