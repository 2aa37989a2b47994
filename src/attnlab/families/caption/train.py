"""``attnlab train caption``: a Captioner (image encoder + Transformer decoder) with the shared Trainer.

    attnlab train caption --data scenes --max-minutes 20 --out runs/caption-scenes
    attnlab train caption --data coco:path/to/coco --image-size 64 --out runs/coco
    attnlab train caption --data flickr:path/to/Flickr8k --image-size 64 --out runs/flickr

A sentencepiece vocabulary from the training captions, teacher forcing with label
smoothing, AdamW with warm-up + cosine decay, checkpoints and exact ``--resume``. At the
end the test split is captioned by beam search and scored (BLEU-4, CIDEr; on scenes also
the grounding score, and seen/unseen compositions apart). Writes ``OUT/model``
(config.json, model.safetensors, tokenizer.model, caption.json), ``OUT/checkpoints``,
``OUT/metrics.jsonl`` and ``OUT/evaluation/results.json``.
"""

from __future__ import annotations

import sys

HELP = "train an image captioner on scenes (synthetic), coco:DIR or flickr:DIR"


def add_arguments(parser) -> None:
    from attnlab.families.caption.caption import MAX_BEAM
    from attnlab.cli.options import bounded_int

    data = parser.add_argument_group("data")
    data.add_argument("--data", default="scenes",
                      help="scenes (32x32 synthetic), scenes64, emoji[:DIR] (Twemoji by their Unicode names), "
                           "coco:DIR or flickr:DIR (default: scenes)")
    data.add_argument("--train-images", type=int, help="scenes: this many training images (default: 8000)")
    data.add_argument("--image-size", type=bounded_int(8, 512), default=32, metavar="S",
                      help="emoji/coco/flickr: images resized to this square, 8 to 512 (default: 32)")
    data.add_argument("--vocab-size", type=int, default=1000,
                      help="sentencepiece vocabulary, at most (fewer when the captions allow fewer; default: 1000)")
    from attnlab.cli.options import add_schedule_arguments, add_set_argument

    model = parser.add_argument_group("model and optimisation")
    model.add_argument("--preset", default="captioner_scenes", help="captioner preset (default: captioner_scenes)")
    add_set_argument(model, "image_encoder=cnn")
    model.add_argument("--batch-size", type=int, default=64, help="captions per update (default: 64)")
    add_schedule_arguments(model, max_steps=4000, lr=1e-3, warmup=200)
    model.add_argument("--label-smoothing", type=float, default=0.1, help="(default: 0.1)")
    model.add_argument("--beam", type=bounded_int(1, MAX_BEAM), default=3, metavar="K",
                       help=f"beam size for the final test captions, 1 to {MAX_BEAM} (default: 3)")
    from attnlab.cli.options import add_run_group

    add_run_group(parser)


def run(args) -> int:
    import torch

    from attnlab.cli.options import checkpoint_minutes, options_from_args, parse_overrides, resolve_device
    from attnlab.cli.options import check_positive
    from attnlab.families.caption.task import CaptionTrainOptions, train_captioner

    check_positive(args, ("batch_size", "max_steps", "image_size", "threads", "train_images", "beam", "vocab_size"))
    from attnlab.cli.options import require_packages

    require_packages("train caption", "pycocoevalcap")  # the test split is scored at the end
    if not 0.0 <= args.label_smoothing < 1.0:
        raise ValueError(f"--label-smoothing={args.label_smoothing} must be in [0, 1)")
    if args.threads:
        torch.set_num_threads(args.threads)
    say = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    options = options_from_args(
        CaptionTrainOptions, args, model_overrides=parse_overrides(args.set), beam_size=args.beam,
        val_every=args.val_every or None, save_every=args.save_every or None, device=resolve_device(args.device),
        save_every_minutes=checkpoint_minutes(args),
        progress_bar=not args.no_progress, log=say)
    model_dir, results = train_captioner(options)
    say(format_results(results))
    print(model_dir)
    return 0


def format_results(results: dict) -> str:
    """A few lines: BLEU-4, CIDEr (and grounding), overall and on seen/unseen compositions."""
    def line(name, r):
        text = f"{name}: BLEU-4 {100 * r['bleu4']:.2f}, CIDEr {r['cider']:.3f}"
        if "meteor" in r:
            text += f", METEOR {100 * r['meteor']:.2f}"
        if r.get("grounding") is not None:
            text += (f", grounding {r['grounding']:.3f} over {r['object_words']} object words "
                     f"(uniform attention: {r['grounding_uniform']:.3f})")
        return text + (f" ({r['images']} images)" if "images" in r else "")

    lines = [line(f"{results.get('data')} {results.get('split')}", results)]
    lines += [line(f"  {part}", results[part]) for part in ("seen", "unseen") if part in results]
    return "\n".join(lines)
