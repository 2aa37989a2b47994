"""``attnlab evaluate-image``: bits per dimension of an Image Transformer on a test split.

    attnlab evaluate-image --model runs/it-mnist/model                 # the data it was trained on
    attnlab evaluate-image --model runs/it-mnist/model --data fashion-mnist --split valid --limit 1000
    attnlab evaluate-image --model runs/sr/model --super-resolve 1000 --figure sr.png  # + PSNR vs bicubic

bits/dim = the mean negative log2-likelihood per sub-pixel (a model that predicts the
uniform distribution over 256 values scores exactly 8). A super-resolution model can also
be scored as an upsampler: ``--super-resolve N`` downsamples the first N images, samples
the model's output for each (greedy by default; ``--samples K`` at a temperature: the
per-pixel mean of K samples) and prints the mean per-image PSNR
against the originals, the model's and bicubic upsampling's; ``--figure`` shows the first
ones as rows of low-res (enlarged), bicubic, output, original.
"""

from __future__ import annotations

HELP = "bits per dimension of an Image Transformer on a data split (default: test of its training data)"


def add_arguments(parser) -> None:
    from attnlab.cli.options import SEED, add_runtime_arguments, bounded_int

    parser.add_argument("--model", required=True, help="a model directory written by `attnlab train image`")
    parser.add_argument("--data", help="mnist, fashion-mnist, emoji or DIR (default: what the model was trained on)")
    from attnlab.cli.options import add_data_dir_argument

    add_data_dir_argument(parser)
    parser.add_argument("--split", default="test", choices=("train", "valid", "test"))
    from attnlab.cli.options import add_limit_argument

    add_limit_argument(parser, "images")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--json", help="also write the result to this JSON file (an existing one only with --force)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_runtime_arguments(parser)
    sr = parser.add_argument_group("super-resolution models")
    sr.add_argument("--super-resolve", type=int, metavar="N",
                    help="also super-resolve the first N images and report PSNR against bicubic upsampling")
    sr.add_argument("--temperature", type=float, default=0.0,
                    help="sampling temperature of --super-resolve (default: 0 = greedy)")
    sr.add_argument("--top-k", type=bounded_int(1, 256), metavar="K",
                    help="sample among the K most probable intensities, 1 to 256")
    sr.add_argument("--samples", type=int, default=1,
                    help="with --temperature > 0: each output is the per-pixel mean of this many samples (default: 1)")
    sr.add_argument("--seed", type=SEED, default=0)
    sr.add_argument("--figure", help="a PNG of the first --figure-images: low-res, bicubic, output, original per row")
    sr.add_argument("--figure-images", type=int, default=8, help="rows of --figure (default: 8)")
    sr.add_argument("--scale", type=int, default=3, help="enlarge the pixels of --figure by this factor (default: 3)")
    from attnlab.cli.options import add_force_argument

    add_force_argument(parser, "--json and --figure")


def run(args) -> int:
    import json
    import sys

    import torch

    from tqdm import tqdm

    from pathlib import Path

    from attnlab.cli.options import apply_threads, check_recorded_data, own_data_line, resolve_device
    from attnlab.data.images import IMAGE_SETS, load_images, same_source
    from attnlab.families.image.task import evaluate_bits_per_dim, evaluate_super_resolution
    from attnlab.families.image.train import (IMAGE_FILE, check_png, load_image_model, load_image_set, model_data,
                                              sampling_options, write_png)
    from attnlab.files import atomic_write_json, check_output_file, json_safe
    from attnlab.viz.images import image_grid, upscale

    for name in ("limit", "batch_size", "super_resolve", "figure_images", "samples"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')}={value} must be at least 1")
    if args.json:
        check_output_file(args.json, force=args.force, flag="--json")
    if args.samples > 1 and args.temperature == 0:
        raise ValueError(f"--samples {args.samples}: greedy outputs (--temperature 0) are all the same; give a "
                         "--temperature above 0 to average several samples")
    if args.samples > 1 and not args.super_resolve:
        raise ValueError(f"--samples {args.samples} averages super-resolution outputs: pass --super-resolve N too")
    if args.figure and not args.super_resolve:
        raise ValueError("--figure shows super-resolution outputs: pass --super-resolve N too")
    figure = check_png(args.figure, force=args.force, scale=args.scale, name="--figure") if args.figure else None
    apply_threads(args)
    device = torch.device(resolve_device(args.device))
    options = sampling_options(args, device)
    options.pop("compile")  # evaluate-image has no --compile: its super-resolution samples decode eagerly
    model, _ = load_image_model(args.model, device)
    if args.super_resolve and not model.config.low_resolution:
        raise ValueError(f"--super-resolve: {args.model} is not a super-resolution model (its low_resolution is 0)")
    trained_on = model_data(args.model)
    own = args.data is None  # the model's own held-out data, as image.json records it
    if own:  # refused when image.json does not say, or names a folder that is gone
        check_recorded_data(args.model, IMAGE_FILE, trained_on, "--data", named=[*IMAGE_SETS, "emoji"])
    source = args.data or trained_on
    c = model.config
    # The model's own data is converted as its training converted it; other images are
    # scored only at the size and channels they have (complete-image's rule): no silent resize.
    same = same_source(source, trained_on)
    if not same and Path(source).is_dir():  # a folder it was not trained on: scored whole (or its test/ part)
        data = load_images(source, args.split, whole=True)
    else:
        data = load_image_set(source, args.split, image_size=c.height if same else None,
                              channels=c.channels if same else None, data_dir=args.data_dir)
    if tuple(data.images.shape[1:]) != (c.channels, c.height, c.width):
        _, channels, height, width = data.images.shape
        raise ValueError(f"--data {source}: its images are {width}×{height} with {channels} channel(s), but the model "
                         f"takes {c.width}×{c.height} with {c.channels}; give images of the model's size and channels")
    if c.num_classes and len(data.classes) != c.num_classes:
        raise ValueError(f"--data {source}: {len(data.classes)} classes, the model was trained with {c.num_classes}")
    count = len(data) if args.limit is None else min(args.limit, len(data))
    if own:
        print(own_data_line(args.model, data.origin or f"{source} {args.split}", len(data), "images"))
    if count < len(data) or (data.origin and not own):
        whole = data.origin or f"the {len(data):,d} images of {source} {args.split}"
        print(f"scoring {f'the first {count:,d} of ' if count < len(data) else ''}{whole}")
    bar = None
    if not args.no_progress:
        bar = tqdm(total=count, desc="scoring", unit="image", file=sys.stderr, leave=False)
    result = evaluate_bits_per_dim(model, data, batch_size=args.batch_size, limit=args.limit,
                                   progress=None if bar is None else bar.update)
    if bar is not None:
        bar.close()
    result.update({"data": str(source), "split": args.split, "model": str(args.model)})
    print(f"{source} {args.split}: {result['bits_per_dim']:.4f} bits/dim ({result['nats_per_dim']:.4f} nats) "
          f"over {result['images']} images")
    if args.super_resolve:
        total = min(args.super_resolve, len(data))
        bar = None if args.no_progress else tqdm(total=total, desc="super-resolving", unit="image", file=sys.stderr,
                                                 leave=False)
        sr, images = evaluate_super_resolution(model, data, args.super_resolve, batch_size=args.batch_size,
                                               samples=args.samples, progress=None if bar is None else bar.update,
                                               **options)
        if bar is not None:
            bar.close()
        how = "greedy" if args.temperature == 0 else f"temperature {args.temperature:g}"
        if args.samples > 1:
            how += f", the mean of {args.samples} samples"
        print(f"super-resolution {c.low_resolution}×{c.low_resolution} -> {c.height}×{c.width} of the first "
              f"{sr['images']} images ({how}): PSNR {sr['psnr_model']:.2f} dB, bicubic {sr['psnr_bicubic']:.2f} dB "
              f"(mean per image); the model's error is below bicubic's on {100 * sr['model_better']:.1f} % of them")
        result["super_resolution"] = sr
        if figure is not None:
            rows, factor = [], c.height // c.low_resolution
            for i in range(min(args.figure_images, sr["images"])):
                rows.append([upscale(images["low"][i], factor), images["bicubic"][i], images["output"][i],
                             images["original"][i]])
            write_png(figure, upscale(image_grid(rows), args.scale))
            print(f"figure: {figure}")
    if args.json:
        atomic_write_json(args.json, json_safe(result))
    else:
        print(json.dumps(json_safe(result)))
    return 0
