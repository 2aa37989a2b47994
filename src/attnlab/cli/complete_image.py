"""``attnlab complete-image``: keep the top rows of an image, sample the rest.

    attnlab complete-image --model runs/it-mnist/model digit.png --keep-rows 14 --n 4 --out completions.png

The kept rows run once through the model into its cache; every other sub-pixel is one
cached step. The PNG shows, left to right: the kept rows (the rest blank), the ``--n``
completions, and the original.
"""

from __future__ import annotations

HELP = "complete an image from its top rows with an Image Transformer (PNG: given, samples, original)"


def add_arguments(parser) -> None:
    from attnlab.cli.image import add_output_arguments, add_sampling_arguments

    parser.add_argument("--model", required=True, help="a model directory written by `attnlab train image`")
    parser.add_argument("image", help="a PNG (or any Pillow image) of the model's size")
    parser.add_argument("--keep-rows", type=int, required=True, help="rows kept from the top of the image")
    parser.add_argument("--n", type=int, default=4, help="completions (default: 4)")
    parser.add_argument("--class", dest="label", help="the image's class (class-conditional models)")
    add_sampling_arguments(parser)
    add_output_arguments(parser)


def run(args) -> int:
    import torch

    from attnlab.cli.image import prepare_sampling, progress_bar, read_png, write_png
    from attnlab.generation.images import complete_images
    from attnlab.viz.images import image_grid, upscale

    if not 1 <= args.n <= 256:
        raise ValueError(f"--n={args.n} must be in 1..256")
    out, device, options, model, classes, label = prepare_sampling(args)
    if classes and label is None:
        raise ValueError("this model is class-conditional: give the image's --class")
    image = read_png(args.image, model)
    if not 0 <= args.keep_rows < model.config.height:
        raise ValueError(f"--keep-rows={args.keep_rows} must be in [0, {model.config.height})")
    given = model.given_prefix(args.keep_rows)
    bar, progress = progress_bar(model.config.sequence_length - given, not args.no_progress,
                                 f"completing {args.n} time{'s' * (args.n > 1)}")
    completed = complete_images(model, image.to(device), args.keep_rows, samples=args.n,
                                labels=None if label is None else [label],
                                progress=lambda done: progress(done - given), **options).cpu()
    if bar is not None:
        bar.close()
    kept = torch.full_like(image[0], 255)
    kept[:, :args.keep_rows] = image[0, :, :args.keep_rows]
    write_png(out, upscale(image_grid([[kept.to(torch.uint8), *completed, image[0].to(torch.uint8)]]), args.scale))
    print(out)
    return 0
