"""``attnlab vit-figures --model DIR --out FIGDIR``: the ViT paper's interpretability figures.

One PNG each: ``embedding_filters.png`` (principal components of the patch-embedding
filters), ``position_similarity.png`` (cosine similarity of position embeddings),
``attention_distance.png`` (mean attention distance per head against depth, averaged
over ``--images`` test images) and ``attention_maps.png`` (class-token attention per head
of the last layer and attention rollout, overlaid on the first image).
"""

from __future__ import annotations

HELP = "write the ViT paper's interpretability figures (filters, position similarity, attention distance, maps)"


def add_arguments(parser) -> None:
    from attnlab.cli.options import add_force_argument, add_runtime_arguments, bounded_int

    parser.add_argument("--model", required=True, help="a model directory written by attnlab train vit")
    parser.add_argument("--out", required=True, help="directory for the PNG files (made if missing; other files in "
                                                     "it are left alone)")
    parser.add_argument("--data", help="image set for the attention figures (default: what the model was trained on)")
    parser.add_argument("--image", action="append", default=[], metavar="FILE",
                        help="use this image file instead (repeatable; the first is drawn)")
    parser.add_argument("--images", type=bounded_int(1, 2**16), default=128, metavar="N",
                        help="test images averaged for the attention distance (default: 128)")
    add_force_argument(parser, "the four PNG files")
    add_runtime_arguments(parser)


def run(args) -> int:
    from pathlib import Path

    import torch

    from attnlab.cli.options import apply_threads
    from attnlab.data.images import load_images, normalize, read_image
    from attnlab.families.vit.evaluate import own_data
    from attnlab.families.vit.plots import FIGURE_NAMES, write_vit_figures
    from attnlab.families.vit.task import load_classifier
    from attnlab.families.vit.train import resolve_device
    from attnlab.files import check_output_directory, check_output_file

    # The directory may hold other files (left alone); the four figures are replaced only with --force.
    out = check_output_directory(args.out, force=True, flag="--out")
    for name in FIGURE_NAMES if out.is_dir() else ():
        check_output_file(out / name, force=args.force, flag="--out")
    apply_threads(args)
    device = resolve_device(args.device)
    model, _ = load_classifier(args.model, device)
    config = model.config
    if args.image:
        pixels = torch.stack([read_image(path, image_size=config.image_size, channels=config.in_channels)
                              for path in args.image])
    else:
        data = load_images(args.data or own_data(args.model), "test",
                           image_size=config.image_size, channels=config.in_channels)
        pixels = data.images[: args.images]
    for path in write_vit_figures(model, normalize(pixels).to(device), out):
        print(path)
    return 0
