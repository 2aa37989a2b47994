"""``attnlab train text-to-image``: VQ-VAE + attribute reader + a decoder-only TextToImage on scenes.

    attnlab train text-to-image --data scenes --max-minutes 30 --out runs/t2i
    attnlab train text-to-image --data scenes --vqvae runs/t2i/vqvae/model --out runs/t2i-2

Trains the VQ-VAE image tokenizer first (or takes ``--vqvae DIR``), the attribute reader
that scores fidelity on the scenes' reader split, which has every colour-shape pair (or
``--classifier DIR``), then the text-to-image Transformer; then
samples one image per held-out test prompt and reports the VQ-VAE's test PSNR and codebook
usage and the fidelity (objects, colours, shapes, relations; seen and unseen compositions
apart; real test images as the ceiling) in ``OUT/evaluation/results.json``. The model
directory ``OUT/model`` holds the VQ-VAE it needs (``OUT/model/vqvae``):
``attnlab imagine --model OUT/model "a red circle above a green triangle"``.
"""

from __future__ import annotations

import sys

HELP = "train a decoder-only text-to-image model (with its VQ-VAE) on the synthetic scenes"


def add_arguments(parser) -> None:
    from attnlab.cli.options import (RUN_FORCE, SEED, TEMPERATURE, add_device_argument, add_force_argument,
                                     add_threads_argument, bounded_int)

    data = parser.add_argument_group("data")
    data.add_argument("--data", default="scenes", help="scenes (the only set with the truth fidelity needs)")
    data.add_argument("--train-images", type=int, help="this many training scenes (default: 8000)")
    data.add_argument("--vocab-size", type=int, default=1000, help="text vocabulary, at most (default: 1000)")
    parts = parser.add_argument_group("image tokenizer and attribute reader")
    parts.add_argument("--vqvae", help="a trained VQ-VAE model directory (default: train one)")
    parts.add_argument("--vqvae-preset", default="vqvae_scenes", help="(default: vqvae_scenes)")
    parts.add_argument("--vqvae-steps", type=int, default=1500, help="VQ-VAE updates (default: 1500)")
    parts.add_argument("--classifier", help="a trained attribute reader model directory (default: train one)")
    parts.add_argument("--reader-images", type=int,
                       help="train the attribute reader on this many scenes of the reader split (default: 20000)")
    parts.add_argument("--classifier-steps", type=int, default=2000, help="attribute reader updates (default: 2000)")
    from attnlab.cli.options import add_schedule_arguments, add_set_argument

    model = parser.add_argument_group("text-to-image model")
    model.add_argument("--preset", default="text_to_image_scenes", help="(default: text_to_image_scenes)")
    add_set_argument(model, "num_layers=6")
    model.add_argument("--batch-size", type=int, default=64, help="(default: 64)")
    add_schedule_arguments(model, max_steps=4000, lr=1e-3, warmup=200, steps="updates of the text-to-image model")
    model.add_argument("--label-smoothing", type=float, default=0.1, help="(default: 0.1)")
    model.add_argument("--max-minutes", type=float,
                       help="wall-clock budget of the whole command: the VQ-VAE and the attribute reader train on "
                            "20 %% and 15 %% of it, fidelity is scored in the last 10 %%, the text-to-image model "
                            "has the rest")
    evaluation = parser.add_argument_group("evaluation")
    evaluation.add_argument("--eval-prompts", type=int, default=400, help="held-out prompts, half unseen (default: 400)")
    evaluation.add_argument("--temperature", type=TEMPERATURE, default=1.0, metavar="T",
                            help="sampling temperature (default: 1.0)")
    evaluation.add_argument("--top-k", type=bounded_int(1, 1 << 20), default=32, metavar="K",
                            help="sample among the K likeliest tokens (default: 32)")
    run_group = parser.add_argument_group("run")
    add_threads_argument(run_group)
    run_group.add_argument("--seed", type=SEED, default=0)
    run_group.add_argument("--out", required=True, help="output directory")
    run_group.add_argument("--resume", action="store_true",
                           help="continue an interrupted run from its checkpoints (OUT/vqvae, OUT/attributes, "
                                "OUT/checkpoints): the same command plus --resume")
    add_force_argument(run_group, RUN_FORCE)
    run_group.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_device_argument(parser)


def run(args) -> int:
    import torch

    from attnlab.cli.options import options_from_args, parse_overrides, resolve_device
    from attnlab.families.text_to_image.task import TextToImageTrainOptions, train_text_to_image

    for name in ("train_images", "reader_images", "vocab_size", "vqvae_steps", "classifier_steps", "batch_size", "max_steps",
                 "eval_prompts", "top_k", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')}={value} must be at least 1")
    if args.temperature <= 0:
        raise ValueError(f"--temperature={args.temperature} must be > 0")
    if args.threads:
        torch.set_num_threads(args.threads)
    say = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    options = options_from_args(
        TextToImageTrainOptions, args, model_overrides=parse_overrides(args.set), device=resolve_device(args.device),
        progress_bar=not args.no_progress, log=say)
    model_dir, results = train_text_to_image(options)
    say(report(results))
    print(model_dir)
    return 0


def report(results: dict) -> str:
    """The VQ-VAE's PSNR and a fidelity line per composition kind (generated vs real)."""
    vqvae = results["vqvae"]
    cut = vqvae.get("scoring", {}).get("cut_by_budget")
    lines = [f"VQ-VAE test PSNR {vqvae['psnr_test']:.2f} dB, {vqvae['codes_used']} of {vqvae['codebook_size']} "
             "codes used" + (f" (on {vqvae['scoring']['scored']:,d} of {vqvae['scoring']['total']:,d} test images, "
                             "a random sample: the time budget ran out)" if cut else "")]
    scoring = results.get("scoring")
    if scoring and scoring["cut_by_budget"]:
        lines.append(f"fidelity scored on {scoring['scored']:,d} of {scoring['total']:,d} prompts (a random sample: "
                     "the time budget ran out)")
    for part, scores in results["fidelity"].items():
        g, r = scores["generated"], scores["real_test_images"]
        lines.append(f"fidelity ({part} compositions, {g['prompts']} prompts): objects {_pct(g['objects'])} "
                     f"(real {_pct(r['objects'])}), colours {_pct(g['colours'])} (real {_pct(r['colours'])}), "
                     f"shapes {_pct(g['shapes'])} (real {_pct(r['shapes'])}), relations {_pct(g['relations'])} "
                     f"(real {_pct(r['relations'])}), all {_pct(g['all'])} (real {_pct(r['all'])})")
    return "\n".join(lines)


def _pct(value) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"
