"""``attnlab generate-music``: continue a primer (or start from nothing) with a Music Transformer.

    attnlab generate-music --model runs/bach/model --primer theme.mid --length 1024 --out out.mid
    attnlab generate-music --model runs/jsb/model --primer jsb-valid:0 --length 512 --top-k 8 --out chorale.mid

Writes ``OUT`` (MIDI: the primer and its continuation), ``OUT`` with ``.png`` (a piano roll,
the primer's end marked) and, where FluidSynth and a General MIDI soundfont are installed
(``apt-get install fluidsynth fluid-soundfont-gm``), ``OUT`` with ``.wav``; otherwise it says
how to get them. Generation is ``attnlab.generation.generate`` (prefill + cached steps); it
stops at the END token or after ``--length`` tokens. Existing files are replaced only with
``--force``.
"""

from __future__ import annotations

HELP = "generate music (MIDI + piano-roll PNG + WAV with fluidsynth) with a Music Transformer"


def add_arguments(parser) -> None:
    from attnlab.cli.options import add_force_argument, add_runtime_arguments, bounded_int

    parser.add_argument("--model", required=True, help="Music Transformer directory (attnlab train music)")
    parser.add_argument("--primer", help="a MIDI file (performance-event models), or jsb-valid:N (JSB models: the "
                                         "start of validation chorale N); default: start from nothing")
    parser.add_argument("--primer-steps", type=bounded_int(1, 2**20), default=16, metavar="N",
                        help="JSB primer: how many 16th-note steps of the chorale (default: 16)")
    parser.add_argument("--primer-tokens", type=bounded_int(1, 2**24), default=512, metavar="N",
                        help="MIDI primer: keep its last N events (default: 512)")
    from attnlab.cli.options import add_data_dir_argument

    add_data_dir_argument(parser, help="where named data sets live (for jsb-valid:N primers; default: where the "
                                       "model's training data was, else $ATTNLAB_DATA)")
    parser.add_argument("--length", type=bounded_int(1, 2**24), default=512, metavar="N",
                        help="tokens to generate (default: 512)")
    from attnlab.cli.options import SEED, TEMPERATURE, bounded_float

    parser.add_argument("--temperature", type=TEMPERATURE, default=1.0, metavar="T",
                        help="above 0, at most 100 (default: 1.0)")
    parser.add_argument("--top-k", type=bounded_int(1), metavar="K", help="sample among the k most probable tokens")
    parser.add_argument("--top-p", type=bounded_float(0.0, 1.0), metavar="P", help="nucleus sampling, in (0, 1]")
    parser.add_argument("--seed", type=SEED, help="seed for reproducible sampling")
    parser.add_argument("--out", required=True, help="output MIDI file (.mid); the PNG and WAV go beside it")
    parser.add_argument("--no-audio", action="store_true", help="do not render a WAV")
    parser.add_argument("--sample-rate", type=int, default=44100, help="WAV sample rate in Hz (default: 44100)")
    add_force_argument(parser, "the MIDI, PNG and WAV files")
    add_runtime_arguments(parser)
    from attnlab.cli.options import add_decode_compile_argument

    add_decode_compile_argument(parser)


def run(args) -> int:
    import sys

    from attnlab.cli.options import apply_threads, decode_compile, resolve_device
    from attnlab.data.music import END, describe_notes, seconds, write_midi
    from attnlab.files import check_output_file
    from attnlab.generation import generate
    from attnlab.families.music.task import load_music_model, primer_tokens, tokens_to_notes
    from attnlab.families.music.figures import SYNTH_HINT, find_synthesizer, piano_roll_png, render_wav

    say = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    if not 8000 <= args.sample_rate <= 192000:
        raise ValueError(f"--sample-rate={args.sample_rate} must be within 8000..192000 Hz")
    out = check_output_file(args.out, force=args.force, flag="--out", suffixes=(".mid", ".midi"))
    for beside in [out.with_suffix(".png")] + ([] if args.no_audio else [out.with_suffix(".wav")]):
        check_output_file(beside, force=args.force, flag="--out (the file beside it)")
    apply_threads(args)
    device = resolve_device(args.device)
    model = load_music_model(args.model, device=device)
    encoding = model.config.encoding
    prompt = primer_tokens(encoding, args.primer, data_dir=args.data_dir or _recorded_jsb_dir(args.model),
                           primer_steps=args.primer_steps, max_tokens=args.primer_tokens)
    if len(prompt) + args.length > model.config.max_positions:
        raise ValueError(f"primer ({len(prompt)} tokens) + --length {args.length} exceeds the model's "
                         f"max_positions={model.config.max_positions}")
    new = generate(model, [prompt], max_new_tokens=args.length, temperature=args.temperature, top_k=args.top_k,
                   top_p=args.top_p, seed=args.seed, stop_ids=[END], compile=decode_compile(args))[0]
    primer_notes = tokens_to_notes(encoding, prompt)
    notes = tokens_to_notes(encoding, prompt + new)
    write_midi(notes, out)
    say(f"{len(new)} tokens generated after a primer of {len(prompt) - 1}: {describe_notes(notes)} -> {out}")
    png = piano_roll_png(notes, out.with_suffix(".png"), primer_seconds=seconds(primer_notes) if args.primer else None,
                         title=f"{_model_name(args.model)}: {len(new)} generated tokens"
                               + (f" after {args.primer}" if args.primer else ""))
    say(f"piano roll -> {png}")
    if not args.no_audio:
        if find_synthesizer() is None:
            say(SYNTH_HINT)
        else:
            say(f"audio -> {render_wav(out, out.with_suffix('.wav'), sample_rate=args.sample_rate)}")
    print(out)
    return 0


def _recorded_jsb_dir(model_dir: str) -> str | None:
    """Where the model's JSB data was at training time (its music.json), when the file is
    still there; None: the default lookup ($ATTNLAB_DATA, ~/.cache/attnlab/data)."""
    from attnlab.data.music import jsb_path
    from attnlab.families.music.task import recorded_data

    record = recorded_data(model_dir)
    if record.get("data") == "jsb" and record.get("data_dir") and jsb_path(record["data_dir"]).is_file():
        return record["data_dir"]
    return None


def _model_name(directory: str) -> str:
    """A run's name for titles: ``runs/jsb/model`` -> ``jsb``."""
    from pathlib import Path

    path = Path(directory).resolve()
    return path.parent.name if path.name == "model" and path.parent.name else path.name
