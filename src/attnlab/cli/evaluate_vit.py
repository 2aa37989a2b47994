"""``attnlab evaluate-vit --model DIR --data mnist``: accuracy, per-class accuracy and a
confusion-matrix PNG of a trained Vision Transformer on a split of an image set."""

from __future__ import annotations

HELP = "score a Vision Transformer on an image set: accuracy, per-class accuracy, confusion-matrix PNG"


def add_arguments(parser) -> None:
    from attnlab.cli.options import add_runtime_arguments

    parser.add_argument("--model", required=True, help="a model directory written by attnlab train vit")
    parser.add_argument("--data", help="mnist, fashion-mnist, digits or DIR (default: what the model was trained on)")
    parser.add_argument("--split", default="test", choices=("train", "valid", "test"), help="(default: test)")
    parser.add_argument("--out", help="write results.json and confusion_matrix.png here")
    add_runtime_arguments(parser)


def run(args) -> int:
    import json
    from pathlib import Path

    from attnlab.cli.vit import load_classifier, resolve_device, write_evaluation
    from attnlab.data.images import load_images
    from attnlab.tasks.classification import CLASSES_FILE, evaluate_classifier

    model, classes = load_classifier(args.model, resolve_device(args.device))
    data_name = args.data or _trained_on(Path(args.model) / CLASSES_FILE)
    data = load_images(data_name, args.split, image_size=model.config.image_size, channels=model.config.in_channels)
    if data.classes != classes:
        raise ValueError(f"{data_name}: its classes {data.classes[:10]} are not the model's {classes[:10]}")
    evaluation = evaluate_classifier(model, data)
    print(evaluation.summary())
    if args.out:
        write_evaluation(evaluation, Path(args.out), data)
        print(f"wrote {Path(args.out) / 'results.json'} and {Path(args.out) / 'confusion_matrix.png'}")
    return 0


def _trained_on(path) -> str:
    import json

    try:
        return str(json.loads(path.read_text(encoding="utf-8"))["data"])
    except (OSError, ValueError, KeyError, TypeError):
        raise ValueError(f"{path}: does not say which data the model was trained on; pass --data") from None
