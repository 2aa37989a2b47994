"""``attnlab evaluate-vit --model DIR --data mnist``: accuracy, per-class accuracy and a
confusion-matrix PNG of a trained Vision Transformer on a split of an image set."""

from __future__ import annotations

HELP = "score a Vision Transformer on an image set: accuracy, per-class accuracy, confusion-matrix PNG"


def add_arguments(parser) -> None:
    from attnlab.cli.options import add_force_argument, add_limit_argument, add_runtime_arguments

    parser.add_argument("--model", required=True, help="a model directory written by attnlab train vit")
    parser.add_argument("--data", help="mnist, fashion-mnist, digits or DIR (default: what the model was trained on)")
    parser.add_argument("--split", default="test", choices=("train", "valid", "test"), help="(default: test)")
    parser.add_argument("--out", help="write results.json and confusion_matrix.png here (made if missing; other "
                                      "files in it are left alone)")
    add_force_argument(parser, "results.json and confusion_matrix.png in --out")
    add_limit_argument(parser, "images of the split")
    add_runtime_arguments(parser)


def run(args) -> int:
    from pathlib import Path

    from attnlab.cli.options import apply_threads, own_data_line
    from attnlab.data.images import load_images, same_source
    from attnlab.families.vit.task import CLASSES_FILE, evaluate_classifier, load_classifier
    from attnlab.families.vit.train import EVALUATION_FILES, resolve_device, write_evaluation
    from attnlab.files import check_output_directory, check_output_file

    if args.out:  # before any work: the two files are replaced only with --force
        out = check_output_directory(args.out, force=True, flag="--out")
        for name in EVALUATION_FILES if out.is_dir() else ():
            check_output_file(out / name, force=args.force, flag="--out")
    apply_threads(args)
    model, classes = load_classifier(args.model, resolve_device(args.device))
    trained_on = _recorded(Path(args.model) / CLASSES_FILE)
    own = args.data is None  # the model's own held-out data, as classes.json records it
    if own:
        own_data(args.model)  # refuses when classes.json does not say, or its folder is gone
    data_name = args.data or trained_on
    # The model's own data is converted as training converted it; other images are scored
    # only at the size and channels they have (as evaluate-image): no silent resize.
    c = model.config
    same = same_source(data_name, trained_on)
    # A folder the model was not trained on is scored whole (or its test/ part); its own
    # folder, on the part training held out.
    try:
        data = load_images(data_name, args.split, image_size=c.image_size if same else None,
                           channels=c.in_channels if same else None, whole=not same, classes=classes)
    except ValueError as error:  # name the flag the folder came from
        raise ValueError(str(error) if str(error).startswith("--data") else f"--data {error}") from None
    if tuple(data.images.shape[1:]) != (c.in_channels, c.image_size, c.image_size):
        _, channels, height, width = data.images.shape
        raise ValueError(f"--data {data_name}: its images are {width}×{height} with {channels} channel(s), but the "
                         f"model takes {c.image_size}×{c.image_size} with {c.in_channels}; give images of the model's "
                         "size and channels")
    if data.classes != classes:
        raise ValueError(f"{data_name}: its classes {data.classes[:10]} are not the model's {classes[:10]}")
    if own:
        print(own_data_line(args.model, data.origin or f"{data_name} {args.split}", len(data), "images"))
    if args.limit is not None and args.limit < len(data):
        import torch

        from attnlab.training.phases import take

        print(f"scoring the first {args.limit:,d} of the {len(data):,d} images of {data_name} {args.split} (--limit)"
              + (f": {data.origin}" if data.origin else ""))
        data = take(data, torch.arange(args.limit))
    elif data.origin and not own:
        print(f"scoring {data.origin}")
    evaluation = evaluate_classifier(model, data)
    print(evaluation.summary())
    if args.out:
        write_evaluation(evaluation, Path(args.out), data)
        print(f"wrote {Path(args.out) / 'results.json'} and {Path(args.out) / 'confusion_matrix.png'}")
    return 0


def _recorded(path) -> str | None:
    """The "data" ``classes.json`` records (None when it has none: a model from before it was kept)."""
    if not path.is_file():
        return None
    from attnlab.files import read_json_object

    data = read_json_object(path, max_bytes=1 << 20, what="a Vision Transformer's classes").get("data")
    return data if isinstance(data, str) else None


def own_data(model) -> str:
    """The data ``model/classes.json`` records, checked (ValueError naming the file and
    ``--data`` when it does not say, or names a folder that is gone)."""
    from pathlib import Path

    from attnlab.cli.options import check_recorded_data
    from attnlab.data.images import IMAGE_SETS
    from attnlab.families.vit.task import CLASSES_FILE

    return check_recorded_data(model, CLASSES_FILE, _recorded(Path(model) / CLASSES_FILE), "--data",
                               named=IMAGE_SETS)
