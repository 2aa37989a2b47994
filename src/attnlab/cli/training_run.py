"""One training run, every family: the lifecycle each ``attnlab train TASK`` goes through.

    options -> output rule -> start (new | --resume | --init DIR) -> data -> model -> trainer
            -> held-out score before -> train within the budget -> save -> final scoring

A family supplies a :class:`TrainingTask` (its own flags, its data, its fresh model's
config, its Trainer, its final scoring); :func:`run_training` is the rest, written once:
the command budget, the ``--out`` rule, ``--resume`` on the same data only, ``--init DIR``
(any directory ``attnlab.load`` opens for the family: an attnlab model directory, a
checkpoint ``OUT/checkpoints/step_N``, or a foreign one the family recognises), fine-tuning
defaults, the starting model's held-out figure, the files written under the output lock
only after every check, and the saved model's provenance (``start.json``).

A train module uses it with two lines (see families/vit/train.py)::

    TASK = VitTask()
    def add_arguments(parser): add_training_arguments(parser, TASK)
    def run(args): return run_training(TASK, args)

It lives beside the verbs (cli), not in attnlab.training: opening a start directory goes
through :func:`attnlab.pipelines.load`, which sits above training (tests/test_layering.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["TrainingTask", "RunStart", "Run", "add_training_arguments", "run_training", "train_run", "open_start",
           "FINE_TUNE_LR_FACTOR", "START_FILE", "DEFAULT_MAX_UNKNOWN", "option_given"]

START_FILE = "start.json"
"""Where a fine-tuned model records the directory it started from (OUT/model and each checkpoint)."""

FINE_TUNE_LR_FACTOR = 0.1
"""With --init and no --lr (--lr-scale): the peak learning rate is this factor of the verb's default."""

FINE_TUNE_WARMUP_SHARE = 0.05
"""With --init and no --warmup: warm up for this share of --max-steps (at least 1 update)."""

DEFAULT_MAX_UNKNOWN = 1.0
"""--max-unknown's default, in percent of the training text the starting tokenizer cannot represent."""

DROPOUT_FIELDS = ("dropout", "drop_path", "attention_dropout", "activation_dropout", "embedding_dropout",
                  "residual_dropout", "layer_drop")


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class RunStart:
    """Where a run starts from with ``--init DIR``: the model as DIR holds it, what DIR carries
    beside the weights that the data must keep (a tokenizer, class names: ``vocabulary``), and
    the provenance recorded in the saved model (``record``)."""

    directory: Path
    model: Any
    vocabulary: Any
    record: dict[str, Any]


@dataclass
class Run:
    """What the lifecycle knows when it asks the task for data, a config or a Trainer."""

    args: Any
    out: Path
    device: str
    bf16: bool
    context: Any = None  # the DistributedContext (torchrun), one process otherwise
    start: RunStart | None = None  # --init (None on a fresh or resumed run of one's own)
    previous: Path | None = None  # the checkpoint --resume continues
    vocabulary: Any = None  # the start's or the checkpoint's vocabulary (None: the task learns one)
    files: dict[str, bytes] = field(default_factory=dict)  # written to OUT and OUT/model (tokenizer, classes)
    data: Any = None  # what task.data returned (for save, which scores under the output lock where a task does)
    budget: Any = None  # the command's budget (attnlab.training.phases.command_budget)

    @property
    def fine_tuning(self) -> bool:
        return self.start is not None

    def model_files(self) -> list[Path]:
        """The files of OUT each checkpoint carries (so a checkpoint is a model directory)."""
        return [self.out / name for name in self.files]


class TrainingTask:
    """What a family supplies to :func:`run_training`; everything else is the lifecycle's.

    Required: ``name`` (the task: ``attnlab train NAME``), ``family`` (its registry name),
    :meth:`add_arguments`, :meth:`data`, :meth:`config`, :meth:`trainer`. The rest has
    defaults a family overrides where it has something of its own."""

    name: str = ""
    family: str = ""
    scoring: str | None = None  # what final scoring does (budget_plan), None: no final scoring
    summary_keys: tuple[str, ...] = ("loss", "valid_loss")
    unit: str = ""
    held_out: tuple[str, str] = ("valid_loss", "nats per token")  # (Trainer validation key, its unit)
    lr_flag: str = "lr"  # the dest of the peak learning-rate flag the fine-tuning default lowers
    peak_scales_with_warmup: bool = False  # the schedule's peak depends on --warmup (Noam: scale * warmup**-0.5)
    adaptable: Mapping[str, str] = {}  # config field -> what fine-tuning does when it changes (said in one line)
    data_fields: tuple[str, ...] = ()  # config fields the data or vocabulary decides (not --preset's to contradict)
    flag_names: Mapping[str, str] = {}  # run_info key -> the flag that sets it (named when --resume refuses)
    main_part: str = "training"  # what the budget line calls the main model's training

    # -- flags and checks ---------------------------------------------------------------
    def add_arguments(self, parser) -> None:
        raise NotImplementedError

    def check(self, args) -> None:
        """Options that can be checked without data (before anything is read)."""

    def overrides(self, args) -> dict[str, Any]:
        """The preset fields ``--set`` overrides."""
        from attnlab.cli.options import parse_overrides

        return parse_overrides(getattr(args, "set", None) or [])

    # -- data, model, trainer -------------------------------------------------------------
    def open_init(self, path: Path) -> tuple[Any, Any] | None:
        """``--init DIR`` opened by the task itself: ``(model, vocabulary)``, or None (the
        default): through the family registry and :func:`attnlab.load`. A task whose verb
        starts from directories of more than its own family (any BERT for the text
        classifier) opens them here, refusing in one line naming ``--init``."""
        return None

    def vocabulary(self, pipeline) -> Any:
        """What a directory of this family carries beside its weights that the data must keep
        (tokenizer, class names), from its :func:`attnlab.load` pipeline; None: nothing."""
        return None

    def checkpoint_vocabulary(self, checkpoint: Path) -> Any:
        """The vocabulary of the checkpoint ``--resume`` continues; the default opens it as a
        model directory (:func:`attnlab.load`)."""
        from attnlab.pipelines import load

        return self.vocabulary(load(checkpoint))

    def parts(self, run: Run) -> list[tuple[str, float]]:
        """Auxiliary models trained before the main one, as ``(name, share of the whole
        budget)`` (each is given to :meth:`train_part` in turn); none by default."""
        return []

    def train_part(self, run: Run, data, name: str, budget) -> None:
        """Train (or resume) the auxiliary model ``name`` of :meth:`parts` within ``budget``
        (its share), under the output lock, after every check and before the main model's
        config; keep what the main model needs in ``data``."""
        raise NotImplementedError

    def data(self, run: Run) -> Any:
        """Read the data (and learn a vocabulary when ``run.vocabulary`` is None); fill
        ``run.files`` with what OUT/model keeps beside the weights."""
        raise NotImplementedError

    def run_info(self, run: Run, data) -> dict[str, Any]:
        """What ``--resume`` must find unchanged: the data (fingerprints), as {key: value}; keys
        are flag names where a flag sets them (they are named in the refusal)."""
        return {}

    def unknown_share(self, run: Run, data) -> tuple[float, str] | None:
        """With --init: (share of the training text the start's vocabulary cannot represent,
        what is counted, e.g. "characters"); None where every input is representable."""
        return None

    def config(self, run: Run, data) -> tuple[Any, dict[str, Any]]:
        """``(preset, overrides the data implies)`` of a fresh model (``--set`` is added by the
        lifecycle); the preset is a registered name or a ModelConfig. With --init the overrides
        are applied to DIR's config (and checked)."""
        raise NotImplementedError

    def check_config(self, run: Run, config, data) -> None:
        """The task's own checks of the final config (memory, context), before building it."""

    def new_parameters(self, run: Run, data, old_config, new_config) -> tuple[str, ...]:
        """Name prefixes of parameters --init does not copy from DIR (a new head)."""
        return ()

    def trainer(self, run: Run, model, data, run_info: dict[str, Any]):
        raise NotImplementedError

    def describe(self, run: Run, model, data) -> None:
        """The lines a run prints before training (data, model, device)."""

    def save(self, run: Run, model, trainer) -> Path:
        """Write OUT/model; the default: the final weights with ``run.files``."""
        from attnlab.training.outputs import save_run_model

        return save_run_model(model, run.out / "model", extra_files=run.files, replace=run.args.force)

    def saved_note(self, run: Run) -> str:
        """Said after the model directory on the ``done:`` line (e.g. how it was averaged)."""
        return ""

    def finish(self, run: Run, model, data, budget) -> None:
        """Final scoring after the model is saved (a test split)."""


# --------------------------------------------------------------------------- parser
def add_training_arguments(parser, task: TrainingTask) -> None:
    """The family's flags, then the lifecycle's own: ``--init DIR`` and ``--max-unknown``.
    The one place every training verb gets them."""
    task.add_arguments(parser)
    start = parser.add_argument_group("start from a trained model (fine-tuning)")
    start.add_argument("--init", metavar="DIR",
                       help="start from the model in DIR (an attnlab model directory, a checkpoint OUT/checkpoints/"
                            "step_N, or a directory of another library this family reads): its weights, "
                            "architecture and vocabulary; a fresh optimizer and schedule (fine-tuning defaults: a "
                            f"tenth of the default peak learning rate, a warm-up of {100 * FINE_TUNE_WARMUP_SHARE:.0f}%% "
                            "of the updates)")
    start.add_argument("--max-unknown", type=float, default=DEFAULT_MAX_UNKNOWN, metavar="PERCENT",
                       help="with --init: refuse training text of which more than PERCENT is unknown to DIR's "
                            f"tokenizer (default: {DEFAULT_MAX_UNKNOWN:g})")
    from attnlab.cli.options import add_lora_arguments

    add_lora_arguments(start)  # with --init only: cli/lora_run.py
    parser.set_defaults(training_defaults={action.dest: action.default for action in parser._actions},
                        options_given=frozenset())
    for action in parser._actions:  # each option the command line names is recorded as given
        if action.option_strings and not isinstance(action, argparse._HelpAction):
            action.__class__ = _recording(type(action))


def _recording(base: type) -> type:
    """``base`` (an argparse action class) that also adds its ``dest`` to ``options_given``:
    argparse calls an optional's action only when the command line names it."""
    if getattr(base, "records_given", False):
        return base

    class Recording(base):
        records_given = True

        def __call__(self, parser, namespace, values, option_string=None):
            namespace.options_given = frozenset(getattr(namespace, "options_given", frozenset()) | {self.dest})
            return super().__call__(parser, namespace, values, option_string)

    Recording.__name__ = f"Recording{base.__name__}"
    return Recording


def option_given(args, dest: str) -> bool:
    """Whether the command line named the option ``dest`` (also at its default value, e.g.
    ``--lr 1e-3`` where 1e-3 is the default). Arguments built without the parser (the Python
    API) fall back to: given when the value differs from the default."""
    given = getattr(args, "options_given", None)
    if given is not None:
        return dest in given
    defaults = getattr(args, "training_defaults", {}) or {}
    return dest in defaults and getattr(args, dest, None) != defaults[dest]


# --------------------------------------------------------------------------- --init
def _inside(path: Path, directory: Path) -> bool:
    path, directory = path.resolve(), directory.resolve()
    return path == directory or directory in path.parents


def _weights_digest(directory: Path) -> str | None:
    weights = directory / "model.safetensors"
    if not weights.is_file():
        return None
    from attnlab.files import sha256_file

    return sha256_file(weights)


def _format_of(directory: Path) -> str:
    from attnlab.files import read_config_json

    values = read_config_json(directory) or {}
    if "family" in values:
        return "attnlab checkpoint" if (directory / "training_state.json").is_file() else "attnlab"
    if "model_type" in values:
        return f"huggingface {values['model_type']}"
    if "architecture" in values:
        return f"timm {values['architecture']}"
    return "unknown"


def _check_init_location(directory: str, out: Path) -> None:
    """--init names a directory, outside --out (which the run writes), with --out not inside it."""
    from attnlab.models.registry import require_model_directory

    path, flag = require_model_directory(directory, "--init"), f"--init {directory}"
    if _inside(path, out):
        raise ValueError(f"{flag}: is inside --out {out}, which this run writes (its model is replaced, its "
                         "checkpoints rotate); copy the model elsewhere or choose another --out")
    if _inside(out, path):
        raise ValueError(f"--out {out}: is inside {flag}, which is only read; choose an --out outside it")


def open_start(directory: str, task: TrainingTask, *, out: Path) -> RunStart:
    """Open ``--init DIR`` for ``task``'s family through the family registry and
    :func:`attnlab.load` (every format the family reads, nothing unpickled), refusing in one
    line naming ``--init``: a missing directory, another family's, a half-written one, a
    pickle-only one, or one inside ``--out`` (which the run writes)."""
    from attnlab.families import family_for_directory, get_family
    from attnlab.files import read_config_json
    from attnlab.pipelines import load

    path = Path(directory)
    flag = f"--init {directory}"
    _check_init_location(directory, out)
    opened = task.open_init(path)
    if opened is not None:
        return RunStart(path, opened[0], opened[1], _start_record(path))
    own = get_family(task.family)
    family = family_for_directory(path)
    if family is None:
        if (path / "pytorch_model.bin").is_file() and not (path / "model.safetensors").is_file():
            raise ValueError(f"{flag}: holds only pytorch_model.bin, a pickle, which attnlab never loads; convert it "
                             "to model.safetensors (safetensors.torch.save_file) first")
        if read_config_json(path) is None:
            raise ValueError(f"{flag}: no config.json; not a model directory (an attnlab model directory holds "
                             "config.json and model.safetensors)")
        raise ValueError(f"{flag}: not a model directory attnlab reads for train {task.name}")
    if family.name != own.name:
        raise ValueError(f"{flag}: holds a {family.title} model ({family.name!r}), not a {own.title} one; "
                         f"train {task.name} starts only from its own family's models")
    try:
        pipeline = load(path)
    except ImportError as error:
        raise ValueError(f"{flag}: {error}") from None
    except ValueError as error:
        message = str(error)
        raise ValueError(message if directory in message else f"{flag}: {message}") from None
    return RunStart(path, pipeline.model, task.vocabulary(pipeline), _start_record(path))


def _start_record(path: Path) -> dict[str, Any]:
    """The provenance start.json keeps: DIR, its format and its weights' digest."""
    record = {"init": str(path.resolve()), "format": _format_of(path)}
    digest = _weights_digest(path)
    if digest is not None:
        record["weights_sha256"] = digest
    return record


def _architecture_changes(task: TrainingTask, old, new, explain: Callable[[str], str]) -> list[str]:
    """The fields fine-tuning changes: allowed ones are said; any other raises naming it."""
    said = []
    for name, value in new.to_dict().items():
        before = old.to_dict().get(name)
        if before == value:
            continue
        if name in DROPOUT_FIELDS or name.endswith("dropout"):
            said.append(f"{name} {before} -> {value}")
        elif name in task.adaptable:
            said.append(f"{name} {before} -> {value} ({task.adaptable[name]})")
        else:
            raise ValueError(f"{explain(name)}: {name}={value!r}, but --init's model has {name}={before!r}; the "
                             "architecture comes from --init (fine-tuning may change dropout"
                             + (", " + ", ".join(sorted(task.adaptable)) if task.adaptable else "") + ")")
    return said


def _start_config(task: TrainingTask, run: Run, preset: str | None, data_overrides: dict, sets: dict):
    """DIR's config with what the data implies and --set applied; a --preset or --set that
    contradicts DIR's architecture is refused naming the field."""
    from attnlab.models.registry import get_preset

    old = run.start.model.config
    args = run.args
    if isinstance(preset, str) and option_given(args, "preset"):
        chosen = get_preset(preset, **sets)
        for name, value in chosen.to_dict().items():
            if (name in data_overrides or name in task.data_fields or name in task.adaptable or name.endswith("dropout")
                    or name in DROPOUT_FIELDS or name == "family"):
                continue
            if old.to_dict().get(name) != value:
                raise ValueError(f"--preset {preset}: {name}={value!r}, but --init's model has "
                                 f"{name}={old.to_dict().get(name)!r}; with --init the architecture comes from DIR "
                                 "(leave --preset out)")

    def explain(name: str) -> str:
        if name in sets:
            return f"--set {name}={sets[name]}"
        return f"--init {args.init} with this run's data"

    try:
        new = old.replace(**{**data_overrides, **sets})
    except (TypeError, ValueError) as error:
        raise ValueError(f"--init {args.init}: {error}") from None
    changes = _architecture_changes(task, old, new, explain)
    return new, changes


def _transfer(task: TrainingTask, run: Run, data, model) -> list[str]:
    """Copy DIR's weights into ``model`` (the adapted config's): every parameter but those
    ``task.new_parameters`` names, which keep their fresh initialisation (a new head). The
    model's own load hooks adapt what they can (a ViT's position embeddings to a new grid)."""
    start = run.start
    fresh = task.new_parameters(run, data, start.model.config, model.config)
    state = {key: value for key, value in start.model.state_dict().items()
             if not any(key.startswith(prefix) for prefix in fresh)}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [key for key in missing if not any(key.startswith(prefix) for prefix in fresh)]
    if missing or unexpected:
        raise ValueError(f"--init {start.directory}: its weights do not fit the model (missing {sorted(missing)}, "
                         f"unexpected {sorted(unexpected)})")
    return sorted({prefix for prefix in fresh})


def _fine_tune_defaults(task: TrainingTask, args) -> str:
    """A lower peak learning rate and a short warm-up unless given; the line that says so.

    The peak becomes a tenth of the default run's peak. Where the schedule's peak depends on
    the warm-up (``task.peak_scales_with_warmup``: Noam's ``scale * d**-0.5 * warmup**-0.5``), the
    scale is also multiplied by ``sqrt(new warm-up / default warm-up)``, so the shorter warm-up
    does not raise the peak back up (it did: a 4-update warm-up gave 3.2x the default's peak)."""
    parts = []
    default_warmup = getattr(args, "warmup", None)
    short_warmup = hasattr(args, "warmup") and not option_given(args, "warmup")
    if short_warmup:
        args.warmup = max(1, int(args.max_steps * FINE_TUNE_WARMUP_SHARE))
    flag = f"--{task.lr_flag.replace('_', '-')}"
    if getattr(args, task.lr_flag, None) is not None and not option_given(args, task.lr_flag):
        factor, why = FINE_TUNE_LR_FACTOR, "a tenth of the default"
        if task.peak_scales_with_warmup and short_warmup and default_warmup:
            factor *= (args.warmup / default_warmup) ** 0.5
            why = (f"a tenth of the default's peak learning rate: 0.1 x sqrt({args.warmup}/{default_warmup}) for the "
                   "shorter warm-up")
        setattr(args, task.lr_flag, getattr(args, task.lr_flag) * factor)
        parts.append(f"peak {flag} {getattr(args, task.lr_flag):g} ({why})")
    else:
        parts.append(f"peak {flag} {getattr(args, task.lr_flag, None)} (given)")
    if short_warmup:
        parts.append(f"warm-up {args.warmup} updates ({FINE_TUNE_WARMUP_SHARE:.0%} of --max-steps)")
    elif hasattr(args, "warmup"):
        parts.append(f"warm-up {args.warmup} updates (given)")
    return "fine-tuning: a fresh optimizer and schedule, " + ", ".join(parts)


# --------------------------------------------------------------------------- --resume
def _check_same_run(task: TrainingTask, previous: Path, run_info: dict[str, Any], init: RunStart | None,
                    args) -> None:
    """--resume continues the same run on the same data; anything else is refused before any
    work, pointing to --init (a new run from the model)."""
    from attnlab.training import load_training_state

    saved = load_training_state(previous).get("run_info")
    if not isinstance(saved, dict):
        return  # a checkpoint from before run_info was kept: nothing to compare with
    started = saved.get("init")
    if init is None and started is not None:
        raise ValueError(f"--resume: the run in {args.out} is a fine-tuning run started from --init "
                         f"{saved.get('init_dir')}; give the same --init to continue it (its learning rate and "
                         "architecture come from there)")
    if init is not None and started != init.record.get("weights_sha256", init.record["init"]):
        raise ValueError(f"--init {args.init} with --resume: the run in {args.out} did not start from it "
                         f"({'it started from ' + repr(saved.get('init_dir')) if started else 'it started fresh'}); "
                         "--resume continues that run (leave --init out), or start a new run with --init and "
                         "another --out")
    changed = [key for key in run_info if key in saved and key not in ("init", "init_dir")
               and json.dumps(saved[key], sort_keys=True, default=str)
               != json.dumps(run_info[key], sort_keys=True, default=str)]
    if changed:
        changed = [task.flag_names.get(key, key) for key in changed]
        raise ValueError(f"--resume: {', '.join(changed)} differ(s) from the run saved in {previous}; --resume "
                         "continues the same run on the same data. To train the model further on other data, start "
                         f"a new run from it: --init {Path(args.out) / 'model'} --out NEW_DIR")


# --------------------------------------------------------------------------- the run
def run_training(task: TrainingTask, args) -> int:
    """The whole command ``attnlab train TASK``: :func:`train_run`, then the model directory
    on stdout (from the main process)."""
    model_dir = train_run(task, args)
    if model_dir is not None:
        print(model_dir)
    return 0


def train_run(task: TrainingTask, args) -> Path | None:
    """One training run (see the module docstring); the model directory (None on a process
    other than the main one under torchrun). Every refusal happens before anything is written
    to ``--out``."""
    import contextlib

    import torch

    from attnlab.cli.lora_run import check_lora_fits, finish_lora, lora_from_args, plan_lora
    from attnlab.cli.options import apply_threads, resolve_device, resolve_precision
    from attnlab.files import OutputLock, atomic_write_bytes, refuse_symlinks
    from attnlab.models.registry import get_preset, load_config, model_class_for
    from attnlab.training.distributed import init_distributed
    from attnlab.training.lora import apply_lora
    from attnlab.training.outputs import check_run_output
    from attnlab.training.phases import (budget_plan, budget_report, command_budget, portion, scoring_reserve,
                                         train_within)
    from attnlab.training.trainer import TRAINER_OUTPUTS

    budget = command_budget(args.max_minutes)  # the whole command's, from here
    task.check(args)
    if not 0.0 <= args.max_unknown <= 100.0:
        raise ValueError(f"--max-unknown={args.max_unknown} must be a percentage in [0, 100]")
    lora = lora_from_args(args)
    out = Path(args.out)
    device = resolve_device(args.device)
    context = init_distributed()
    say = _say if context.is_main else (lambda message: None)
    run = Run(args=args, out=out, device=device, context=context, budget=budget,
              bf16=resolve_precision(args, device) if hasattr(args, "precision") else False)
    if args.init:
        _check_init_location(args.init, out)
    run.previous = check_run_output(out, resume=args.resume, force=args.force)  # before reading anything
    apply_threads(args)
    if args.init:
        run.start = open_start(args.init, task, out=out)
        if lora is not None:
            check_lora_fits(lora, run.start.model)
    parts = task.parts(run)
    plan = budget_plan(budget, parts=parts, main=task.main_part, scoring=task.scoring)
    if plan:
        say(plan)

    # The vocabulary: the resumed checkpoint's, else --init's, else the task learns one.
    if run.previous is not None:
        run.vocabulary = task.checkpoint_vocabulary(run.previous)
    elif run.start is not None:
        run.vocabulary = run.start.vocabulary
    data = run.data = task.data(run)
    run_info = task.run_info(run, data)
    if run.start is not None:
        run_info["init"] = run.start.record.get("weights_sha256", run.start.record["init"])
        run_info["init_dir"] = run.start.record["init"]
    if run.previous is not None:
        _check_same_run(task, run.previous, run_info, run.start, args)
    elif run.start is not None:
        unknown = task.unknown_share(run, data)
        if unknown is not None:
            share, what = unknown
            say(f"--init {args.init}: {100 * share:.2f} % of the training text's {what} are unknown to its "
                "tokenizer")
            if 100 * share > args.max_unknown:
                raise ValueError(f"--init {args.init}: {100 * share:.2f} % of the training text's {what} are unknown "
                                 f"to its tokenizer, above --max-unknown {args.max_unknown:g}; pass --max-unknown "
                                 f"{100 * share + 0.01:.2f} to train anyway (they are dropped)")

    # Auxiliary models (each within its share of the budget), before the main model's config.
    for name, share in parts:
        with (OutputLock(out, purpose=f"attnlab train {task.name}") if context.is_main
              else contextlib.nullcontext()):
            task.train_part(run, data, name, portion(budget, share))

    # The model: a fresh one, DIR's adapted, or (resuming) the checkpoint's config.
    preset, data_overrides = task.config(run, data)
    sets = task.overrides(args)
    changes: list[str] = []
    if run.start is not None:
        config, changes = _start_config(task, run, preset, data_overrides, sets)
    elif isinstance(preset, str):
        config = get_preset(preset, **{**data_overrides, **sets})
    else:  # the task's own config (a family without registered presets)
        config = preset.replace(**{**data_overrides, **sets})
    if run.previous is not None:
        saved = load_config(run.previous)
        differ = [name for name, value in config.to_dict().items()
                  if json.dumps(saved.to_dict().get(name), default=str) != json.dumps(value, default=str)]
        if differ:
            raise ValueError(f"--resume: the model of {run.previous} has {', '.join(f'{n}={saved.to_dict()[n]!r}' for n in differ)}, "
                             f"this command asks for {', '.join(f'{n}={config.to_dict()[n]!r}' for n in differ)}; "
                             "--resume continues the same run (give the options it was started with)")
    task.check_config(run, config, data)
    lora_trainable = plan_lora(task, run, data, run.start and run.start.model.config, config, lora)
    torch.manual_seed(args.seed)  # the initial weights (and a new head): --seed makes a run reproducible
    model = model_class_for(config)(config)
    if run.start is not None and run.previous is None:
        fresh = _transfer(task, run, data, model)
        run.start.model = None  # its weights are in ``model`` now
        say(f"start: {run.start.record['init']} ({run.start.record['format']}), weights and vocabulary kept"
            + ("; changed: " + "; ".join(changes) if changes else "")
            + (f"; new parameters: {', '.join(fresh)} (initialised as a fresh model's)" if fresh else ""))
    elif run.start is not None:
        say(f"--resume: continuing the fine-tuning run in {out} from its checkpoint; --init {args.init} is where "
            "it started (the checkpoint's weights win)")
    if run.start is not None:
        say(_fine_tune_defaults(task, args))  # on resume too: the run continues with the settings it began with
    model.to(device)
    if lora is not None:  # after --init's weights (and a new head) are in, before the Trainer
        say(apply_lora(model, lora, trainable=lora_trainable).describe())
    if run.start is not None:
        run.files[START_FILE] = (json.dumps(run.start.record, indent=2) + "\n").encode()
    task.describe(run, model, data)
    trainer = task.trainer(run, model, data, run_info)

    before, before_seconds = None, 0.0
    if run.start is not None and run.previous is None and trainer.valid_batches is not None:
        clock = time.perf_counter()
        before = trainer.validate()
        before_seconds = time.perf_counter() - clock  # what scoring the final weights will cost again
        trainer.start_record = {"start": run.start.record["init"], **{f"start_{k}": v for k, v in before.items()}}
        key, unit = task.held_out
        say(f"held-out before fine-tuning: {_figure(before, key)} {unit}")

    # Every option is checked; nothing is written to OUT before this point (rank 0 writes).
    lock = OutputLock(out, purpose=f"attnlab train {task.name}") if context.is_main else contextlib.nullcontext()
    with lock:
        if context.is_main:
            refuse_symlinks(out, (*TRAINER_OUTPUTS, *run.files, "model"))
            out.mkdir(parents=True, exist_ok=True)
            for name, content in run.files.items():
                atomic_write_bytes(out / name, content)
        train_within(trainer, budget, reserve=(scoring_reserve(budget) if task.scoring else 0.0) + before_seconds,
                     resume=args.resume, say=say)
        if not context.is_main:  # under torchrun, rank 0 writes the model and scores it
            context.barrier()
            return None
        if lora is not None:
            say(finish_lora(run, model))
        model_dir = task.save(run, model, trainer)
    say(f"done: {trainer.summary(task.summary_keys, task.unit)}; model -> {model_dir}{task.saved_note(run)}")
    if before is not None:
        key, unit = task.held_out
        after, note = trainer.last_validation or {}, ""
        if trainer.validation_step != trainer.step:  # the last validation scored older weights than the saved ones
            after, note = trainer.validate(), f" (the saved weights, step {trainer.step})"
        say(f"held-out: {_figure(before, key)} -> {_figure(after, key)} {unit}{note}")
    task.finish(run, model, data, budget)
    if budget.limited:
        say(budget_report(budget))
    context.barrier()
    return model_dir


def _figure(metrics: Mapping[str, float], key: str) -> str:
    value = metrics.get(key)
    return "?" if value is None else f"{value:.4g}"
