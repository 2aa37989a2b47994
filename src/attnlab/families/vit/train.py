"""``attnlab train vit``: a Vision Transformer on an image set with the shared Trainer.

    attnlab train vit --data mnist --out runs/vit-mnist                  # vit_tiny_patch4_28
    attnlab train vit --data fashion-mnist --max-minutes 20 --out runs/vit-fashion
    attnlab train vit --data photos/ --preset vit_tiny_patch4_28 --image-size 32 --channels 3 --out runs/mine

AdamW (decoupled weight decay, none on biases, norms, position embedding and class
token), linear warm-up then cosine decay, label smoothing, random shifts of up to
``--shift`` pixels, checkpoints and exact ``--resume``. At the end the test split is
scored. Writes ``OUT/model`` (config.json, model.safetensors, classes.json),
``OUT/checkpoints``, ``OUT/metrics.jsonl`` (``valid_correct`` is the validation accuracy)
and ``OUT/evaluation`` (accuracy, per-class accuracy, confusion-matrix PNG).

Also here: helpers shared by ``attnlab classify``, ``attnlab evaluate-vit`` and
``attnlab vit-figures``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HELP = "train a Vision Transformer on mnist, fashion-mnist, digits or a folder of class sub-folders"


def resolve_device(name: str):
    """``--device`` as a ``torch.device`` (the shared rule: auto = CUDA when available)."""
    import torch

    from attnlab.cli.options import resolve_device as resolve

    return torch.device(resolve(name))


def add_arguments(parser) -> None:
    data = parser.add_argument_group("data")
    data.add_argument("--data", required=True,
                      help="mnist, fashion-mnist, digits, or DIR with DIR/class_name/*.png (or DIR/train, DIR/test)")
    data.add_argument("--image-size", type=int, help="DIR images are resized to this square (default: the first's)")
    data.add_argument("--channels", type=int, choices=(1, 3), help="DIR images as grey (1) or RGB (3)")
    data.add_argument("--shift", type=int, default=2,
                      help="random shift of up to this many pixels (augmentation; 0 = off; default: 2)")
    data.add_argument("--hflip", action="store_true",
                      help="mirror half the training images left-right (for classes that survive a mirror, "
                           "e.g. Fashion-MNIST's clothes; not for digits)")
    from attnlab.cli.options import add_schedule_arguments, add_set_argument

    model = parser.add_argument_group("model and optimisation")
    model.add_argument("--preset", default="vit_tiny_patch4_28", help="model preset (default: vit_tiny_patch4_28)")
    add_set_argument(model, "drop_path=0.1")
    model.add_argument("--batch-size", type=int, default=128, help="images per update (default: 128)")
    add_schedule_arguments(model, max_steps=4000, lr=1e-3, warmup=200)
    model.add_argument("--weight-decay", type=float, default=0.05, help="AdamW weight decay (default: 0.05)")
    model.add_argument("--label-smoothing", type=float, default=0.1, help="(default: 0.1)")
    from attnlab.cli.options import add_precision_argument, add_run_group

    add_precision_argument(model)
    add_run_group(parser)


def run(args) -> int:
    import torch

    import attnlab
    from attnlab.cli.options import (check_image_folder_memory, check_positive, check_training_memory,
                                     checkpoint_minutes, parse_overrides, resolve_precision, sizing_flags)
    from attnlab.data.images import PIXEL_INPUT, describe, load_images
    from attnlab.families.vit.task import CLASSES_FILE, classification_loss
    from attnlab.training.image_batches import ImageBatches, evaluation_batches
    from attnlab.files import atomic_write_bytes
    from attnlab.training.outputs import check_run_output, save_run_model
    from attnlab.training.phases import budget_plan, budget_report, command_budget, scoring_reserve, train_within
    from attnlab.training.trainer import TrainConfig, Trainer

    budget = command_budget(args.max_minutes)  # the whole command's: training and the test split's scoring
    check_positive(args, ("batch_size", "max_steps", "image_size", "threads"))
    if not 0.0 <= args.label_smoothing < 1.0:
        raise ValueError(f"--label-smoothing={args.label_smoothing} must be in [0, 1)")
    if args.shift < 0:
        raise ValueError(f"--shift={args.shift} must be >= 0")
    if args.preset not in attnlab.list_presets() or attnlab.get_preset(args.preset).family != "vit":
        vits = [name for name in attnlab.list_presets() if attnlab.get_preset(name).family == "vit"]
        raise ValueError(f"--preset {args.preset!r} is not a ViT preset; choose one of {', '.join(vits)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    warmup = min(args.warmup, max(1, args.max_steps // 10)) if args.warmup > args.max_steps else args.warmup
    say = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    plan = budget_plan(budget, scoring="the test split's accuracy")
    if plan:
        say(plan)

    out = Path(args.out)
    classes_file = out / CLASSES_FILE
    has_run = check_run_output(out, resume=args.resume, force=args.force) is not None  # before reading data
    if has_run and not classes_file.is_file():  # resuming: a ViT run wrote its classes first
        raise ValueError(f"--out {out} holds a training run without {CLASSES_FILE}: not a Vision Transformer run; "
                         "choose another directory")

    check_image_folder_memory(args)
    train = load_images(args.data, "train", image_size=args.image_size, channels=args.channels)
    if len(train.classes) < 2:
        raise ValueError(f"--data {args.data}: {len(train.classes)} class ({', '.join(train.classes)}); a classifier "
                         "needs at least 2 (one sub-folder of images per class)")
    kwargs = dict(image_size=train.image_size, channels=train.channels)
    valid, test = (load_images(args.data, split, **kwargs) for split in ("valid", "test"))
    overrides = {"num_classes": len(train.classes), "in_channels": train.channels, **parse_overrides(args.set)}
    preset = attnlab.get_preset(args.preset, **overrides)
    if train.image_size != preset.image_size and "image_size" not in overrides:
        overrides["image_size"] = train.image_size  # the images decide; the patch size must divide them
    check_training_memory(attnlab.get_preset(args.preset, **overrides), batch_size=args.batch_size,
                          flag=sizing_flags(args, "--image-size", "--set", "--batch-size"))
    torch.manual_seed(args.seed)
    model = attnlab.create_model(args.preset, **overrides).to(device)
    for part in (train, valid, test):
        say(describe(part))
    bf16 = resolve_precision(args, str(device))
    say(f"model: {args.preset} {overrides}, {model.num_parameters():,d} parameters, device {device}, "
        + ("bf16 autocast" if bf16 else "float32") + (", compiled" if args.compile else ""))

    out.mkdir(parents=True, exist_ok=True)
    classes_bytes = (json.dumps({"classes": train.classes, "data": str(args.data),
                                 "input": PIXEL_INPUT}, indent=2) + "\n").encode()
    atomic_write_bytes(classes_file, classes_bytes)
    config = TrainConfig(out_dir=str(out), max_steps=args.max_steps, schedule="cosine", peak_lr=args.lr,
                         min_lr=args.lr / 100, warmup_steps=warmup, betas=(0.9, 0.999), eps=1e-8,
                         optimizer="adamw", weight_decay=args.weight_decay, clip_grad_norm=1.0, log_every=50,
                         validate_every=args.val_every or None, checkpoint_every=args.save_every or None,
                         seed=args.seed, progress_bar=not args.no_progress, max_minutes=args.max_minutes,
                         bf16=bf16, compile=args.compile, checkpoint_every_minutes=checkpoint_minutes(args), progress_unit="images")
    smoothing = args.label_smoothing
    trainer = Trainer(model, lambda m, b: classification_loss(m, b, label_smoothing=smoothing),
                      ImageBatches(train, args.batch_size, seed=args.seed, max_shift=args.shift,
                                   hflip=args.hflip), config,
                      valid_batches=evaluation_batches(valid), model_files=[classes_file])
    train_within(trainer, budget, reserve=scoring_reserve(budget), resume=args.resume, say=say)
    if not trainer.context.is_main:  # under torchrun, rank 0 writes the model and scores it
        return 0
    model_dir = save_run_model(model, out / "model", extra_files={CLASSES_FILE: classes_bytes}, replace=args.force)
    evaluation, scored, scoring = score_test_split(model, test, budget, progress=not args.no_progress)
    write_evaluation(evaluation, out / "evaluation", scored, scoring=scoring.record())
    say(f"done: {trainer.summary(('loss', 'valid_loss', 'valid_correct'))}")
    say(f"test ({scoring.summary('images')}): {evaluation.summary()}")
    if budget.limited:
        say(budget_report(budget))
    print(model_dir)
    return 0


EVALUATION_FILES = ("results.json", "confusion_matrix.png")


def score_test_split(model, test, budget, *, progress: bool = True, batch_size: int = 500):
    """The classifier's :class:`~attnlab.families.vit.task.Evaluation` on as much of
    ``test`` as ``budget`` leaves time for (all of it without a budget; see
    :class:`attnlab.training.phases.Scoring`): ``(evaluation, the images scored, the Scoring)``."""
    import torch

    from attnlab.families.vit.task import Evaluation, evaluate_classifier
    from attnlab.training.phases import Scoring, take

    scoring = Scoring("test accuracy", len(test), unit="image", batch_size=batch_size, budget=budget,
                      progress=progress)
    confusion = torch.zeros(len(test.classes), len(test.classes), dtype=torch.long)
    for index in scoring:
        confusion += evaluate_classifier(model, take(test, index), batch_size=batch_size).confusion
    scored = take(test, scoring.indices())
    per_class = (confusion.diagonal().double() / confusion.sum(1).double()).tolist()
    evaluation = Evaluation(float(confusion.trace()) / max(1, len(scored)), per_class, confusion, list(test.classes))
    return evaluation, scored, scoring


def write_evaluation(evaluation, directory: Path, data, *, scoring: dict | None = None) -> None:
    """``results.json`` (accuracy, per-class accuracy, confusion matrix; ``scoring``: how much
    of the split a time budget let it score) and ``confusion_matrix.png``."""
    from attnlab.models.base import _atomic_write
    from attnlab.families.vit.task import save_confusion_matrix

    directory.mkdir(parents=True, exist_ok=True)
    results = {"data": data.name, "split": data.split, "images": len(data), "accuracy": evaluation.accuracy,
               "per_class_accuracy": dict(zip(evaluation.classes, evaluation.per_class)),
               "confusion_matrix": evaluation.confusion.tolist(), "classes": evaluation.classes}
    if scoring is not None:
        results["scoring"] = scoring
    text = (json.dumps(results, indent=2) + "\n").encode()
    _atomic_write(directory / "results.json", lambda path: Path(path).write_bytes(text))
    save_confusion_matrix(evaluation, directory / "confusion_matrix.png",
                          title=f"{data.name} {data.split}: accuracy {100 * evaluation.accuracy:.2f}%")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="attnlab train vit", description=HELP)
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
