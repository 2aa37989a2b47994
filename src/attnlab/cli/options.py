"""Small argument helpers shared by the CLI verbs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = [
    "OPTIONAL_PACKAGES",
    "add_force_argument",
    "add_lora_arguments",
    "add_runtime_arguments",
    "add_threads_argument",
    "apply_threads",
    "bounded_float",
    "bounded_int",
    "check_recorded_data",
    "lora_config_from_args",
    "own_data_line",
    "parse_overrides",
    "require_packages",
]

MAX_THREADS = 1024


def bounded_int(low: int, high: int | None = None):
    """argparse ``type=`` for a whole number in ``low..high`` (``high`` None: no upper
    bound). argparse names the flag in its message: ``argument --threads: 0 is not ...``."""
    import argparse

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low or (high is not None and value > high):
            span = f"between {low:,} and {high:,}" if high is not None else f"at least {low:,}"
            raise argparse.ArgumentTypeError(f"{value} must be {span}")
        return value

    convert.__name__ = "whole number"
    return convert


def bounded_float(low: float, high: float | None = None, *, include_low: bool = False):
    """argparse ``type=`` for a finite number in ``(low, high]`` (``[low, high]`` with
    ``include_low``; ``high`` None: no upper bound); argparse names the flag in its message."""
    import argparse
    import math

    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value):  # as main's float type says it
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if (high is not None and value > high) or value < low or (value == low and not include_low):
            bound = f"{'at least' if include_low else 'above'} {low:g}"
            if high is None:
                raise argparse.ArgumentTypeError(f"{text} must be a number {bound}")
            raise argparse.ArgumentTypeError(f"{text} must be {bound} and at most {high:g}")
        return value

    convert.__name__ = "number"
    return convert


from attnlab.limits import MAX_BEAM, MAX_SEED, MAX_TEMPERATURE  # noqa: E402  (the bounds pipelines check too)

SEED = bounded_int(0, MAX_SEED)  # torch.manual_seed takes a 64-bit integer
TEMPERATURE = bounded_float(0.0, MAX_TEMPERATURE)  # sampling temperature: above 0; past 100 every draw is uniform
BEAM = bounded_int(1, MAX_BEAM)  # beam size: 1 (greedy) to MAX_BEAM


def add_threads_argument(parser) -> None:
    """``--threads N`` (1..1024): torch's CPU threads for this command (default: torch's
    choice, one per core). Apply it with :func:`apply_threads`."""
    parser.add_argument("--threads", type=bounded_int(1, MAX_THREADS), metavar="N",
                        help="torch CPU threads (default: torch's choice, one per core)")


def add_set_argument(group, example: str) -> None:
    """``--set FIELD=VALUE`` (repeatable; dest ``set``, read by :func:`parse_overrides`): a
    preset field overridden, in every training verb; ``example`` shows one of its fields."""
    group.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                       help=f"override a preset field, e.g. --set {example} (repeatable)")


def add_schedule_arguments(group, *, max_steps: int, warmup: int, lr: float | None = None,
                           steps: str = "optimizer updates", lr_help: str = "peak learning rate") -> None:
    """``--max-steps N``, ``--lr LR`` (unless ``lr`` is None) and ``--warmup N``: the
    schedule options of every training verb, each verb giving its defaults."""
    group.add_argument("--max-steps", type=int, default=max_steps, help=f"{steps} (default: {max_steps})")
    if lr is not None:
        group.add_argument("--lr", type=float, default=lr, help=f"{lr_help} (default: {lr:g})")
    group.add_argument("--warmup", type=int, default=warmup, help=f"warm-up updates (default: {warmup})")


LORA_FLAGS = ("--lora-alpha", "--lora-targets", "--lora-dropout", "--lora-keep")


def add_lora_arguments(group) -> None:
    """The LoRA options of a fine-tuning run (attnlab.training.lora): ``--lora R``,
    ``--lora-alpha A`` (default 2R), ``--lora-targets attention|attention,ffn``,
    ``--lora-dropout P``, ``--lora-keep``. Read them with :func:`lora_config_from_args`."""
    group.add_argument("--lora", type=bounded_int(1), metavar="R",
                       help="fine-tune low-rank adapters of rank R (LoRA, Hu et al. 2021) instead of every weight: "
                            "the rest is frozen but a new head; the adapters are merged into the saved model")
    group.add_argument("--lora-alpha", type=bounded_float(0.0), metavar="A",
                       help="LoRA scale alpha (the update is alpha/R times B·A; default: 2R, a common choice)")
    group.add_argument("--lora-targets", metavar="attention|attention,ffn",
                       help="which linear layers get adapters: attention (the qkv and output projections of "
                            "every attention, the default) and/or ffn (the feed-forward linears), comma-separated")
    group.add_argument("--lora-dropout", type=bounded_float(0.0, 1.0, include_low=True), metavar="P",
                       help="dropout on the adapters' input in training (default: 0)")
    group.add_argument("--lora-keep", action="store_true",
                       help="also save the adapters apart (lora.safetensors + lora.json), besides the merged model")


def lora_config_from_args(args):
    """The :class:`attnlab.training.lora.LoraConfig` the ``--lora*`` options ask for, or None
    without ``--lora``; ValueError naming the flag for a bad value or a ``--lora-*`` option
    given without ``--lora``."""
    rank = getattr(args, "lora", None)
    given = {flag: getattr(args, flag[2:].replace("-", "_"), None) for flag in LORA_FLAGS}
    if rank is None:
        stray = [flag for flag, value in given.items() if value not in (None, False)]
        if stray:
            raise ValueError(f"{stray[0]} needs --lora R (the adapters' rank)")
        return None
    from attnlab.training.lora import LoraConfig

    targets = given["--lora-targets"]
    targets = ("attention",) if targets is None else tuple(part.strip() for part in targets.split(","))
    return LoraConfig(rank=rank, alpha=given["--lora-alpha"], targets=targets,
                      dropout=given["--lora-dropout"] or 0.0)


def add_limit_argument(parser, unit: str, *, low: int = 1, help_default: str = "all of them") -> None:
    """``--limit N``: the subset size of every evaluator, one flag and one bound (N >= ``low``):
    score only the first N ``unit`` (sentences, images, pieces, ...)."""
    parser.add_argument("--limit", dest="limit", type=bounded_int(low), metavar="N",
                        help=f"score only the first N {unit} (default: {help_default})")


def apply_threads(args) -> None:
    """Set torch's CPU threads from ``--threads`` when it was given."""
    threads = getattr(args, "threads", None)
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


def add_runtime_arguments(parser) -> None:
    """The options every verb that runs a model shares: ``--device`` and ``--threads``."""
    add_device_argument(parser)
    add_threads_argument(parser)


def add_force_argument(parser, what: str = "the outputs") -> None:
    """``--force``: replace existing outputs (atomically); without it a verb refuses to
    replace or delete anything it did not write (attnlab.files.check_output_file /
    check_output_directory)."""
    parser.add_argument("--force", action="store_true",
                        help=f"replace {what} if they exist (atomically); without it existing files are refused")


def parse_overrides(items: Iterable[str], flag: str = "--set") -> dict[str, Any]:
    """``["num_layers=4", "dropout=0.3", "activation=gelu"]`` -> ``{"num_layers": 4, ...}``.

    Values become int, float, bool (true/false), a tuple of ints for comma-separated
    integers (``stem_channels=32,64``) or stay strings; the model config then checks each
    field's name and type and names the field in its error.
    """
    overrides: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name or not text:
            raise ValueError(f"{flag} {item!r}: expected FIELD=VALUE, e.g. {flag} dropout=0.3")
        value: Any
        parts = text.split(",")
        if len(parts) > 1 and all(part.strip().lstrip("-").isdigit() for part in parts):
            overrides[name.strip()] = tuple(int(part) for part in parts)
            continue
        for convert in (int, float):
            try:
                value = convert(text)
                break
            except ValueError:
                continue
        else:
            value = {"true": True, "false": False}.get(text.lower(), text)
        overrides[name.strip()] = value
    return overrides


DEVICE_HELP = ("where the model runs: auto (a CUDA GPU when one is available, else the CPU), cpu, cuda "
               "or cuda:N (default: auto)")


def device_name(text: str) -> str:
    """argparse ``type=`` for ``--device``: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``."""
    import argparse

    name = text.strip().lower()
    kind, sep, index = name.partition(":")
    if name in ("auto", "cpu", "cuda") or (kind == "cuda" and sep and index.isdigit()):
        return name
    raise argparse.ArgumentTypeError(f"{text!r} is not a device: use auto, cpu, cuda or cuda:N")


def add_device_argument(parser, help: str = DEVICE_HELP) -> None:
    parser.add_argument("--device", type=device_name, default="auto", metavar="auto|cpu|cuda[:N]", help=help)


def resolve_device(name: str) -> str:
    """``--device`` as a torch device string; ``auto`` picks CUDA when available.

    Raises ``ValueError`` (a clear CLI error) when CUDA is asked for and not available.
    """
    import torch

    name = device_name(name)
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            why = ("this torch build has no CUDA support" if torch.version.cuda is None
                   else "no CUDA GPU is visible (check the driver and CUDA_VISIBLE_DEVICES)")
            raise ValueError(f"--device {name}: CUDA is not available here ({why}); use --device cpu or auto")
        index = int(name.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise ValueError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) here")
    return name


def describe_device(device: str) -> str:
    """``cpu (2 threads)`` or ``cuda (NVIDIA H100 80GB HBM3)``: for the runs' first lines."""
    import torch

    if device.startswith("cuda"):
        return f"{device} ({torch.cuda.get_device_name(torch.device(device))})"
    return f"cpu ({torch.get_num_threads()} threads)"


QUANTIZE_CHOICES = ("int8", "bf16")  # attnlab.quantize.QUANTIZE_MODES, named here so no torch import is needed


def add_quantize_argument(parser) -> None:
    """``--quantize int8``: the decoding verbs' weight-quantised CPU mode (attnlab.quantize)."""
    parser.add_argument("--quantize", choices=QUANTIZE_CHOICES, default=None,
                        help="int8: quantise the linear layers' weights to int8 for faster CPU decoding; "
                             "bf16: bfloat16 weights, only on a CPU with AVX512-BF16/AMX (outputs may differ "
                             "slightly from float32)")


def apply_quantize(model, mode: str | None, device: str) -> None:
    """Apply ``--quantize`` to a loaded model (CPU only)."""
    if mode is None:
        return
    if not device.startswith("cpu"):
        raise ValueError(f"--quantize {mode} runs on the CPU; the model is on {device} (use --device cpu)")
    model.quantize(mode)


# -- the decoding verbs' --compile (generation/aot.py) ----------------------------------------
DECODE_COMPILE_CHOICES = ("auto", "aot", "off")


def add_decode_compile_argument(parser) -> None:
    """``--compile auto|aot|off``: decode through the step compiled ahead of time (attnlab.generation.aot)
    where one is built (auto, the default), always (aot: built on first use), or never (off)."""
    parser.add_argument("--compile", choices=DECODE_COMPILE_CHOICES, default="auto",
                        help="auto: on the CPU, run each decode step through the package compiled ahead of time "
                             "where one is already built for this model (by `attnlab compile` or an earlier "
                             "--compile aot), else eagerly, never building one; aot: always, building it on first "
                             "use (AOTInductor, once per model structure into $ATTNLAB_CACHE or ~/.cache/attnlab, "
                             "25-140 s); off: eager steps (default: auto)")


def decode_compile(args) -> bool | str:
    """What ``--compile`` asks of the decoding functions' ``compile=``."""
    mode = getattr(args, "compile", "auto")
    return mode if mode in ("aot", "auto") else False


def add_precision_argument(parser) -> None:
    parser.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                        help="auto: bf16 autocast (float32 master weights) on a GPU that supports it, float32 "
                             "elsewhere; fp32; or bf16 (default: auto)")
    parser.add_argument("--bf16", action="store_true", help="same as --precision bf16")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the training forward (faster steps on a GPU after a compile pause)")


def resolve_precision(args, device: str) -> bool:
    """Whether to train under bf16 autocast, from ``--precision``/``--bf16`` and the device."""
    precision = "bf16" if args.bf16 else args.precision
    if precision == "auto":
        import torch

        return device.startswith("cuda") and torch.cuda.is_bf16_supported()
    return precision == "bf16"


DATA_DIR_HELP = "where named data sets live (default: $ATTNLAB_DATA, else ~/.cache/attnlab/data)"


def add_data_dir_argument(parser, help: str = DATA_DIR_HELP) -> None:
    """``--data-dir DIR`` (dest ``data_dir``): where named data sets live, one meaning in every verb."""
    parser.add_argument("--data-dir", metavar="DIR", help=help)


def add_named_data_arguments(group, *, src_default: str | None = None, tgt_default: str | None = None,
                             what: str = "named data set: multi30k or trans-de-en",
                             languages: tuple[str, str] | None = None) -> None:
    """``--data NAME --data-dir DIR --data-root DIR --src LANG --tgt LANG`` (dests ``data``,
    ``data_dir``, ``data_root``, ``src_lang``, ``tgt_lang``): the named parallel data set a
    translation verb reads. ``--data-dir`` means what it means for every verb (where named
    data sets live, in place of $ATTNLAB_DATA); ``--data-root`` is this one set's own directory."""
    group.add_argument("--data", help=what)
    add_data_dir_argument(group)
    group.add_argument("--data-root", help="where this named data set itself lives (e.g. the multi30k directory; "
                                           "overrides --data-dir)")
    for index, (flag, side, default) in enumerate((("--src", "source", src_default), ("--tgt", "target", tgt_default))):
        fallback = f"default: {default}" if default else "default: the one the model was trained on"
        if languages is not None:
            fallback = languages[index]
        group.add_argument(flag, dest=f"{flag[2:]}_lang", default=default, help=f"{side} language code ({fallback})")


def options_from_args(options_class, args, **given):
    """An options dataclass built from parsed arguments: each field whose name is an
    argument's ``dest`` is taken from ``args``; ``given`` supplies the fields whose values
    need converting (and wins). One list of options (the dataclass), not three."""
    import dataclasses

    parsed = vars(args)
    values = {f.name: parsed[f.name] for f in dataclasses.fields(options_class) if f.name in parsed}
    return options_class(**{**values, **given})


SAVE_EVERY_MINUTES = 10.0
"""Default of ``--save-every-minutes``: an interrupted or killed run loses at most this much."""


def add_checkpoint_minutes_argument(group) -> None:
    """``--save-every-minutes M`` (default 10; 0: by updates only), the Trainer's
    ``checkpoint_every_minutes``; read it with :func:`checkpoint_minutes`."""
    group.add_argument("--save-every-minutes", type=bounded_float(0.0, include_low=True), default=SAVE_EVERY_MINUTES,
                       metavar="M",
                       help=f"also checkpoint whenever M minutes passed since the last checkpoint (0: only by "
                            f"updates; default: {SAVE_EVERY_MINUTES:g})")


def checkpoint_minutes(args) -> float | None:
    """``--save-every-minutes`` as TrainConfig's ``checkpoint_every_minutes`` (0 -> None)."""
    return getattr(args, "save_every_minutes", None) or None


RUN_FORCE = "a finished model or other files in OUT/model"
"""What a training verb's ``--force`` replaces (attnlab.training.outputs.check_run_output)."""


def add_run_group(parser, *, every: int = 500, seed: int = 0):
    """The "run" options every training verb shares (validation and checkpoint cadence, time
    budget, threads, seed, output, resume, force, progress bar) and ``--device``; returns the group
    so a verb can add its own run options to it. SIGINT/SIGTERM stop a run with a
    checkpoint that ``--resume`` continues (attnlab.training.Trainer)."""
    run = parser.add_argument_group("run")
    run.add_argument("--max-minutes", type=bounded_float(0.0),
                     help="wall-clock budget of the whole command (loading, training, final scoring; it says "
                          "how it splits it when it starts)")
    run.add_argument("--val-every", type=bounded_int(0), default=every,
                     help=f"validate every N updates (0: never; default: {every})")
    run.add_argument("--save-every", type=bounded_int(0), default=every,
                     help=f"checkpoint every N updates (0: only at the end; default: {every})")
    add_checkpoint_minutes_argument(run)
    run.add_argument("--threads", type=bounded_int(1, MAX_THREADS), metavar="N", help="torch CPU threads")
    run.add_argument("--seed", type=SEED, default=seed,
                     help=f"the run's random seed: new weights, data order, dropout, held-out draws (default: {seed})")
    run.add_argument("--out", required=True, help="output directory")
    run.add_argument("--resume", action="store_true",
                     help="continue from OUT/checkpoints (after Ctrl-C, a kill or a budget: the same command "
                          "plus --resume)")
    add_force_argument(run, RUN_FORCE)
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_device_argument(parser)
    return run


def physical_memory() -> int | None:
    """This machine's RAM in bytes (None where the system does not say)."""
    import os

    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_fits_in_memory(nbytes: int, *, flag: str, what: str) -> None:
    """Refuse, before allocating, options that imply more bytes than this machine's RAM
    (``what``: what would be allocated, e.g. "the training images resized to 100000×100000"),
    naming ``flag``; the kernel would otherwise kill the process without a word."""
    memory = physical_memory()
    if memory is not None and nbytes > memory:
        raise ValueError(f"{flag}: {what} would take about {nbytes / 2**30:,.1f} GiB, more than this machine's "
                         f"{memory / 2**30:,.1f} GiB of memory; choose a smaller value")


def check_positive(args, names) -> None:
    """Each option in ``names`` (attribute names of ``args``) that was given is at least 1."""
    for name in names:
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')}={value} must be at least 1")


def check_image_folder_memory(args) -> None:
    """``--image-size`` checked before a DIR's images are read: all of them resized to it
    must fit in memory (shared by train vit and train image)."""
    from pathlib import Path

    from attnlab.data.images import IMAGE_SUFFIXES

    size, folder = args.image_size, Path(args.data)
    if size is None or not folder.is_dir():
        return
    count = sum(1 for path in folder.rglob("*") if path.suffix.lower() in IMAGE_SUFFIXES)
    check_fits_in_memory(count * (args.channels or 3) * size * size, flag=f"--image-size {size}",
                         what=f"the {count:,d} images of {folder} resized to {size}×{size}")


def resampled_splits(parts, size: int | None, data: str) -> tuple:
    """An image set's splits (``ImageSet``s) at ``size``×``size``: a named set at another
    resolution is resampled (``--image-size`` on named sets; a fine-tuning run's model size),
    after checking the result fits in memory. Shared by train vit and train image."""
    from attnlab.data.images import resize_image_set

    parts = tuple(parts)
    if size is None or all(part.image_size == size for part in parts):
        return parts
    count = sum(len(part) for part in parts)
    check_fits_in_memory(count * parts[0].channels * size * size, flag=f"--image-size {size}",
                         what=f"the {count:,d} images of {data} resampled to {size}×{size}")
    return tuple(resize_image_set(part, size) for part in parts)


def image_run_info(args, train, valid) -> dict:
    """What --resume of an image verb must find unchanged: the data, its classes, size and counts."""
    return {"--data": str(args.data), "classes": train.classes, "--image-size": train.image_size,
            "images": [len(train), len(valid)]}


def sizing_flags(args, *flags: str) -> str:
    """The options among ``flags`` that were given (``--batch-size`` always), as
    ``--image-size 100000/--batch-size 16``: what a memory refusal names."""
    named = []
    for flag in flags:
        value = getattr(args, flag[2:].replace("-", "_"))
        if flag == "--batch-size" or (value and flag != "--set"):
            named.append(f"{flag} {value}")
        elif value:
            named.append(flag)
    return "/".join(named)


def check_training_memory(config, *, batch_size: int, flag: str, length: int | None = None) -> None:
    """What a model of ``config`` implies for one training step, estimated before anything
    is allocated (the parameters counted on the meta device, as the model loader does): the
    weights with gradients and Adam's two moments, and each layer's activations and
    attention weights for ``batch_size`` inputs of ``length`` positions (default: an Image
    Transformer's sub-pixels, a ViT's patches). Refused, naming ``flag``, when that is more
    than this machine's memory (an out-of-memory kill says nothing)."""
    import torch

    from attnlab.attention.local import Local1D, Local2D
    from attnlab.models.registry import model_class_for

    with torch.device("meta"):
        parameters = model_class_for(config)(config).num_parameters()
    layers = config.num_layers + getattr(config, "num_encoder_layers", 0)
    if length is not None:  # a token model: full (or relative) causal attention over the window
        window = length
    elif hasattr(config, "sequence_length"):  # an Image Transformer: local patterns attend to a window of keys
        length = config.sequence_length
        pattern = config.decoder_pattern()
        if isinstance(pattern, Local1D):
            block = pattern.block_length
            length, window = -(-length // block) * block, 2 * block  # padded to whole blocks
        elif isinstance(pattern, Local2D):
            rows, columns = pattern.query_shape
            flange_rows, flange_columns = pattern.memory_flange
            window = (rows + flange_rows) * (columns + 2 * flange_columns)
        else:
            window = length
    else:
        length = config.num_prefix_tokens + config.grid[0] * config.grid[1]
        window = length
    attention = batch_size * config.num_heads * length * window * 4 * layers
    activations = batch_size * length * config.d_model * 4 * layers * 8
    check_fits_in_memory(16 * parameters + attention + activations, flag=flag,
                         what=f"training a model of {parameters:,d} parameters on sequences of {length:,d} "
                              f"positions, {batch_size} at a time")


# --------------------------------------------------------------------------- #
# Optional packages: checked before a verb starts, never found missing at its end
# --------------------------------------------------------------------------- #
# module -> (what attnlab uses it for, how to install it: the pyproject extra where there is one)
OPTIONAL_PACKAGES = {
    "pycocoevalcap": ("BLEU-4 and CIDEr of captions", "pip install 'attnlab[caption]' "
                                                     "(or: pip install --no-deps pycocoevalcap)"),
    "onnx": ("the ONNX exporter", "pip install 'attnlab[onnx]'"),
    "onnxruntime": ("checking an ONNX export", "pip install 'attnlab[onnx]'"),
    "music21": ("the Bach chorales of music21's corpus", "pip install 'attnlab[music]'"),
    "tokenizers": ("BERT's WordPiece tokenizer (HuggingFace BERT directories)", "pip install tokenizers"),
}


def require_packages(verb: str, *modules: str) -> None:
    """Refuse to start ``attnlab VERB`` when an optional package it will need is missing
    (ValueError: one line naming the package, what it is for and how to install it), so
    that nothing runs for minutes and then fails. Each module is imported, so a broken
    installation is found here too."""
    import importlib

    missing = []
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        needs = " and ".join(f"{m} ({OPTIONAL_PACKAGES[m][0]})" if m in OPTIONAL_PACKAGES else m for m in missing)
        hints = dict.fromkeys(OPTIONAL_PACKAGES[m][1] if m in OPTIONAL_PACKAGES else f"pip install {m}"
                              for m in missing)
        raise ValueError(f"attnlab {verb} needs {needs}, which is not installed: {'; '.join(hints)}")


# ---------------------------------------------------------------------- a model's own data
def own_data_line(model, what: str, count: int, unit: str) -> str:
    """The one line an evaluator prints when no data flag was given and it scores the
    model's own held-out data, as its directory records it (issue 39, point 4)::

        scoring runs/vit/model's own held-out data: fashion-mnist test (10,000 images)
    """
    unit = unit.removesuffix("s") if count == 1 else unit  # "1 image", "1 piece"
    return f"scoring {model}'s own held-out data: {what} ({count:,d} {unit})"


def check_recorded_data(model, record: str, data: str | None, flag: str, *, named: Iterable[str] = ()) -> str:
    """``data`` as ``model/record`` names it (a named set of ``named``, or a file or folder),
    or ValueError naming the record, the data and ``flag`` (the data flag to pass instead)
    when it does not say, or names a file or folder that is no longer there."""
    from pathlib import Path

    from attnlab.files import check_recorded_files

    path = Path(model) / record
    if not data:
        raise ValueError(f"{path} does not say which data the model was trained on; pass {flag}")
    if data in set(named):
        return data
    check_recorded_files(path, [data], what="own data", instead=f"pass {flag} to score it on data you have",
                         folders=True)
    return data
