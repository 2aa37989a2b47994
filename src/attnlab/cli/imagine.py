"""``attnlab imagine --model DIR "prompt" --n 8 --out grid.png``: images from text.

    attnlab imagine --model runs/t2i/model "a red circle above a green triangle" --n 8 --out grid.png

Samples ``--n`` images per prompt (temperature, top-k) through the model's cached decoding
and writes them as one grid PNG (a row per prompt). A prompt longer than the model's text
context, or with characters its vocabulary does not know, is refused with a message.
"""

from __future__ import annotations

HELP = "draw images for text prompts with a trained text-to-image model"


def add_arguments(parser) -> None:
    from attnlab.cli.options import add_device_argument

    parser.add_argument("--model", required=True, help="a model directory written by attnlab train text-to-image")
    parser.add_argument("prompts", nargs="+", help="one or more prompts")
    parser.add_argument("--n", type=int, default=8, help="images per prompt (default: 8)")
    parser.add_argument("--out", required=True, help="the grid PNG to write")
    parser.add_argument("--temperature", type=float, default=1.0, help="(default: 1.0)")
    parser.add_argument("--top-k", type=int, default=32, help="(default: 32; 0: the whole codebook)")
    parser.add_argument("--scale", type=int, default=4, help="pixels per image pixel in the PNG (default: 4)")
    parser.add_argument("--seed", type=int, default=0)
    add_device_argument(parser)


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
    model, vqvae, tokenizer = load_text_to_image(args.model, resolve_device(args.device))
    images = imagine(model, vqvae, tokenizer, args.prompts, n=args.n, temperature=args.temperature,
                     top_k=args.top_k or None, seed=args.seed)
    save_grid(images, out, columns=args.n, scale=args.scale)
    print(out)
    return 0
