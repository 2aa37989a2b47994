"""``attnlab <verb>``: one small module per verb, thin over the library.

Verb modules must not import torch at module level: ``attnlab --help`` stays fast
because nothing heavy is imported until a verb runs.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import math
import os
import shlex
import signal
import sys
import threading
import traceback
import warnings

# The verbs every family shares: name -> module (``HELP``, ``add_arguments(parser)``,
# ``run(args) -> int``). Each family adds its own verbs through its registration
# (attnlab.families); :func:`verbs` lists them all, in the order ``attnlab --help`` shows.
SHARED_VERBS = {
    "presets": "attnlab.cli.presets",
    "demo": "attnlab.cli.demo",
    "data": "attnlab.cli.data",
    "train": "attnlab.cli.train",
    "evaluate": "attnlab.cli.evaluate",
    "compile": "attnlab.cli.compile",
}
SHARED_TOOLS = {
    "explore": "attnlab.cli.explore",
    "export-onnx": "attnlab.cli.export_onnx",
    "export": "attnlab.cli.export",
    "average": "attnlab.cli.average",
    "curves": "attnlab.cli.curves",
    "positions": "attnlab.cli.positions",
    "complexity": "attnlab.cli.complexity",
}


def verbs() -> dict[str, str]:
    """Every verb: the shared ones, each family's (attnlab.families), then the shared tools."""
    from attnlab.families import all_verbs

    found = dict(SHARED_VERBS)
    for name, (family, module) in all_verbs().items():  # aliases included
        if name in found or name in SHARED_TOOLS:
            raise ValueError(f"family {family.name!r}: verb {name!r} is already a verb of attnlab")
        found[name] = module
    found.update(SHARED_TOOLS)
    return found


class _Parser(argparse.ArgumentParser):
    """Every ``type=float`` option of every verb (sub-parsers are built with this class too)
    refuses nan and inf where it is parsed: ``--alpha nan`` must not reach a search."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register("type", float, finite_float)  # argument groups share this registry


def finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="attnlab", description="The Transformer family: train, decode, inspect.",
                     epilog=_families_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    parser.add_argument("--debug", action="store_true",
                        help="on an error, show the Python traceback (also: ATTNLAB_DEBUG=1)")
    subparsers = parser.add_subparsers(dest="verb", metavar="VERB")
    for name, module_name in verbs().items():
        module = importlib.import_module(module_name)
        sub = subparsers.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
        _remember_parser(sub)
    return parser


def _families_epilog() -> str:
    """The families and the verbs each adds, for ``attnlab --help``."""
    from attnlab.families import families

    lines = ["families (attnlab train TASK; attnlab evaluate --model DIR scores any of them):"]
    for family in families():
        verbs = [f"train {family.task}"] if family.task else []
        verbs += list(family.verbs)
        lines.append(f"  {family.title}: {', '.join(verbs)}")
    for what, field in (("explore (attention in the browser)", "explore"), ("export-onnx", "onnx"),
                        ("attnlab.load(DIR) in Python", "pipeline")):
        having = [family.name for family in families() if getattr(family, field)]
        who = "every family" if len(having) == len(families()) else ", ".join(having)
        lines.append(f"{what}: {who}")
    return "\n".join(lines)


def _remember_parser(parser: argparse.ArgumentParser) -> None:
    """Record in each (sub)parser's defaults which parser it is, so that an unknown option
    is reported with the usage of the verb it was given to (``attnlab train lm``), not the
    top-level usage. Nested parsers' defaults win, so the deepest one is recorded."""
    parser.set_defaults(_parser=parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _remember_parser(child)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("attnlab")
    except PackageNotFoundError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    """Run ``attnlab ARGV``; returns the exit status. Called as the program (``argv`` None:
    the ``attnlab`` script, ``python -m attnlab.cli.main``), a Ctrl-C that comes once the verb
    has finished, while Python shuts down, is ignored: the work is done and said, so the
    process ends with the verb's status, not killed by the signal without a word."""
    if argv is None:
        try:
            return _main(sys.argv[1:])
        finally:
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGINT, signal.SIG_IGN)
    return _main(argv)


def _main(argv: list[str]) -> int:
    argv = list(argv)
    debug = "--debug" in argv  # accepted after the verb too: attnlab translate ... --debug
    argv = [arg for arg in argv if arg != "--debug"]
    if argv and argv[0] == "evaluate":  # evaluate routes by the model directory's family
        from attnlab.cli.evaluate import routed_argv

        argv = routed_argv(argv)
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.verb is None:
        parser.print_help()
        return 0
    phases = sys.modules.get("attnlab.training.phases")
    if phases is not None:  # an earlier verb in this process (tests): its stage is not this one's
        phases.reset_stage()
    try:
        from attnlab.cli.options import apply_threads

        apply_threads(args)  # --threads (options.add_threads_argument) applies to every verb that has it
        plain = not (debug or args.debug or os.environ.get("ATTNLAB_DEBUG", "") not in ("", "0"))
        with _sigterm_raises(), (_warnings_as_lines(args.verb) if plain else contextlib.nullcontext()):
            return args.run(args) or 0
    except KeyboardInterrupt as error:  # Ctrl-C, SIGTERM, or a Trainer's TrainingInterrupted
        with _signals_held():  # a second Ctrl-C does not cut the message short
            print(interrupt_message(error, args, argv), file=sys.stderr, flush=True)
        return 128 + getattr(error, "signal_number", signal.SIGINT)
    except Exception as error:  # noqa: BLE001 - no traceback reaches a user (unless asked for)
        from attnlab.cli.errors import describe_error

        if debug or args.debug or os.environ.get("ATTNLAB_DEBUG", "") not in ("", "0"):
            traceback.print_exc()
        message, code = describe_error(_with_flag_names(error))
        print(f"attnlab {args.verb}: error: {message}", file=sys.stderr)
        return code


@contextlib.contextmanager
def _warnings_as_lines(verb: str):
    """While a verb runs, a warning it prints reaches the user as one line, ``attnlab VERB:
    warning: MESSAGE``, as its errors do, not as Python's source path and code line (which
    ``--debug`` keeps). Only the printed form changes: filters and recorders see the same."""
    previous = warnings.formatwarning
    warnings.formatwarning = lambda message, category, filename, lineno, line=None: \
        f"attnlab {verb}: warning: {message}\n"
    try:
        yield
    finally:
        warnings.formatwarning = previous


class Terminated(KeyboardInterrupt):
    """SIGTERM outside a training loop: unwinds like Ctrl-C (locks released, temporary
    files removed) and exits 143."""

    signal_number = int(signal.SIGTERM)


@contextlib.contextmanager
def _sigterm_raises():
    """While a verb runs, SIGTERM raises :class:`Terminated` instead of killing the process
    without a word (a Trainer installs its own handler while it trains)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_terminated(number, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


@contextlib.contextmanager
def _signals_held():
    """SIGINT and SIGTERM ignored inside the block (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, signal.SIG_IGN) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old if old is not None else signal.SIG_DFL)


def interrupt_message(error: KeyboardInterrupt, args, argv: list[str]) -> str:
    """What an interrupted verb prints: where its work is and the command that resumes it.
    A training verb interrupted outside its training loop (reading data, an auxiliary
    model's set-up, the final scoring) says in which stage (attnlab.training.phases.stage)
    and gives the command that continues: ``--resume`` when a checkpoint is there (which
    scores again what the interrupt cut), else the same command, which starts afresh."""
    verb = "attnlab " + " ".join([args.verb] + ([args.task] if getattr(args, "task", None) else []))
    describe = getattr(error, "describe", None)
    if describe is None:  # interrupted outside a training loop
        how = "terminated (SIGTERM)" if isinstance(error, Terminated) else "interrupted (SIGINT)"
        if args.verb != "train" or not getattr(args, "out", None):
            return f"{verb}: {how}"
        return _continue_outside_training(verb, how, args, argv)
    message = f"{verb}: {describe()}"
    if getattr(error, "checkpoint", None) is None:
        return message
    if hasattr(args, "resume"):
        command = shlex.join(["attnlab", *argv] + ([] if "--resume" in argv else ["--resume"]))
        return message + f"\nto continue, run the same command with --resume (same --out):\n  {command}"
    return message + f"\n({verb} cannot resume a run: run it again into a new --out to start over)"


def _continue_outside_training(verb: str, how: str, args, argv: list[str]) -> str:
    """The message of a training verb interrupted before or after its training loop."""
    from pathlib import Path

    phases = sys.modules.get("attnlab.training.phases")
    stage = (phases.stage() if phases is not None else None) or "while starting"
    checkpoint = None
    if (Path(args.out) / "checkpoints").is_dir():
        from attnlab.training.checkpoint import latest_checkpoint

        checkpoint = latest_checkpoint(Path(args.out) / "checkpoints")
    message = f"{verb}: {how} {stage}"
    if checkpoint is None:
        command = shlex.join(["attnlab", *argv])
        return (message + f"; no checkpoint was written under {args.out}, so nothing was trained to keep\n"
                f"to start again, run the same command:\n  {command}")
    message += f"; the last checkpoint is kept: {checkpoint}"
    if not hasattr(args, "resume"):
        return message + f"\n({verb} cannot resume a run: run it again into a new --out to start over)"
    command = shlex.join(["attnlab", *argv] + ([] if "--resume" in argv else ["--resume"]))
    again = " (it scores the model again)" if "scoring" in stage else ""
    return message + f"\nto continue{again}, run the same command with --resume (same --out):\n  {command}"


# TrainConfig fields -> the flags the training verbs give them from.
TRAIN_CONFIG_FLAGS = {
    "max_steps": "--max-steps", "warmup_steps": "--warmup", "peak_lr": "--lr", "lr_scale": "--lr-scale",
    "validate_every": "--val-every", "checkpoint_every": "--save-every", "max_minutes": "--max-minutes",
    "checkpoint_every_minutes": "--save-every-minutes", "grad_accum_steps": "--grad-accum", "clip_grad_norm": "--clip",
    "log_every": "--log-every", "keep_last": "--keep", "weight_decay": "--weight-decay",
}


def _with_flag_names(error: Exception) -> Exception:
    """A TrainConfig error names its field (``validate_every``); the user typed a flag
    (``--val-every``): say that instead."""
    field = getattr(error, "field", None)
    flag = TRAIN_CONFIG_FLAGS.get(field) if isinstance(error, ValueError) else None
    if flag is None:
        return error
    return ValueError(str(error).replace(field, flag, 1))


if __name__ == "__main__":
    sys.exit(main())
