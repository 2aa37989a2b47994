"""``attnlab complete-image``: keep the top rows of an image, sample the rest.

    attnlab complete-image --model runs/it-mnist/model digit.png --keep-rows 14 --n 4 --out completions.png
    attnlab complete-image --model runs/it-mnist/model a.png b.png c.png --keep-rows 14 --out rows.png

The kept rows run once through the model into its cache; every other sub-pixel is one
cached step. The PNG has a row per image showing, left to right: the kept rows (the rest
blank), the ``--n`` completions, and the original. A class-conditional model needs the
images' ``--class``: once for all of them, or once per image in their order.
"""

from __future__ import annotations

HELP = "complete an image from its top rows with an Image Transformer (PNG: given, samples, original)"


def add_arguments(parser) -> None:
    from attnlab.families.image.train import add_output_arguments, add_sampling_arguments

    parser.add_argument("--model", required=True, help="a model directory written by `attnlab train image`")
    parser.add_argument("images", nargs="+", metavar="image",
                        help="PNGs (or any Pillow images) of the model's size: a row of the figure each")
    parser.add_argument("--keep-rows", type=int, required=True, help="rows kept from the top of the image")
    parser.add_argument("--n", type=int, default=4, help="completions (default: 4)")
    parser.add_argument("--class", dest="label", action="append",
                        help="the images' class (class-conditional models): once, or once per image")
    add_sampling_arguments(parser)
    add_output_arguments(parser)


def run(args) -> int:
    import torch

    from attnlab.families.image.train import parse_class, prepare_sampling, progress_bar, read_png, write_png
    from attnlab.generation.images import complete_images
    from attnlab.viz.images import image_grid, upscale

    if not 1 <= args.n <= 256:
        raise ValueError(f"--n={args.n} must be in 1..256")
    names = args.label or []
    if len(names) not in (0, 1, len(args.images)):
        raise ValueError(f"--class is given {len(names)} times for {len(args.images)} images: give it once for all "
                         "of them or once per image")
    out, device, options, model, classes = prepare_sampling(args)
    if classes and not names:
        raise ValueError("this model is class-conditional: give the images' --class")
    labels = None
    if names:
        labels = [parse_class(name, classes) for name in names] * (len(args.images) if len(names) == 1 else 1)
    images = torch.cat([read_png(path, model) for path in args.images])
    if not 0 <= args.keep_rows < model.config.height:
        raise ValueError(f"--keep-rows={args.keep_rows} must be in [0, {model.config.height})")
    given = model.given_prefix(args.keep_rows)
    count = len(args.images)
    bar, progress = progress_bar(model.config.sequence_length - given, not args.no_progress,
                                 f"completing {count} image{'s' * (count > 1)} {args.n} time{'s' * (args.n > 1)}")
    completed = complete_images(model, images.to(device), args.keep_rows, samples=args.n, labels=labels,
                                progress=lambda done: progress(done - given), **options).cpu()
    if bar is not None:
        bar.close()
    rows = []
    for i, image in enumerate(images.to(torch.uint8)):
        kept = torch.full_like(image, 255)
        kept[:, :args.keep_rows] = image[:, :args.keep_rows]
        rows.append([kept, *completed[i * args.n:(i + 1) * args.n], image])
    write_png(out, upscale(image_grid(rows), args.scale))
    print(out)
    return 0
