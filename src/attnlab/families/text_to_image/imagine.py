"""``attnlab imagine --model DIR "prompt" --n 8 --out grid.png``: images from text.

    attnlab imagine --model runs/t2i/model "a red circle above a green triangle" --n 8 --out grid.png

Samples ``--n`` images per prompt (temperature, top-k) through the model's cached decoding
and writes them as one grid PNG (a row per prompt). ``--rerank CAPTIONER_DIR`` draws
``--candidates`` times as many and keeps those a trained captioner scores likeliest to be
described by the prompt (best first). A prompt longer than the model's text
context, or with characters its vocabulary does not know, is refused with a message; an
existing ``--out`` (file or symlink) is kept unless ``--force``.
"""

from __future__ import annotations

HELP = "draw images for text prompts with a trained text-to-image model"


from attnlab.limits import MAX_IMAGES  # noqa: E402  (images drawn in one command: prompts x --n x --candidates)
MAX_CANDIDATES = 64
MAX_SCALE = 16  # as the image verbs' --scale
MAX_GRID_PIXELS = 1 << 26  # 64 Mpixels: a 200 MB canvas


def add_arguments(parser) -> None:
    from attnlab.cli.options import SEED, TEMPERATURE, add_force_argument, add_runtime_arguments, bounded_int

    parser.add_argument("--model", required=True, help="a model directory written by attnlab train text-to-image")
    parser.add_argument("prompts", nargs="+", help="one or more prompts")
    parser.add_argument("--n", type=bounded_int(1, MAX_IMAGES), default=8, metavar="N",
                        help=f"images per prompt (default: 8; at most {MAX_IMAGES:,} images in all)")
    parser.add_argument("--out", required=True, help="the grid PNG to write")
    add_force_argument(parser, "--out")
    parser.add_argument("--temperature", type=TEMPERATURE, default=1.0, metavar="T", help="(default: 1.0)")
    parser.add_argument("--top-k", type=bounded_int(0), default=32, metavar="K",
                        help="(default: 32; 0: the whole codebook)")
    parser.add_argument("--scale", type=bounded_int(1, MAX_SCALE), default=4, metavar="S",
                        help=f"pixels per image pixel in the PNG, 1 to {MAX_SCALE} (default: 4)")
    parser.add_argument("--seed", type=SEED, default=0)
    parser.add_argument("--rerank", metavar="CAPTIONER_DIR",
                        help="draw --candidates times as many images and keep the --n that this trained captioner "
                             "finds likeliest to be described by the prompt (CLIP-style re-ranking)")
    parser.add_argument("--candidates", type=bounded_int(1, MAX_CANDIDATES), metavar="C",
                        help=f"with --rerank: images drawn per kept one, 1 to {MAX_CANDIDATES} (default: 4)")
    add_runtime_arguments(parser)


def run(args) -> int:
    from attnlab.cli.options import resolve_device
    from attnlab.files import check_output_file
    from attnlab.families.text_to_image.task import imagine, load_text_to_image, save_grid

    if args.candidates is not None and not args.rerank:
        raise ValueError("--candidates is used only with --rerank: add --rerank CAPTIONER_DIR or drop --candidates")
    candidates = args.candidates or 4
    drawn = len(args.prompts) * args.n * (candidates if args.rerank else 1)
    if drawn > MAX_IMAGES:
        what = f"{len(args.prompts)} prompt(s) x --n {args.n}" + (f" x --candidates {candidates}" if args.rerank else "")
        raise ValueError(f"{what} = {drawn:,} images to draw; at most {MAX_IMAGES:,} in one command")
    out = check_output_file(args.out, force=args.force, flag="--out", suffixes=(".png",))
    device = resolve_device(args.device)
    model, vqvae, tokenizer = load_text_to_image(args.model, device)
    side = vqvae.config.image_size + 2  # save_grid's 2-pixel gaps
    pixels = (args.n * side + 2) * (len(args.prompts) * side + 2) * args.scale ** 2
    if pixels > MAX_GRID_PIXELS:
        raise ValueError(f"--n {args.n} x {len(args.prompts)} prompt(s) at --scale {args.scale} make a "
                         f"{pixels:,}-pixel PNG; at most {MAX_GRID_PIXELS:,}: lower --scale or --n")
    rerank = None
    if args.rerank:
        from attnlab.tasks.captioning import load_captioner

        captioner, caption_tokenizer, _ = load_captioner(args.rerank, device, flag="--rerank")
        rerank = (captioner, caption_tokenizer)
    images = imagine(model, vqvae, tokenizer, args.prompts, n=args.n, temperature=args.temperature,
                     top_k=args.top_k or None, seed=args.seed, rerank=rerank, candidates=candidates)
    save_grid(images, out, columns=args.n, scale=args.scale)
    print(out)
    return 0
