"""``attnlab train music``: a Music Transformer on JSB Chorales, Bach or your MIDI files.

    attnlab train music --data jsb --out runs/jsb-relative                    # the paper's JSB setup
    attnlab train music --data jsb --preset music_jsb_baseline --out runs/jsb-absolute
    attnlab train music --data bach --preset music_performance_small --out runs/bach   # needs music21
    attnlab train music --data my_midi_folder/ --out runs/mine

The final model goes to ``OUT/model`` (config.json with the token encoding,
model.safetensors, music.json: where its data came from), usable by
``attnlab generate-music --model OUT/model`` and
``attnlab evaluate-music --model OUT/model``; ``OUT/checkpoints`` holds resumable
checkpoints and ``OUT/metrics.jsonl`` the log (``valid_nll`` in nats per token over
windows of the validation stream; ``evaluate-music`` scores each piece exactly).
"""

from __future__ import annotations

from attnlab.cli.training_run import add_training_arguments, run_training
from attnlab.cli.window_runs import WindowTask

HELP = "train a Music Transformer (relative attention) on JSB Chorales, Bach chorales or MIDI files into OUT/model"


class MusicTask(WindowTask):
    """``attnlab train music`` on the lifecycle (:mod:`attnlab.cli.training_run`)."""

    name = family = "music"
    betas, eps = (0.9, 0.98), 1e-9
    adaptable = {"max_positions": "the context extended (relative or sinusoidal positions only)"}

    def add_arguments(self, parser) -> None:
        from attnlab.cli.options import DATA_DIR_HELP, add_data_dir_argument, bounded_int
        from attnlab.cli.window_runs import add_run_arguments

        parser.add_argument("--data", required=True,
                            help="jsb (JSB Chorales), bach (music21's chorales, pip install music21) or a directory "
                                 "of .mid files")
        add_data_dir_argument(parser, help=DATA_DIR_HELP + "; JSB is read from DATA_DIR/jsb_chorales/")
        parser.add_argument("--preset", help="model preset (default: music_jsb_relative for jsb, "
                                             "music_performance_small otherwise)")
        parser.add_argument("--context", type=bounded_int(1, 2**24), default=None, metavar="N",
                            help="training window in tokens (default: 256 for jsb, 512 for performance events)")
        parser.add_argument("--no-augment", action="store_true",
                            help="performance data: no transpositions / time stretches")
        parser.add_argument("--transpose", type=int, default=0, metavar="K",
                            help="jsb: also train on every chorale transposed by ±1..K semitones (default: 0, none)")
        add_run_arguments(parser, set_example="dropout=0.2", batch_size=16, max_steps=5000, lr=1e-3, warmup=200)

    def loss(self):
        from attnlab.families.music.task import lm_loss

        return lm_loss

    def data(self, run):
        from attnlab.cli.window_runs import WindowData
        from attnlab.families.music.task import load_music_data, music_stream

        args = run.args
        data = load_music_data(args.data, data_dir=args.data_dir, augment=not args.no_augment,
                               progress=not args.no_progress, jsb_transpose=args.transpose)
        context = args.context or (256 if data.encoding == "jsb" else 512)
        windows = WindowData(music_stream(data.train), music_stream(data.valid), context, data.description,
                             extra={"data": data})
        return windows

    def _preset(self, run, windows) -> str:
        encoding = windows.extra["data"].encoding
        return run.args.preset or ("music_jsb_relative" if encoding == "jsb" else "music_performance_small")

    def run_info(self, run, windows):
        return {"data": windows.extra["data"].fingerprint, "preset": self._preset(run, windows), "set": run.args.set,
                "context": windows.context}

    def config(self, run, windows):
        overrides = {}
        if run.start is not None and windows.context + 1 > run.start.model.config.max_positions:
            overrides["max_positions"] = windows.context + 1
        return self._preset(run, windows), overrides

    def check_config(self, run, config, windows):
        from attnlab.cli.options import check_training_memory, sizing_flags

        args, data = run.args, windows.extra["data"]
        if getattr(config, "encoding", None) != data.encoding:
            what = f"--init {args.init}" if run.start is not None else f"--preset {self._preset(run, windows)}"
            raise ValueError(f"{what}: its token encoding is {getattr(config, 'encoding', None)!r}, but --data "
                             f"{args.data} is {data.encoding!r} (JSB presets: music_jsb_*; performance: "
                             "music_performance_small)")
        if run.start is not None and "max_positions" in config.to_dict() and config.positional == "learned" \
                and config.max_positions > run.start.model.config.max_positions:
            raise ValueError(f"--context {windows.context}: --init's model has learned positions up to "
                             f"{run.start.model.config.max_positions}; choose --context below that")
        if windows.context + 1 > config.max_positions:
            raise ValueError(f"--context={windows.context} needs max_positions > {windows.context}; the preset has "
                             f"{config.max_positions}")
        for name, ids in (("training", windows.train_ids), ("validation", windows.valid_ids)):
            if len(ids) <= windows.context + 1:
                raise ValueError(f"--data {args.data}: the {name} stream has {len(ids)} tokens, too short for "
                                 f"windows of --context {windows.context}")
        check_training_memory(config, batch_size=args.batch_size, length=windows.context,
                              flag=sizing_flags(args, "--context", "--set", "--batch-size"))

    def describe(self, run, model, windows):
        import sys

        from attnlab.cli.options import describe_device

        config, args = model.config, run.args
        print(f"data: {windows.description}; {len(windows.train_ids):,d} training and {len(windows.valid_ids):,d} "
              "validation tokens", file=sys.stderr, flush=True)
        print(f"model: {args.init or self._preset(run, windows)} ({config.num_layers} layers, d_model "
              f"{config.d_model}, attention {config.attention}, positions {config.positional}), "
              f"{model.num_parameters():,d} parameters; windows of {windows.context} tokens, {args.batch_size} per "
              f"update; device: {describe_device(run.device)}" + (", bf16 autocast" if run.bf16 else ""),
              file=sys.stderr, flush=True)

    def save(self, run, model, trainer):
        from attnlab.families.music.task import MUSIC_FILE, data_record
        from attnlab.training.outputs import save_run_model

        files = {**run.files, MUSIC_FILE: data_record(run.args.data, run.args.data_dir)}
        return save_run_model(model, run.out / "model", extra_files=files, replace=run.args.force)


TASK = MusicTask()


def add_arguments(parser) -> None:
    add_training_arguments(parser, TASK)


def run(args) -> int:
    return run_training(TASK, args)
