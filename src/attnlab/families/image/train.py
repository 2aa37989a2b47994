"""``attnlab train image``: an Image Transformer on an image set with the shared Trainer.

    attnlab train image --data mnist --out runs/it-mnist --max-minutes 25     # imagetransformer_mnist_small
    attnlab train image --data mnist --preset imagetransformer_mnist_2d_small --out runs/it-mnist-2d
    attnlab train image --data emoji --classes --out runs/it-emoji            # class-conditional, 32×32 RGB
    attnlab train image --data fashion-mnist --preset imagetransformer_sr_mnist_small --out runs/sr
    attnlab train image --data photos/ --image-size 32 --channels 3 --out runs/mine

Adam with linear warm-up then cosine decay, checkpoints and exact ``--resume``; the
trainer's ``loss`` is nats per sub-pixel (bits/dim = loss / ln 2). At the end the test
split is scored in bits/dim. Writes ``OUT/model`` (config.json, model.safetensors,
image.json: the data and class names), ``OUT/checkpoints``, ``OUT/metrics.jsonl`` and
``OUT/evaluation/results.json``.

Also here: helpers shared by ``sample-images``, ``complete-image``, ``super-resolve`` and
``evaluate-image``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import time

from attnlab.cli.options import add_runtime_arguments
from attnlab.cli.training_run import TrainingTask, add_training_arguments, run_training

HELP = "train an Image Transformer (local 1D/2D attention) on mnist, fashion-mnist, emoji or a folder of images"
IMAGE_FILE = "image.json"
DEFAULT_PRESETS = {"mnist": "imagetransformer_mnist_small", "fashion-mnist": "imagetransformer_mnist_small",
                   "emoji": "imagetransformer_colour_small"}


def load_image_set(source: str, split: str, *, image_size=None, channels=None, data_dir=None):
    """A named image set (mnist, fashion-mnist, emoji, digits) or a folder; ``data_dir``
    (``--data-dir``): where named data sets live (emoji: DATA_DIR/emoji-datasource-twitter)."""
    from attnlab.data import emoji
    from attnlab.data.images import load_images
    from attnlab.data.registry import data_dir_override

    with data_dir_override(data_dir):
        return load_images(source, split, image_size=image_size, channels=channels,
                           named={"emoji": emoji.load_emoji_set})


class ImageTask(TrainingTask):
    """``attnlab train image`` on the lifecycle (:mod:`attnlab.cli.training_run`)."""

    name = family = "image"
    scoring = "the test split's bits/dim"
    summary_keys = ("loss", "valid_loss")
    unit = "nats per dimension"
    held_out = ("valid_loss", "nats per dimension")

    def add_arguments(self, parser) -> None:
        from attnlab.cli.options import (DATA_DIR_HELP, add_data_dir_argument, add_run_group, add_schedule_arguments,
                                         add_set_argument)

        data = parser.add_argument_group("data")
        data.add_argument("--data", required=True,
                          help="mnist, fashion-mnist, emoji, or DIR with DIR/class_name/*.png (or DIR/train, DIR/test)")
        add_data_dir_argument(data, help=DATA_DIR_HELP + "; emoji is read from DATA_DIR/emoji-datasource-twitter/")
        data.add_argument("--image-size", type=int, help="DIR images are resized to this square (default: the first's)")
        data.add_argument("--channels", type=int, choices=(1, 3), help="DIR images as grey (1) or RGB (3)")
        data.add_argument("--classes", action="store_true",
                          help="class-conditional: a class embedding at every position")
        model = parser.add_argument_group("model and optimisation")
        model.add_argument("--preset", help="model preset (default: imagetransformer_mnist_small for 28×28 grey, "
                                            "imagetransformer_colour_small for colour)")
        add_set_argument(model, "num_layers=6")
        model.add_argument("--attention", metavar="SPEC",
                           help='the decoder\'s pattern: a name ("causal" = full attention) or a JSON object, e.g. '
                                '\'{"name": "local_2d", "query_shape": [4, 7], "memory_flange": [4, 7]}\'')
        model.add_argument("--batch-size", type=int, default=16, help="images per update (default: 16)")
        add_schedule_arguments(model, max_steps=20000, lr=1e-3, warmup=200)
        run_group = add_run_group(parser)
        run_group.add_argument("--val-images", type=int, default=256,
                               help="validation images scored each time (default: 256)")
        run_group.add_argument("--test-images", type=int, help="score only the first N test images (default: all)")

    def check(self, args) -> None:
        from attnlab.cli.options import check_positive

        check_positive(args, ("batch_size", "max_steps", "image_size", "threads", "val_images", "test_images"))
        if args.init and args.attention:
            raise ValueError("--attention: with --init the attention pattern comes from DIR; leave it out")

    def vocabulary(self, pipeline):
        return list(pipeline.classes)

    def data(self, run):
        from attnlab.cli.options import check_image_folder_memory, resampled_splits
        from attnlab.data.images import recorded_source

        args = run.args
        check_image_folder_memory(args)
        size = args.image_size
        if run.start is not None and size is None:
            size = run.start.model.config.height  # the model's resolution
        train = load_image_set(args.data, "train", image_size=size, channels=args.channels, data_dir=args.data_dir)
        kwargs = dict(image_size=train.image_size, channels=train.channels, data_dir=args.data_dir)
        valid, test = (load_image_set(args.data, split, **kwargs) for split in ("valid", "test"))
        train, valid, test = resampled_splits((train, valid, test), size, args.data)
        run.files[IMAGE_FILE] = (json.dumps({"data": recorded_source(args.data), "classes": train.classes,
                                             "class_conditional": args.classes}, indent=2) + "\n").encode()
        return train, valid, test

    def run_info(self, run, data):
        from attnlab.cli.options import image_run_info

        return image_run_info(run.args, data[0], data[1])

    def config(self, run, data):
        import attnlab
        from attnlab.models.image_transformer import ImageTransformerConfig

        args, train = run.args, data[0]
        preset = args.preset or DEFAULT_PRESETS.get(args.data) or (
            "imagetransformer_mnist_small" if train.channels == 1 else "imagetransformer_colour_small")
        if preset not in attnlab.list_presets() or not isinstance(attnlab.get_preset(preset), ImageTransformerConfig):
            names = [n for n in attnlab.list_presets() if isinstance(attnlab.get_preset(n), ImageTransformerConfig)]
            raise ValueError(f"--preset {preset!r} is not an Image Transformer preset; choose one of {', '.join(names)}")
        _, channels, height, width = train.images.shape
        overrides = {"height": height, "width": width, "channels": channels,
                     "num_classes": len(train.classes) if args.classes else 0}
        if args.attention:
            overrides["attention"] = parse_attention(args.attention)
        self._preset = preset
        return preset, overrides

    def check_config(self, run, config, data):
        from attnlab.cli.options import check_training_memory, sizing_flags

        check_training_memory(config, batch_size=run.args.batch_size,
                              flag=sizing_flags(run.args, "--image-size", "--attention", "--set", "--batch-size"))

    def describe(self, run, model, data):
        from attnlab.data.images import describe

        for part in data:
            print(describe(part), file=sys.stderr, flush=True)
        print(f"model: {run.args.init or self._preset}, {model.num_parameters():,d} parameters, "
              f"{model.config.sequence_length} sub-pixels per image, device {run.device}", file=sys.stderr, flush=True)

    def trainer(self, run, model, data, run_info):
        from attnlab.cli.options import checkpoint_minutes
        from attnlab.families.image.task import image_loss
        from attnlab.training.image_batches import ImageBatches
        from attnlab.training.trainer import TrainConfig, Trainer

        args = run.args
        train, valid, _ = data
        warmup = min(args.warmup, max(1, args.max_steps // 10))
        config = TrainConfig(out_dir=str(run.out), max_steps=args.max_steps, schedule="cosine", peak_lr=args.lr,
                             min_lr=args.lr / 100, warmup_steps=warmup, betas=(0.9, 0.98), eps=1e-9,
                             optimizer="adam", clip_grad_norm=1.0, log_every=50,
                             validate_every=args.val_every or None, checkpoint_every=args.save_every or None,
                             seed=args.seed, progress_bar=not args.no_progress, max_minutes=args.max_minutes,
                             checkpoint_every_minutes=checkpoint_minutes(args), progress_unit="sub-pixels")
        valid_batches = list(ImageBatches(valid, args.batch_size, shuffle=False, drop_last=False, raw=True))
        valid_batches = _first_images(valid_batches, args.val_images)
        self._started = time.perf_counter()
        return Trainer(model, image_loss, ImageBatches(train, args.batch_size, seed=args.seed, raw=True), config,
                       valid_batches=valid_batches, model_files=run.model_files(), run_info=run_info)

    def save(self, run, model, trainer):
        self._minutes, self._updates = (time.perf_counter() - self._started) / 60, trainer.step
        return super().save(run, model, trainer)

    def finish(self, run, model, data, budget):
        from attnlab.families.image.task import evaluate_bits_per_dim
        from attnlab.files import atomic_write_json
        from attnlab.training.phases import Scoring

        args, test = run.args, data[2]
        scoring = Scoring("test bits/dim", len(test) if args.test_images is None else min(args.test_images, len(test)),
                          unit="image", batch_size=max(args.batch_size, 32), budget=budget,
                          progress=not args.no_progress)
        results = evaluate_bits_per_dim(model, test, batches=scoring)
        results.update({"data": str(args.data), "split": "test", "updates": self._updates,
                        "train_minutes": round(self._minutes, 2), "scoring": scoring.record()})
        (run.out / "evaluation").mkdir(exist_ok=True)
        atomic_write_json(run.out / "evaluation" / "results.json", results)
        print(f"test: {results['bits_per_dim']:.4f} bits/dim over {scoring.summary('images')}", file=sys.stderr,
              flush=True)


TASK = ImageTask()


def add_arguments(parser) -> None:
    add_training_arguments(parser, TASK)


def run(args) -> int:
    return run_training(TASK, args)


def parse_attention(text: str):
    """``--attention``: a pattern name, or a JSON object with a "name"."""
    if not text.lstrip().startswith("{"):
        return text
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"--attention {text!r}: not a JSON object ({error})") from None
    if not isinstance(spec, dict):
        raise ValueError(f"--attention {text!r}: give a name or a JSON object with a \"name\"")
    return spec


def _first_images(batches, limit: int):
    kept, count = [], 0
    for batch in batches:
        if count >= limit:
            break
        take = min(limit - count, batch["images"].shape[0])
        kept.append({key: value[:take] for key, value in batch.items()})
        count += take
    return kept


# -- helpers for the image verbs ---------------------------------------------------------------
def load_image_model(directory: str, device):
    """A saved Image Transformer and its class names; ValueError for anything else."""
    import attnlab
    from attnlab.models.image_transformer import ImageTransformer

    model = attnlab.load_model(directory, device=str(device))
    if not isinstance(model, ImageTransformer):
        raise ValueError(f"{directory}: holds a {model.config.family} model, not an Image Transformer")
    classes = [str(i) for i in range(model.config.num_classes)]
    path = Path(directory) / IMAGE_FILE
    if path.is_file():  # missing: a model saved without it; classes go by their numbers
        info = read_image_info(path)
        names = info.get("classes")
        if model.config.num_classes and names is not None:
            if len(names) != model.config.num_classes:
                raise ValueError(f"{path}: names {len(names)} classes, but the model was trained with "
                                 f"{model.config.num_classes}; the file does not belong to this model")
            classes = names
    return model, classes


def read_image_info(path: Path) -> dict:
    """``image.json`` checked (size-capped, depth-safe: :func:`attnlab.tasks.read_task_file`):
    an object whose "data" is a string, "classes" a list of strings and "class_conditional"
    true or false (each optional); ValueError naming the file and the field otherwise."""
    from attnlab.tasks import is_text, read_task_file

    names = (lambda value: isinstance(value, list) and all(isinstance(name, str) for name in value), "a list of names")
    return read_task_file(path, {"data": (is_text, "a string"), "classes": names,
                                 "class_conditional": (lambda value: isinstance(value, bool), "true or false")})


def model_data(directory: str) -> str | None:
    """The ``--data`` a model was trained on (image.json), None when unknown."""
    path = Path(directory) / IMAGE_FILE
    return read_image_info(path).get("data") if path.is_file() else None


def parse_class(value: str | None, classes: list[str]) -> int | None:
    """``--class`` as an index: a number or a class name."""
    if value is None:
        return None
    if not classes:
        raise ValueError("--class: this model is not class-conditional")
    if value in classes:
        return classes.index(value)
    if value.isdigit() and int(value) < len(classes):
        return int(value)
    raise ValueError(f"--class {value!r}: not one of the model's {len(classes)} classes ({', '.join(classes[:12])}"
                     f"{', ...' if len(classes) > 12 else ''}) nor an index below {len(classes)}")


def add_output_arguments(parser) -> None:
    parser.add_argument("--out", required=True, help="the PNG to write")
    parser.add_argument("--force", action="store_true", help="replace --out if it exists")
    parser.add_argument("--scale", type=int, default=2, help="enlarge pixels by this factor in the PNG (default: 2)")


def check_output(args) -> Path:
    """``--out`` checked before any work (see :func:`check_png`)."""
    return check_png(args.out, force=args.force, scale=args.scale)


def check_png(path, *, force: bool, scale: int, name: str = "--out") -> Path:
    """The PNG path of option ``name`` checked before any work (the shared output rule,
    :func:`attnlab.files.check_output_file`: a .png name, an existing file or link only with
    ``force``, in a directory that exists); ``scale`` in 1..16."""
    from attnlab.files import check_output_file

    out = check_output_file(path, force=force, flag=name, suffixes=(".png",))
    if not 1 <= scale <= 16:
        raise ValueError(f"--scale={scale} must be in 1..16")
    return out


def write_png(out: Path, image) -> None:
    from attnlab.data.images import to_bytes_png
    from attnlab.files import atomic_write_bytes

    atomic_write_bytes(out, to_bytes_png(image))


def read_png(path: str, model, *, size: tuple[int, int] | None = None):
    """``path`` as a ``(1, C, H, W)`` batch of the model's channels and size (or ``size``)."""
    from attnlab.data.images import read_image

    c = model.config
    image = read_image(path, channels=c.channels)
    expected = size or (c.height, c.width)
    if tuple(image.shape[1:]) != tuple(expected):
        raise ValueError(f"{path}: the image is {image.shape[2]}×{image.shape[1]} pixels, but the model takes "
                         f"{expected[1]}×{expected[0]}")
    return image[None]


def progress_bar(total: int, enabled: bool, description: str):
    """A tqdm bar over sub-pixels (a no-op callable when disabled)."""
    if not enabled:
        return None, lambda done: None
    from tqdm import tqdm

    bar = tqdm(total=total, desc=description, unit="sub-pixel", file=sys.stderr, leave=False)
    state = {"last": 0}

    def update(done: int) -> None:
        bar.update(done - state["last"])
        state["last"] = done

    return bar, update


def prepare_sampling(args):
    """What sample-images and complete-image do first: check ``--out``, load the (not
    super-resolution) model; returns ``(out, device, sampling options, model, classes)``."""
    import torch

    from attnlab.cli.options import resolve_device

    out = check_output(args)
    device = torch.device(resolve_device(args.device))
    options = sampling_options(args, device)
    model, classes = load_image_model(args.model, device)
    if model.config.low_resolution:
        raise ValueError(f"{args.model} is a super-resolution model: use `attnlab super-resolve`")
    return out, device, options, model, classes


def add_sampling_arguments(parser) -> None:
    parser.add_argument("--temperature", type=float, default=1.0, help="softmax temperature (0 = greedy; default: 1)")
    from attnlab.cli.options import SEED, bounded_int

    parser.add_argument("--top-k", type=bounded_int(1, 256), metavar="K",
                        help="sample among the K most probable intensities, 1 to 256")
    parser.add_argument("--seed", type=SEED, default=0, help="seed of the sampling (default: 0)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_runtime_arguments(parser)
    from attnlab.cli.options import add_decode_compile_argument

    add_decode_compile_argument(parser)


def sampling_options(args, device) -> dict:
    """The sampling verbs' options checked (and ``--threads`` applied)."""
    import torch

    from attnlab.cli.options import apply_threads

    apply_threads(args)
    if args.temperature < 0:
        raise ValueError(f"--temperature={args.temperature} must be >= 0")
    if args.top_k is not None and not 1 <= args.top_k <= 256:
        raise ValueError(f"--top-k={args.top_k} must be in 1..256")
    from attnlab.cli.options import decode_compile

    return {"temperature": args.temperature, "top_k": args.top_k, "generator": torch.Generator(device=device).manual_seed(args.seed),
            "compile": decode_compile(args)}


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="attnlab train image", description=HELP)
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
