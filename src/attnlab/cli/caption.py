"""``attnlab caption --model DIR image.png ...``: caption images with a trained captioner.

    attnlab caption --model runs/caption-scenes/model a.png b.png
    attnlab caption --model runs/caption-scenes/model a.png --attention-dir figures/

Prints one line per image (``file<TAB>caption``): beam search, or with ``--sample`` words
drawn with ``--temperature`` / ``--top-k``. Images are read with Pillow, converted
to RGB and resized to the model's image size. ``--attention-dir`` also writes a PNG per
image of each generated word's cross-attention over the image.
"""

from __future__ import annotations

HELP = "caption image files with a trained captioner (and draw where each word looked)"


def add_arguments(parser) -> None:
    from attnlab.cli.options import add_runtime_arguments

    parser.add_argument("--model", required=True, help="a model directory written by attnlab train caption")
    parser.add_argument("images", nargs="+", help="image files (PNG, JPEG, ...)")
    parser.add_argument("--beam", type=int, default=3, help="beam size (1: greedy; default: 3)")
    parser.add_argument("--sample", action="store_true", help="sample each word instead of beam search")
    parser.add_argument("--temperature", type=float, default=1.0, help="with --sample (default: 1.0)")
    parser.add_argument("--top-k", type=int, help="with --sample: draw among the k likeliest words")
    parser.add_argument("--seed", type=int, default=0, help="with --sample (default: 0)")
    parser.add_argument("--attention-dir", help="write DIR/<image name>.png: each word's attention over the image")
    add_runtime_arguments(parser)


def run(args) -> int:
    from pathlib import Path

    import torch

    from attnlab.cli.options import resolve_device
    from attnlab.data.images import read_image
    from attnlab.tasks.caption import generate_captions, load_captioner, sample_captions

    if args.beam < 1:
        raise ValueError(f"--beam={args.beam} must be at least 1")
    model, tokenizer, _ = load_captioner(args.model, resolve_device(args.device))
    size = model.config.image_size
    images = torch.stack([read_image(path, image_size=size, channels=3) for path in args.images])
    if args.sample:
        if args.top_k is not None and args.top_k < 1:
            raise ValueError(f"--top-k={args.top_k} must be at least 1")
        captions = sample_captions(model, tokenizer, images, temperature=args.temperature, top_k=args.top_k,
                                   seed=args.seed)
    else:
        captions = generate_captions(model, tokenizer, images, beam_size=args.beam)
    if args.attention_dir:
        from attnlab.viz.caption import write_caption_figures

        write_caption_figures(model, tokenizer, images, captions, args.attention_dir,
                              names=[Path(p).stem for p in args.images])
    for path, caption in zip(args.images, captions):
        print(f"{path}\t{caption.text}")
    return 0
