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

HELP = "train a Music Transformer (relative attention) on JSB Chorales, Bach chorales or MIDI files into OUT/model"


def add_arguments(parser) -> None:
    from attnlab.cli.options import bounded_int
    from attnlab.cli.window_runs import add_run_arguments

    parser.add_argument("--data", required=True,
                        help="jsb (JSB Chorales), bach (music21's chorales, pip install music21) or a directory of "
                             ".mid files")
    from attnlab.cli.options import DATA_DIR_HELP, add_data_dir_argument

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


def run(args) -> int:
    import sys

    import torch

    import attnlab
    from attnlab.cli.options import check_training_memory, describe_device, parse_overrides, sizing_flags
    from attnlab.cli.window_runs import check_same_run, start_run, window_trainer
    from attnlab.files import OutputLock, refuse_symlinks
    from attnlab.families.music.task import MUSIC_FILE, data_record, lm_loss, load_music_data, music_stream
    from attnlab.training.outputs import save_run_model
    from attnlab.training.phases import budget_plan, budget_report, command_budget, train_within
    from attnlab.training.trainer import TRAINER_OUTPUTS

    budget = command_budget(args.max_minutes)  # the whole command's, from here (reading the data included)
    warmup, device, bf16, out, previous = start_run(args)
    say = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    plan = budget_plan(budget)
    if plan:
        say(plan)
    data = load_music_data(args.data, data_dir=args.data_dir, augment=not args.no_augment,
                           progress=not args.no_progress, jsb_transpose=args.transpose)
    preset = args.preset or ("music_jsb_relative" if data.encoding == "jsb" else "music_performance_small")
    context = args.context or (256 if data.encoding == "jsb" else 512)
    run_info = {"data": data.fingerprint, "preset": preset, "set": args.set, "context": context}
    if previous is not None:
        check_same_run(previous, run_info)
    check_training_memory(attnlab.get_preset(preset, **parse_overrides(args.set)), batch_size=args.batch_size,
                          length=context, flag=sizing_flags(args, "--context", "--set", "--batch-size"))
    torch.manual_seed(args.seed)
    model = attnlab.create_model(preset, **parse_overrides(args.set))
    config = model.config
    if getattr(config, "encoding", None) != data.encoding:
        raise ValueError(f"--preset {preset}: its token encoding is {getattr(config, 'encoding', None)!r}, but "
                         f"--data {args.data} is {data.encoding!r} (JSB presets: music_jsb_*; performance: "
                         "music_performance_small)")
    if context + 1 > config.max_positions:
        raise ValueError(f"--context={context} needs max_positions > {context}; the preset has {config.max_positions}")
    train_ids, valid_ids = music_stream(data.train), music_stream(data.valid)
    for name, ids in (("training", train_ids), ("validation", valid_ids)):
        if len(ids) <= context + 1:
            raise ValueError(f"--data {args.data}: the {name} stream has {len(ids)} tokens, too short for windows "
                             f"of --context {context}")
    say(f"data: {data.description}; {len(train_ids):,d} training and {len(valid_ids):,d} validation tokens")
    model.to(device)
    say(f"model: {preset} ({config.num_layers} layers, d_model {config.d_model}, attention {config.attention}, "
        f"positions {config.positional}), {model.num_parameters():,d} parameters; windows of {context} tokens, "
        f"{args.batch_size} per update; device: {describe_device(device)}" + (", bf16 autocast" if bf16 else ""))
    trainer = window_trainer(args, model, lm_loss, train_ids, valid_ids, context=context, warmup=warmup, bf16=bf16,
                             betas=(0.9, 0.98), eps=1e-9, run_info=run_info)
    # Every option is checked above; nothing is written to OUT before this point.
    with OutputLock(out, purpose="attnlab train music"):
        refuse_symlinks(out, (*TRAINER_OUTPUTS, "model"))
        train_within(trainer, budget, resume=args.resume, say=say)
        model_dir = save_run_model(model, out / "model",
                                   extra_files={MUSIC_FILE: data_record(args.data, args.data_dir)}, replace=args.force)
    say(f"done: {trainer.summary(('loss', 'valid_loss', 'valid_nll'), 'nats per token')}; model -> {model_dir}")
    if budget.limited:
        say(budget_report(budget))
    print(model_dir)
    return 0
