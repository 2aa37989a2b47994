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

import json
import sys
import time
from pathlib import Path

from attnlab.cli.training_run import TrainingTask, add_training_arguments, option_given, run_training

HELP = "train an image captioner on scenes (synthetic), coco:DIR or flickr:DIR"


class CaptionTask(TrainingTask):
    """``attnlab train caption`` on the lifecycle (:mod:`attnlab.cli.training_run`): a vocabulary
    from the training captions (or --init's), a Captioner, the shared Trainer (AdamW, warm-up +
    cosine, label smoothing), the test split captioned and scored at the end."""

    name, family = "caption", "caption"
    scoring = "the test split's captions (BLEU-4, CIDEr)"
    summary_keys = ("loss", "valid_loss", "valid_ppl")
    held_out = ("valid_ppl", "validation perplexity")
    data_fields = ("vocab_size", "image_size", "in_channels")

    def add_arguments(self, parser) -> None:
        _add_caption_arguments(parser)

    def check(self, args) -> None:
        from attnlab.cli.options import check_positive, require_packages
        from attnlab.models.registry import get_preset

        check_positive(args, ("batch_size", "max_steps", "image_size", "threads", "train_images", "beam",
                              "vocab_size"))
        require_packages("train caption", "pycocoevalcap")  # the test split is scored at the end
        if not 0.0 <= args.label_smoothing < 1.0:
            raise ValueError(f"--label-smoothing={args.label_smoothing} must be in [0, 1)")
        if get_preset(args.preset).family != "captioner":
            raise ValueError(f"--preset {args.preset!r} is not a captioner preset")

    def vocabulary(self, pipeline):
        return pipeline.tokenizer

    def data(self, run):
        from attnlab.data.images import PIXEL_INPUT
        from attnlab.families.caption.task import CAPTION_FILE, load_caption_split
        from attnlab.tasks.captioning import train_caption_tokenizer

        args = run.args
        image_size = 64 if args.data == "scenes64" else args.image_size
        if run.start is not None and not option_given(args, "image_size") and args.data != "scenes64":
            image_size = run.start.model.config.image_size  # the model's resolution
        train = load_caption_split(args.data, "train", image_size=image_size, count=args.train_images)
        valid = load_caption_split(args.data, "valid", image_size=image_size)
        test = load_caption_split(args.data, "test", image_size=image_size)
        tokenizer = run.vocabulary or train_caption_tokenizer(train.captions, args.vocab_size, seed=args.seed)
        run.files["tokenizer.model"] = _tokenizer_bytes(tokenizer)
        name, colon, folder = args.data.partition(":")  # a folder by its absolute path: evaluate finds it anywhere
        recorded = f"{name}:{Path(folder).resolve()}" if colon and folder else args.data
        info = {"data": recorded, "image_size": int(train.images.shape[-1]), "input": PIXEL_INPUT}
        run.files[CAPTION_FILE] = (json.dumps(info, indent=2) + "\n").encode()
        return {"train": train, "valid": valid, "test": test, "tokenizer": tokenizer}

    def run_info(self, run, data):
        train = data["train"]
        return {"--data": run.args.data, "--train-images": len(train), "--image-size": int(train.images.shape[-1])}

    def unknown_share(self, run, data):
        tokenizer = data["tokenizer"]
        ids = [i for captions in data["train"].captions for caption in captions for i in tokenizer.encode(caption)]
        return sum(1 for i in ids if i == tokenizer.unk_id) / max(1, len(ids)), "pieces"

    def config(self, run, data):
        train, tokenizer = data["train"], data["tokenizer"]
        return run.args.preset, {"vocab_size": tokenizer.vocab_size, "image_size": int(train.images.shape[-1]),
                                 "in_channels": int(train.images.shape[1])}

    def describe(self, run, model, data):
        print(f"{run.args.data}: {len(data['train'])} training images, vocabulary {data['tokenizer'].vocab_size}; "
              f"{len(data['valid'])} valid, {len(data['test'])} test images", file=sys.stderr, flush=True)
        print(f"model: {run.args.init or run.args.preset}, {model.num_parameters():,d} parameters, device "
              f"{run.device}", file=sys.stderr, flush=True)

    def trainer(self, run, model, data, run_info):
        from attnlab.cli.options import checkpoint_minutes
        from attnlab.families.caption.task import CaptionBatches, caption_loss, collate, encode_captions
        from attnlab.training.trainer import TrainConfig, Trainer

        args, config, tokenizer = run.args, model.config, data["tokenizer"]
        train, valid = data["train"], data["valid"]
        ids = (config.bos_id, config.eos_id, config.pad_id)
        pairs = encode_captions(tokenizer, train.captions, config.max_positions)
        valid_pairs = encode_captions(tokenizer, [c[:2] for c in valid.captions], config.max_positions)
        valid_batches = [collate(valid.images, valid_pairs[i:i + 256], *ids) for i in range(0, len(valid_pairs), 256)]
        train_config = TrainConfig(out_dir=str(run.out), max_steps=args.max_steps, schedule="cosine", peak_lr=args.lr,
                                   min_lr=args.lr / 100, warmup_steps=min(args.warmup, max(1, args.max_steps // 10)),
                                   betas=(0.9, 0.98), eps=1e-9, optimizer="adamw", weight_decay=WEIGHT_DECAY,
                                   clip_grad_norm=1.0, log_every=50, validate_every=args.val_every or None,
                                   checkpoint_every=args.save_every or None, seed=args.seed,
                                   progress_bar=not args.no_progress, max_minutes=args.max_minutes,
                                   checkpoint_every_minutes=checkpoint_minutes(args))
        smoothing = args.label_smoothing
        self._started = time.perf_counter()
        return Trainer(model, lambda m, b: caption_loss(m, b, label_smoothing=smoothing),
                       CaptionBatches(train.images, pairs, args.batch_size, bos_id=ids[0], eos_id=ids[1],
                                      pad_id=ids[2], seed=args.seed),
                       train_config, valid_batches=valid_batches, model_files=run.model_files(), run_info=run_info)

    def save(self, run, model, trainer):
        self._seconds, self._updates = time.perf_counter() - self._started, trainer.step
        return super().save(run, model, trainer)

    def finish(self, run, model, data, budget):
        from attnlab.families.caption.task import evaluate_captioner
        from attnlab.files import atomic_write_json

        results, _ = evaluate_captioner(model, data["tokenizer"], data["test"], beam_size=run.args.beam, budget=budget,
                                        progress=not run.args.no_progress)
        if results["scoring"]["cut_by_budget"]:
            print(f"test captions: {results['scoring']['scored']:,d} of {results['scoring']['total']:,d} images "
                  "(a random sample: the time budget ran out)", file=sys.stderr, flush=True)
        results.update(updates=self._updates, train_seconds=round(self._seconds, 1))
        (run.out / "evaluation").mkdir(exist_ok=True)
        atomic_write_json(run.out / "evaluation" / "results.json", results, indent=2)
        print(format_results(results), file=sys.stderr, flush=True)


WEIGHT_DECAY = 0.01


def _tokenizer_bytes(tokenizer) -> bytes:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as directory:
        return Path(tokenizer.save(directory)).read_bytes()


TASK = CaptionTask()


def add_arguments(parser) -> None:
    add_training_arguments(parser, TASK)


def run(args) -> int:
    return run_training(TASK, args)


def _add_caption_arguments(parser) -> None:
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
