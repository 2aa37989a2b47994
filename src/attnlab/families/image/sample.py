"""``attnlab sample-images``: sample a grid of images from a trained Image Transformer.

    attnlab sample-images --model runs/it-mnist/model --n 16 --out grid.png
    attnlab sample-images --model runs/it-emoji/model --n 8 --temperature 0.9 --out emoji.png   # a row per class
    attnlab sample-images --model runs/it-emoji/model --n 8 --class Flags --out flags.png

Each sub-pixel is one cached step of the model (the pattern's window of keys, not the
whole prefix). A class-conditional model without ``--class`` gets ``--n`` samples of every
class, one row per class.
"""

from __future__ import annotations

HELP = "sample images from an Image Transformer into a PNG grid (a row per class when class-conditional)"


def add_arguments(parser) -> None:
    from attnlab.families.image.train import add_output_arguments, add_sampling_arguments

    parser.add_argument("--model", required=True, help="a model directory written by `attnlab train image`")
    parser.add_argument("--n", type=int, default=16, help="images (per class when class-conditional; default 16)")
    parser.add_argument("--class", dest="label", help="sample this class only (a name or an index)")
    parser.add_argument("--columns", type=int, help="images per grid row (default: about a square)")
    add_sampling_arguments(parser)
    add_output_arguments(parser)


def run(args) -> int:
    import math
    import sys

    import torch

    from attnlab.families.image.train import parse_class, prepare_sampling, progress_bar, write_png
    from attnlab.generation.images import sample_images
    from attnlab.viz.images import image_grid, upscale

    if args.n < 1 or args.n > 4096:
        raise ValueError(f"--n={args.n} must be in 1..4096")
    if args.columns is not None and args.columns < 1:
        raise ValueError(f"--columns={args.columns} must be at least 1")
    out, device, options, model, classes = prepare_sampling(args)
    label = parse_class(args.label, classes)
    if classes and label is None:
        labels = torch.arange(len(classes)).repeat_interleave(args.n)
        rows = len(classes)
    else:
        labels = None if label is None else torch.full((args.n,), label)
        rows = None
    count = args.n * (rows or 1)
    bar, progress = progress_bar(model.config.sequence_length, not args.no_progress,
                                 f"sampling {count} image{'s' * (count > 1)}")
    images = sample_images(model, count, labels=labels, progress=progress, **options).cpu()
    if bar is not None:
        bar.close()
    if rows:
        grid_rows = [list(images[r * args.n:(r + 1) * args.n]) for r in range(rows)]
    else:
        columns = args.columns or math.ceil(math.sqrt(count))
        grid_rows = [list(images[i:i + columns]) for i in range(0, count, columns)]
    write_png(out, upscale(image_grid(grid_rows), args.scale))
    if rows:
        print("rows: " + ", ".join(classes), file=sys.stderr)
    print(out)
    return 0
