"""``attnlab classify --model DIR image.png ...``: the top-k classes of each image with probabilities.

Images are converted to the model's channels (grey or RGB) and resized to its image size.
"""

from __future__ import annotations

HELP = "classify image files with a trained Vision Transformer (top-k classes with probabilities)"


def add_arguments(parser) -> None:
    from attnlab.cli.options import add_runtime_arguments

    parser.add_argument("--model", required=True, help="a model directory written by attnlab train vit")
    parser.add_argument("images", nargs="+", help="image files (png, jpg, ...)")
    parser.add_argument("--top-k", type=int, default=3, help="classes shown per image (default: 3)")
    add_runtime_arguments(parser)


def run(args) -> int:
    import torch

    from attnlab.cli.options import apply_threads
    from attnlab.data.images import read_image
    from attnlab.families.vit.task import load_classifier, predict
    from attnlab.families.vit.train import resolve_device

    if args.top_k < 1:
        raise ValueError(f"--top-k={args.top_k} must be at least 1")
    apply_threads(args)
    model, classes = load_classifier(args.model, resolve_device(args.device))
    config = model.config
    if config.in_channels not in (1, 3):
        raise ValueError(f"{args.model}: the model takes {config.in_channels} channels; image files give 1 or 3")
    images = torch.stack([read_image(path, image_size=config.image_size, channels=config.in_channels)
                          for path in args.images])  # every file is read before anything is printed
    probabilities = predict(model, images)
    k = min(args.top_k, len(classes))
    for path, row in zip(args.images, probabilities):
        values, indices = row.topk(k)
        ranked = ", ".join(f"{classes[i]} {100 * float(p):.1f}%" for p, i in zip(values, indices.tolist()))
        print(f"{path}: {ranked}")
    return 0
