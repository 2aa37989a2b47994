"""``attnlab imagine --model DIR "prompt" --n 8 --out grid.png``: images from text.

    attnlab imagine --model runs/t2i/model "a red circle above a green triangle" --n 8 --out grid.png

Samples ``--n`` images per prompt (temperature, top-k) through the model's cached decoding
and writes them as one grid PNG (a row per prompt). ``--rerank CAPTIONER_DIR`` draws
``--candidates`` times as many and keeps those a trained captioner scores likeliest to be
described by the prompt (best first). A prompt longer than the model's text
context, or with characters its vocabulary does not know, is refused with a message.
"""

from __future__ import annotations

HELP = "draw images for text prompts with a trained text-to-image model"


def add_arguments(parser) -> None:
    from attnlab.cli.options import add_runtime_arguments

    parser.add_argument("--model", required=True, help="a model directory written by attnlab train text-to-image")
    parser.add_argument("prompts", nargs="+", help="one or more prompts")
    parser.add_argument("--n", type=int, default=8, help="images per prompt (default: 8)")
    parser.add_argument("--out", required=True, help="the grid PNG to write")
    parser.add_argument("--temperature", type=float, default=1.0, help="(default: 1.0)")
    parser.add_argument("--top-k", type=int, default=32, help="(default: 32; 0: the whole codebook)")
    parser.add_argument("--scale", type=int, default=4, help="pixels per image pixel in the PNG (default: 4)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rerank", metavar="CAPTIONER_DIR",
                        help="draw --candidates times as many images and keep the --n that this trained captioner "
                             "finds likeliest to be described by the prompt (CLIP-style re-ranking)")
    parser.add_argument("--candidates", type=int, default=4, help="with --rerank: images drawn per kept one (default: 4)")
    add_runtime_arguments(parser)


def run(args) -> int:
    from pathlib import Path

    from attnlab.cli.options import resolve_device
    from attnlab.tasks.text_to_image import imagine, load_text_to_image, save_grid

    if args.n < 1 or args.scale < 1 or args.top_k < 0:
        raise ValueError("--n and --scale must be at least 1, --top-k at least 0")
    if args.temperature <= 0:
        raise ValueError(f"--temperature={args.temperature} must be > 0")
    out = Path(args.out)
    if out.suffix.lower() != ".png":
        raise ValueError(f"--out {out}: the grid is written as PNG; give a .png name")
    if args.candidates < 1:
        raise ValueError(f"--candidates={args.candidates} must be at least 1")
    device = resolve_device(args.device)
    model, vqvae, tokenizer = load_text_to_image(args.model, device)
    rerank = None
    if args.rerank:
        from attnlab.tasks.caption import load_captioner

        captioner, caption_tokenizer, _ = load_captioner(args.rerank, device)
        rerank = (captioner, caption_tokenizer)
    images = imagine(model, vqvae, tokenizer, args.prompts, n=args.n, temperature=args.temperature,
                     top_k=args.top_k or None, seed=args.seed, rerank=rerank, candidates=args.candidates)
    save_grid(images, out, columns=args.n, scale=args.scale)
    print(out)
    return 0
