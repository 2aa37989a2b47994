"""``attnlab caption --model DIR image.png ...``: caption images with a trained captioner.

    attnlab caption --model runs/caption-scenes/model a.png b.png
    attnlab caption --model runs/caption-scenes/model a.png --attention-dir figures/
    attnlab caption --model runs/caption-scenes/model a.png b.png --compile aot

Prints one line per image (``file<TAB>caption``): beam search, or with ``--sample`` words
drawn with ``--temperature`` / ``--top-k``. Images are read with Pillow, converted
to RGB and resized to the model's image size. ``--attention-dir`` also writes a PNG per
image of each generated word's cross-attention over the image; an existing figure there is
kept (refused) unless ``--force``. ``--compile aot`` decodes through the decoder's step
compiled ahead of time (:mod:`attnlab.generation.aot`; built once per model (its structure
and, on the CPU, its weights) and beam size, or beforehand by ``attnlab compile --model
DIR``), beam search, greedy or sampled alike.
"""

from __future__ import annotations

HELP = "caption image files with a trained captioner (and draw where each word looked)"

from attnlab.limits import MAX_BEAM  # noqa: E402,F401  (beam search keeps 2 x beam hypotheses per image)


def add_arguments(parser) -> None:
    from attnlab.cli.options import (SEED, TEMPERATURE, add_decode_compile_argument, add_force_argument,
                                     add_runtime_arguments, bounded_int)

    parser.add_argument("--model", required=True, help="a model directory written by attnlab train caption")
    parser.add_argument("images", nargs="+", help="image files (PNG, JPEG, ...)")
    parser.add_argument("--beam", type=bounded_int(1, MAX_BEAM), metavar="K",
                        help=f"beam size, 1 to {MAX_BEAM} (1: greedy; default: 3; not with --sample)")
    parser.add_argument("--sample", action="store_true", help="sample each word instead of beam search")
    parser.add_argument("--temperature", type=TEMPERATURE, metavar="T", help="with --sample (default: 1.0)")
    parser.add_argument("--top-k", type=bounded_int(1), metavar="K",
                        help="with --sample: draw among the k likeliest words")
    parser.add_argument("--seed", type=SEED, help="with --sample (default: 0)")
    parser.add_argument("--attention-dir", help="write DIR/<image name>.png: each word's attention over the image")
    add_force_argument(parser, "existing attention figures")
    add_decode_compile_argument(parser)
    add_runtime_arguments(parser)


def run(args) -> int:
    from pathlib import Path

    import torch

    from attnlab.cli.options import decode_compile, resolve_device
    from attnlab.data.images import read_image
    from attnlab.families.caption.task import generate_captions, load_captioner, sample_captions

    if args.sample and args.beam is not None:
        raise ValueError("--beam is for beam search and --sample draws words instead: give one of them")
    if not args.sample:
        for flag, value in (("--top-k", args.top_k), ("--temperature", args.temperature), ("--seed", args.seed)):
            if value is not None:
                raise ValueError(f"{flag} is used only with --sample (beam search ignores it): add --sample "
                                 f"or drop {flag}")
    names = [Path(p).stem for p in args.images]
    if args.attention_dir:
        from attnlab.files import check_output_files

        check_output_files(args.attention_dir, [f"{name}.png" for name in names], force=args.force,
                           flag="--attention-dir")
    model, tokenizer, _ = load_captioner(args.model, resolve_device(args.device))
    size = model.config.image_size
    images = torch.stack([read_image(path, image_size=size, channels=3) for path in args.images])
    if args.sample:
        captions = sample_captions(model, tokenizer, images, temperature=args.temperature or 1.0,
                                   top_k=args.top_k, seed=args.seed or 0, compile=decode_compile(args))
    else:
        captions = generate_captions(model, tokenizer, images, beam_size=args.beam or model.default_beam,
                                     compile=decode_compile(args))
    if args.attention_dir:
        from attnlab.families.caption.figures import write_caption_figures

        Path(args.attention_dir).mkdir(parents=True, exist_ok=True)
        write_caption_figures(model, tokenizer, images, captions, args.attention_dir, names=names)
    for path, caption in zip(args.images, captions):
        print(f"{path}\t{caption.text}")
    return 0
