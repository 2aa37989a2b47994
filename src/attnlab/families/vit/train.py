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

from attnlab.cli.training_run import TrainingTask, add_training_arguments, run_training

CLASSES_FILE = "classes.json"  # attnlab.families.vit.task.CLASSES_FILE (not imported here: it imports torch)

HELP = "train a Vision Transformer on mnist, fashion-mnist, digits or a folder of class sub-folders"


def resolve_device(name: str):
    """``--device`` as a ``torch.device`` (the shared rule: auto = CUDA when available)."""
    import torch

    from attnlab.cli.options import resolve_device as resolve

    return torch.device(resolve(name))


class VitTask(TrainingTask):
    """``attnlab train vit`` on the lifecycle (:mod:`attnlab.cli.training_run`)."""

    name = family = "vit"
    scoring = "the test split's accuracy"
    summary_keys = ("loss", "valid_loss", "valid_correct")
    held_out = ("valid_correct", "validation accuracy")
    adaptable = {"image_size": "position embeddings resized in 2D over the new patch grid",
                 "num_classes": "a new head"}

    def add_arguments(self, parser) -> None:
        from attnlab.cli.options import (add_precision_argument, add_run_group, add_schedule_arguments,
                                         add_set_argument)

        data = parser.add_argument_group("data")
        data.add_argument("--data", required=True,
                          help="mnist, fashion-mnist, digits, or DIR with DIR/class_name/*.png (or DIR/train, DIR/test)")
        data.add_argument("--image-size", type=int,
                          help="images are resized to this square (default: a DIR's first image's size, a named "
                               "set's own; with --init, the model's position embeddings are resized to it)")
        data.add_argument("--channels", type=int, choices=(1, 3), help="DIR images as grey (1) or RGB (3)")
        data.add_argument("--shift", type=int, default=2,
                          help="random shift of up to this many pixels (augmentation; 0 = off; default: 2)")
        data.add_argument("--hflip", action="store_true",
                          help="mirror half the training images left-right (for classes that survive a mirror, "
                               "e.g. Fashion-MNIST's clothes; not for digits)")
        model = parser.add_argument_group("model and optimisation")
        model.add_argument("--preset", default="vit_tiny_patch4_28", help="model preset (default: vit_tiny_patch4_28)")
        add_set_argument(model, "drop_path=0.1")
        model.add_argument("--batch-size", type=int, default=128, help="images per update (default: 128)")
        add_schedule_arguments(model, max_steps=4000, lr=1e-3, warmup=200)
        model.add_argument("--weight-decay", type=float, default=0.05, help="AdamW weight decay (default: 0.05)")
        model.add_argument("--label-smoothing", type=float, default=0.1, help="(default: 0.1)")
        add_precision_argument(model)
        add_run_group(parser)

    def check(self, args) -> None:
        import attnlab
        from attnlab.cli.options import check_positive

        check_positive(args, ("batch_size", "max_steps", "image_size", "threads"))
        if not 0.0 <= args.label_smoothing < 1.0:
            raise ValueError(f"--label-smoothing={args.label_smoothing} must be in [0, 1)")
        if args.shift < 0:
            raise ValueError(f"--shift={args.shift} must be >= 0")
        if args.preset not in attnlab.list_presets() or attnlab.get_preset(args.preset).family != "vit":
            vits = [name for name in attnlab.list_presets() if attnlab.get_preset(name).family == "vit"]
            raise ValueError(f"--preset {args.preset!r} is not a ViT preset; choose one of {', '.join(vits)}")

    def vocabulary(self, pipeline):
        return list(pipeline.classes)

    def data(self, run):
        from attnlab.cli.options import check_image_folder_memory, resampled_splits
        from attnlab.data.images import PIXEL_INPUT, load_images, recorded_source

        args = run.args
        if run.previous is not None and not (run.out / CLASSES_FILE).is_file():
            raise ValueError(f"--out {run.out} holds a training run without {CLASSES_FILE}: not a Vision Transformer "
                             "run; choose another directory")
        check_image_folder_memory(args)
        size = args.image_size
        if size is None and run.start is not None:
            size = run.start.model.config.image_size  # the model's resolution unless --image-size says another
        train = load_images(args.data, "train", image_size=size, channels=args.channels)
        if len(train.classes) < 2:
            raise ValueError(f"--data {args.data}: {len(train.classes)} class ({', '.join(train.classes)}); a "
                             "classifier needs at least 2 (one sub-folder of images per class)")
        kwargs = dict(image_size=train.image_size, channels=train.channels)
        valid, test = (load_images(args.data, split, **kwargs) for split in ("valid", "test"))
        train, valid, test = resampled_splits((train, valid, test), size, args.data)
        run.files[CLASSES_FILE] = (json.dumps({"classes": train.classes, "data": recorded_source(args.data),
                                               "input": PIXEL_INPUT}, indent=2) + "\n").encode()
        return train, valid, test

    def run_info(self, run, data):
        from attnlab.cli.options import image_run_info

        return image_run_info(run.args, data[0], data[1])

    def config(self, run, data):
        train = data[0]
        return run.args.preset, {"num_classes": len(train.classes), "in_channels": train.channels,
                                 "image_size": train.image_size}

    def new_parameters(self, run, data, old_config, new_config):
        # Other class names (even as many) mean another head: not the start's classes.
        return ("head.",) if list(run.vocabulary or []) != list(data[0].classes) else ()

    def check_config(self, run, config, data):
        from attnlab.cli.options import check_training_memory, sizing_flags

        check_training_memory(config, batch_size=run.args.batch_size,
                              flag=sizing_flags(run.args, "--image-size", "--set", "--batch-size"))

    def describe(self, run, model, data):
        from attnlab.data.images import describe

        for part in data:
            print(describe(part), file=sys.stderr, flush=True)
        print(f"model: {run.args.preset if run.start is None else run.args.init}, image {model.config.image_size}, "
              f"patch {model.config.patch_size}, {model.config.num_classes} classes, {model.num_parameters():,d} "
              f"parameters, device {run.device}, " + ("bf16 autocast" if run.bf16 else "float32")
              + (", compiled" if run.args.compile else ""), file=sys.stderr, flush=True)

    def trainer(self, run, model, data, run_info):
        from attnlab.cli.options import checkpoint_minutes
        from attnlab.families.vit.task import classification_loss
        from attnlab.training.image_batches import ImageBatches, evaluation_batches
        from attnlab.training.trainer import TrainConfig, Trainer

        args = run.args
        train, valid, _ = data
        warmup = min(args.warmup, max(1, args.max_steps // 10)) if args.warmup > args.max_steps else args.warmup
        config = TrainConfig(out_dir=str(run.out), max_steps=args.max_steps, schedule="cosine", peak_lr=args.lr,
                             min_lr=args.lr / 100, warmup_steps=warmup, betas=(0.9, 0.999), eps=1e-8,
                             optimizer="adamw", weight_decay=args.weight_decay, clip_grad_norm=1.0, log_every=50,
                             validate_every=args.val_every or None, checkpoint_every=args.save_every or None,
                             seed=args.seed, progress_bar=not args.no_progress, max_minutes=args.max_minutes,
                             bf16=run.bf16, compile=args.compile, checkpoint_every_minutes=checkpoint_minutes(args),
                             progress_unit="images")
        smoothing = args.label_smoothing
        return Trainer(model, lambda m, b: classification_loss(m, b, label_smoothing=smoothing),
                       ImageBatches(train, args.batch_size, seed=args.seed, max_shift=args.shift, hflip=args.hflip),
                       config, valid_batches=evaluation_batches(valid), model_files=run.model_files(),
                       run_info=run_info)

    def finish(self, run, model, data, budget):
        test = data[2]
        evaluation, scored, scoring = score_test_split(model, test, budget, progress=not run.args.no_progress)
        write_evaluation(evaluation, run.out / "evaluation", scored, scoring=scoring.record())
        print(f"test ({scoring.summary('images')}): {evaluation.summary()}", file=sys.stderr, flush=True)


TASK = VitTask()


def add_arguments(parser) -> None:
    add_training_arguments(parser, TASK)


def run(args) -> int:
    return run_training(TASK, args)


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
