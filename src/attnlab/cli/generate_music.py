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
    from attnlab.cli.options import add_runtime_arguments

    parser.add_argument("--model", required=True, help="Music Transformer directory (attnlab train music)")
    parser.add_argument("--primer", help="a MIDI file (performance-event models), or jsb-valid:N (JSB models: the "
                                         "start of validation chorale N); default: start from nothing")
    parser.add_argument("--primer-steps", type=int, default=16,
                        help="JSB primer: how many 16th-note steps of the chorale (default: 16)")
    parser.add_argument("--primer-tokens", type=int, default=512,
                        help="MIDI primer: keep its last N events (default: 512)")
    parser.add_argument("--data-dir", help="where the JSB data lives (for jsb-valid:N primers)")
    parser.add_argument("--length", type=int, default=512, help="tokens to generate (default: 512)")
    parser.add_argument("--temperature", type=float, default=1.0, help="(default: 1.0)")
    parser.add_argument("--top-k", type=int, help="sample among the k most probable tokens")
    parser.add_argument("--top-p", type=float, help="nucleus sampling")
    parser.add_argument("--seed", type=int, help="seed for reproducible sampling")
    parser.add_argument("--out", required=True, help="output MIDI file (.mid); the PNG and WAV go beside it")
    parser.add_argument("--no-audio", action="store_true", help="do not render a WAV")
    parser.add_argument("--sample-rate", type=int, default=44100, help="WAV sample rate in Hz (default: 44100)")
    parser.add_argument("--force", action="store_true", help="replace existing output files")
    add_runtime_arguments(parser)


def run(args) -> int:
    import sys
    from pathlib import Path

    import torch

    from attnlab.cli.options import resolve_device
    from attnlab.data.music import END, describe_notes, seconds, write_midi
    from attnlab.generation import generate
    from attnlab.tasks.music import load_music_model, primer_tokens, tokens_to_notes
    from attnlab.viz.music import SYNTH_HINT, find_synthesizer, piano_roll_png, render_wav

    say = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    if args.length < 1:
        raise ValueError(f"--length={args.length} must be at least 1")
    if not 8000 <= args.sample_rate <= 192000:
        raise ValueError(f"--sample-rate={args.sample_rate} must be within 8000..192000 Hz")
    if args.temperature <= 0:
        raise ValueError(f"--temperature={args.temperature} must be > 0")
    if args.top_k is not None and args.top_k < 1:
        raise ValueError(f"--top-k={args.top_k} must be at least 1")
    out = Path(args.out)
    if out.suffix.lower() not in (".mid", ".midi"):
        raise ValueError(f"--out {out}: give a .mid file name (the .png and .wav are written beside it)")
    if not out.parent.is_dir():
        raise ValueError(f"--out {out}: the directory {out.parent} does not exist")
    outputs = [out, out.with_suffix(".png")] + ([] if args.no_audio else [out.with_suffix(".wav")])
    existing = [str(p) for p in outputs if p.exists() or p.is_symlink()]
    if existing and not args.force:
        raise ValueError(f"--out: {', '.join(existing)} exist(s); pass --force to replace")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    model = load_music_model(args.model, device=device)
    encoding = model.config.encoding
    prompt = primer_tokens(encoding, args.primer, data_dir=args.data_dir, primer_steps=args.primer_steps,
                           max_tokens=args.primer_tokens)
    if len(prompt) + args.length > model.config.max_positions:
        raise ValueError(f"primer ({len(prompt)} tokens) + --length {args.length} exceeds the model's "
                         f"max_positions={model.config.max_positions}")
    new = generate(model, [prompt], max_new_tokens=args.length, temperature=args.temperature, top_k=args.top_k,
                   top_p=args.top_p, seed=args.seed, stop_ids=[END])[0]
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


def _model_name(directory: str) -> str:
    """A run's name for titles: ``runs/jsb/model`` -> ``jsb``."""
    from pathlib import Path

    path = Path(directory).resolve()
    return path.parent.name if path.name == "model" and path.parent.name else path.name
