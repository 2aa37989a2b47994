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
    from attnlab.cli.options import add_runtime_arguments

    parser.add_argument("--model", required=True, help="a model directory written by attnlab train vit")
    parser.add_argument("--out", required=True, help="directory for the PNG files")
    parser.add_argument("--data", help="image set for the attention figures (default: what the model was trained on)")
    parser.add_argument("--image", action="append", default=[], metavar="FILE",
                        help="use this image file instead (repeatable; the first is drawn)")
    parser.add_argument("--images", type=int, default=128,
                        help="test images averaged for the attention distance (default: 128)")
    add_runtime_arguments(parser)


def run(args) -> int:
    from pathlib import Path

    import torch

    from attnlab.cli.evaluate_vit import _trained_on
    from attnlab.cli.vit import load_classifier, resolve_device
    from attnlab.data.images import load_images, read_image
    from attnlab.tasks.classification import CLASSES_FILE, normalize
    from attnlab.viz.vit import write_vit_figures

    if args.images < 1:
        raise ValueError(f"--images={args.images} must be at least 1")
    device = resolve_device(args.device)
    model, _ = load_classifier(args.model, device)
    config = model.config
    if args.image:
        pixels = torch.stack([read_image(path, image_size=config.image_size, channels=config.in_channels)
                              for path in args.image])
    else:
        data = load_images(args.data or _trained_on(Path(args.model) / CLASSES_FILE), "test",
                           image_size=config.image_size, channels=config.in_channels)
        pixels = data.images[: args.images]
    for path in write_vit_figures(model, normalize(pixels).to(device), args.out):
        print(path)
    return 0
