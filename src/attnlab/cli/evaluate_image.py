"""``attnlab evaluate-image``: bits per dimension of an Image Transformer on a test split.

    attnlab evaluate-image --model runs/it-mnist/model                 # the data it was trained on
    attnlab evaluate-image --model runs/it-mnist/model --data fashion-mnist --split valid --limit 1000

bits/dim = the mean negative log2-likelihood per sub-pixel (a model that predicts the
uniform distribution over 256 values scores exactly 8).
"""

from __future__ import annotations

HELP = "bits per dimension of an Image Transformer on a data split (default: test of its training data)"


def add_arguments(parser) -> None:
    from attnlab.cli.options import add_device_argument

    parser.add_argument("--model", required=True, help="a model directory written by `attnlab train image`")
    parser.add_argument("--data", help="mnist, fashion-mnist, emoji or DIR (default: what the model was trained on)")
    parser.add_argument("--split", default="test", choices=("train", "valid", "test"))
    parser.add_argument("--limit", type=int, help="score only the first N images")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--json", help="also write the result to this JSON file (must not exist)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_device_argument(parser)


def run(args) -> int:
    import json
    import sys
    from pathlib import Path

    import torch

    from attnlab.cli.image import load_image_model, load_image_set, model_data
    from attnlab.cli.options import resolve_device
    from attnlab.files import atomic_write_json
    from attnlab.tasks.images import evaluate_bits_per_dim

    for name in ("limit", "batch_size"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')}={value} must be at least 1")
    if args.json and Path(args.json).exists():
        raise ValueError(f"--json {args.json} exists; choose a new file name")
    device = torch.device(resolve_device(args.device))
    model, _ = load_image_model(args.model, device)
    source = args.data or model_data(args.model)
    if source is None:
        raise ValueError(f"{args.model}: no image.json says which data it was trained on; pass --data")
    c = model.config
    data = load_image_set(source, args.split, image_size=c.height, channels=c.channels)
    if tuple(data.images.shape[1:]) != (c.channels, c.height, c.width):
        raise ValueError(f"--data {source}: images are {tuple(data.images.shape[1:])} (C, H, W), the model takes "
                         f"{(c.channels, c.height, c.width)}")
    if c.num_classes and len(data.classes) != c.num_classes:
        raise ValueError(f"--data {source}: {len(data.classes)} classes, the model was trained with {c.num_classes}")
    count = len(data) if args.limit is None else min(args.limit, len(data))
    bar = None
    if not args.no_progress:
        from tqdm import tqdm

        bar = tqdm(total=count, desc="scoring", unit="image", file=sys.stderr, leave=False)
    result = evaluate_bits_per_dim(model, data, batch_size=args.batch_size, limit=args.limit,
                                   progress=None if bar is None else bar.update)
    if bar is not None:
        bar.close()
    result.update({"data": str(source), "split": args.split, "model": str(args.model)})
    print(f"{source} {args.split}: {result['bits_per_dim']:.4f} bits/dim ({result['nats_per_dim']:.4f} nats) "
          f"over {result['images']} images")
    if args.json:
        atomic_write_json(args.json, result)
    else:
        print(json.dumps(result))
    return 0
