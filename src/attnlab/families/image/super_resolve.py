"""``attnlab super-resolve``: a low-resolution image to the model's full size.

    attnlab super-resolve --model runs/sr-mnist/model small.png --out big.png
    attnlab super-resolve --model runs/sr-mnist/model digit.png --downsample --out big.png --comparison strip.png

The input must be the model's low resolution (e.g. 7×7 for 28×28), or, with
``--downsample``, a full-size image that is first averaged down (then the original is
known: ``--comparison`` shows low-res, bicubic, output and original side by side and the
PSNR of bicubic and of the output against the original is printed).
"""

from __future__ import annotations

HELP = "super-resolve a low-resolution image with an Image Transformer super-resolution model"


def add_arguments(parser) -> None:
    from attnlab.families.image.train import add_output_arguments, add_sampling_arguments

    parser.add_argument("--model", required=True, help="a super-resolution model directory (`attnlab train image` "
                                                       "with an imagetransformer_sr_* preset)")
    parser.add_argument("image", help="the low-resolution image (or a full-size one with --downsample)")
    parser.add_argument("--downsample", action="store_true",
                        help="the image is full size: average it down first (and compare with it)")
    parser.add_argument("--comparison", help="also write a PNG strip: low-res (enlarged), bicubic, output[, original]")
    add_sampling_arguments(parser)
    add_output_arguments(parser)


def run(args) -> int:
    import sys
    from pathlib import Path

    import torch

    from attnlab.cli.options import resolve_device
    from attnlab.families.image.task import bicubic_upsample, downsample, psnr
    from attnlab.families.image.train import (check_output, check_png, load_image_model, progress_bar, read_png,
                                              sampling_options, write_png)
    from attnlab.generation.images import sample_images
    from attnlab.viz.images import image_grid, upscale

    out = check_output(args)
    comparison = None
    if args.comparison:
        comparison = check_png(args.comparison, force=args.force, scale=args.scale, name="--comparison")
        if comparison.resolve() == Path(out).resolve():
            raise ValueError("--comparison must be another file than --out")
    device = torch.device(resolve_device(args.device))
    options = sampling_options(args, device)
    model, _ = load_image_model(args.model, device)
    c = model.config
    if not c.low_resolution:
        raise ValueError(f"{args.model} is not a super-resolution model (its low_resolution is 0)")
    if c.num_classes:
        raise ValueError("class-conditional super-resolution models are not supported by this verb")
    original = None
    if args.downsample:
        original = read_png(args.image, model)
        low = downsample(original, c.low_resolution)
    else:
        low = read_png(args.image, model, size=(c.low_resolution, c.low_resolution)).to(torch.uint8)
    bar, progress = progress_bar(c.sequence_length, not args.no_progress, "super-resolving")
    output = sample_images(model, 1, low_res=low.to(device), progress=progress, **options).cpu()
    if bar is not None:
        bar.close()
    write_png(out, upscale(output[0], args.scale))
    bicubic = bicubic_upsample(low, c.height)
    if original is not None:
        print(f"PSNR against the original: bicubic {psnr(bicubic, original):.2f} dB, "
              f"output {psnr(output, original):.2f} dB", file=sys.stderr)
    if comparison is not None:
        factor = c.height // c.low_resolution
        strip = [upscale(low[0], factor), bicubic[0], output[0]] + ([original[0].to(torch.uint8)] if original is not None
                                                                     else [])
        write_png(comparison, upscale(image_grid([strip]), args.scale))
    print(out)
    return 0
