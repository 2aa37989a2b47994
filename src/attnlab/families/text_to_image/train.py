"""``attnlab train text-to-image``: VQ-VAE + attribute reader + a decoder-only TextToImage on scenes.

    attnlab train text-to-image --data scenes --max-minutes 30 --out runs/t2i
    attnlab train text-to-image --data scenes --vqvae runs/t2i/vqvae/model --out runs/t2i-2
    attnlab train text-to-image --init runs/t2i/model --max-steps 500 --out runs/t2i-more

On the training lifecycle (:mod:`attnlab.cli.training_run`) with two auxiliary models
(:meth:`TrainingTask.parts`), each trained on its share of the budget before the main
model: the VQ-VAE image tokenizer (or ``--vqvae DIR``) and the attribute reader that
scores fidelity on the scenes' reader split, which has every colour-shape pair (or
``--classifier DIR``); then the text-to-image Transformer. With ``--init DIR`` (a
text-to-image model directory) the VQ-VAE, the caption vocabulary and the attribute
reader come from DIR (``DIR/vqvae``, ``DIR/tokenizer.model``, ``DIR/attributes`` or
``--classifier``) and no auxiliary model is trained. At the end one image is sampled per
held-out test prompt; the VQ-VAE's test PSNR and codebook usage and the fidelity (objects,
colours, shapes, relations; seen and unseen compositions apart; real test images as the
ceiling) go to ``OUT/evaluation/results.json``. ``OUT/model`` holds the VQ-VAE
(``OUT/model/vqvae``) and the attribute reader (``OUT/model/attributes``):
``attnlab imagine --model OUT/model "a red circle above a green triangle"``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from attnlab.cli.training_run import TrainingTask, add_training_arguments, run_training

HELP = "train a decoder-only text-to-image model (with its VQ-VAE) on the synthetic scenes"

VQVAE_PART, READER_PART = "the VQ-VAE", "the attribute reader"


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class TextToImageTask(TrainingTask):
    """``attnlab train text-to-image`` on the lifecycle: the VQ-VAE and the attribute reader
    as auxiliary parts (each on its share of the budget; skipped with --vqvae/--classifier or
    --init), a caption vocabulary, the TextToImage with the shared Trainer, fidelity at the end."""

    name, family = "text-to-image", "text_to_image"
    scoring = "fidelity on held-out prompts"
    main_part = "the text-to-image model"
    held_out = ("valid_nll", "nats per image token")  # without label smoothing
    data_fields = ("text_vocab_size", "image_vocab_size", "grid")
    flag_names = {"--data": "--data", "--train-images": "--train-images"}

    def add_arguments(self, parser) -> None:
        _add_text_to_image_arguments(parser)

    def check(self, args) -> None:
        from attnlab.cli.options import check_positive
        from attnlab.families.text_to_image.task import check_given_part
        from attnlab.models.registry import get_preset
        from attnlab.training.outputs import check_run_output

        check_positive(args, ("train_images", "reader_images", "vocab_size", "vqvae_steps", "classifier_steps",
                              "batch_size", "max_steps", "eval_prompts", "top_k", "threads"))
        if args.temperature <= 0:
            raise ValueError(f"--temperature={args.temperature} must be > 0")
        if args.data != "scenes":
            raise ValueError(f"--data {args.data!r}: text-to-image trains on scenes (the fidelity score needs their "
                             "truth)")
        if get_preset(args.preset).family != "text_to_image":
            raise ValueError(f"--preset {args.preset!r} is not a text-to-image preset")
        if args.init and args.vqvae:
            raise ValueError(f"--vqvae with --init: the VQ-VAE comes from --init {args.init} (its image tokens are "
                             "the model's); leave --vqvae out")
        # OUT/vqvae, OUT/attributes (an interrupted run leaves checkpoints there) are checked
        # before any work: --resume continues every part.
        for part, given in (("vqvae", args.vqvae or args.init), ("attributes", args.classifier)):
            if not given:
                check_run_output(Path(args.out) / part, resume=args.resume, force=args.force)
        check_given_part(args.vqvae, "--vqvae", "vqvae", "a VQ-VAE (train text-to-image writes one to OUT/vqvae/model)")
        check_given_part(args.classifier, "--classifier", "scene_attributes",
                         "an attribute reader (train text-to-image writes one to OUT/attributes/model)")

    # -- the vocabulary: the caption tokenizer and the VQ-VAE ---------------------------------
    def vocabulary(self, pipeline):
        return {"tokenizer": pipeline.tokenizer, "vqvae": pipeline.vqvae}

    def checkpoint_vocabulary(self, checkpoint):
        from attnlab.data.tokenizer import Tokenizer

        return {"tokenizer": Tokenizer.load(checkpoint)}  # the VQ-VAE: OUT/vqvae/model (its part resumes)

    def _start_reader(self, run) -> Path | None:
        """With --init: the attribute reader DIR holds (``DIR/attributes``), if any."""
        from attnlab.families.text_to_image.task import ATTRIBUTES_SUBDIR

        if run.start is None:
            return None
        reader = run.start.directory / ATTRIBUTES_SUBDIR
        return reader if (reader / "config.json").is_file() else None

    def parts(self, run):
        from attnlab.families.text_to_image.task import READER_SHARE, VQVAE_SHARE

        args = run.args
        if run.start is not None:
            reader = args.classifier or self._start_reader(run)
            _say(f"--init {args.init}: the VQ-VAE and the caption vocabulary come from it"
                 + (f", the attribute reader from {reader}" if reader else
                    " (it holds no attribute reader: one is trained; --classifier DIR gives one)")
                 + "; " + ("no auxiliary model is trained" if reader else "the VQ-VAE is not trained"))
        else:
            reader = args.classifier
        return [(name, share) for name, share, given in ((VQVAE_PART, VQVAE_SHARE, args.vqvae or run.start),
                                                          (READER_PART, READER_SHARE, reader)) if not given]

    def data(self, run):
        from attnlab.data.scenes import load_scenes
        from attnlab.families.text_to_image.task import TASK_FILE
        from attnlab.tasks.captioning import train_caption_tokenizer

        args = run.args
        train = load_scenes("train", count=args.train_images)
        valid, test = load_scenes("valid"), load_scenes("test")
        vocabulary = run.vocabulary or {}
        tokenizer = vocabulary.get("tokenizer") or train_caption_tokenizer(train.captions, args.vocab_size,
                                                                            seed=args.seed)
        run.files["tokenizer.model"] = tokenizer.to_bytes()
        self._started = time.perf_counter()
        data = {"train": train, "valid": valid, "test": test, "tokenizer": tokenizer, "vqvae": None,
                "classifier": None}
        if run.start is not None:
            data["vqvae"] = run.start.vocabulary["vqvae"].to(run.device).eval()
        if args.vqvae:
            from attnlab.models.registry import load_model

            data["vqvae"] = load_model(args.vqvae, device=run.device).eval()
        reader = args.classifier or self._start_reader(run)
        if reader:
            from attnlab.models.registry import load_model

            data["classifier"] = load_model(reader, device=run.device).eval()
        run.files[TASK_FILE] = b""  # filled once the VQ-VAE is known (config)
        return data

    def run_info(self, run, data):
        return {"--data": run.args.data, "--train-images": len(data["train"])}

    def unknown_share(self, run, data):
        tokenizer = data["tokenizer"]
        ids = [i for captions in data["train"].captions for caption in captions for i in tokenizer.encode(caption)]
        return sum(1 for i in ids if i == tokenizer.unk_id) / max(1, len(ids)), "pieces"

    def train_part(self, run, data, name, budget):
        from attnlab.families.text_to_image.task import train_attribute_reader, train_vqvae

        args = run.args
        if name == VQVAE_PART:
            data["vqvae"] = train_vqvae(run.out / "vqvae", data["train"].images, preset=args.vqvae_preset,
                                        steps=args.vqvae_steps, batch_size=args.batch_size, seed=args.seed,
                                        device=run.device, progress=not args.no_progress, budget=budget, log=_say,
                                        resume=args.resume)
        else:
            data["classifier"] = train_attribute_reader(
                run.out / "attributes", steps=args.classifier_steps, batch_size=args.batch_size, seed=args.seed,
                device=run.device, progress=not args.no_progress, images=args.reader_images, budget=budget, log=_say,
                resume=args.resume)

    def config(self, run, data):
        from attnlab.families.text_to_image.task import TASK_FILE

        args, vqvae = run.args, data["vqvae"]
        info = {"data": args.data, "image_size": vqvae.config.image_size, "temperature": args.temperature,
                "top_k": args.top_k}
        run.files[TASK_FILE] = (json.dumps(info) + "\n").encode()
        if run.start is not None:  # the start's text vocabulary may be larger than its tokenizer
            return args.preset, {"image_vocab_size": vqvae.config.codebook_size, "grid": vqvae.config.grid[0]}
        return args.preset, {"text_vocab_size": data["tokenizer"].vocab_size,
                             "image_vocab_size": vqvae.config.codebook_size, "grid": vqvae.config.grid[0]}

    def describe(self, run, model, data):
        self._data = data  # save() writes its VQ-VAE and attribute reader beside the model
        self._pairs = _pairs(data["tokenizer"], data["train"].captions, model.config.text_length)
        _say(f"text-to-image: {len(self._pairs[0])} (caption, image) pairs, text vocabulary "
             f"{data['tokenizer'].vocab_size}, {model.num_parameters():,d} parameters")

    def trainer(self, run, model, data, run_info):
        import torch

        from attnlab.data.images import normalize
        from attnlab.families.text_to_image.task import TensorBatches, part_config, text_to_image_loss
        from attnlab.training.trainer import Trainer

        args, vqvae, tokenizer = run.args, data["vqvae"], data["tokenizer"]
        train, valid = data["train"], data["valid"]
        text_length = model.config.text_length
        with torch.no_grad():
            codes = torch.cat([vqvae.encode(normalize(train.images[i:i + 500]).to(run.device)).cpu()
                               for i in range(0, len(train), 500)])
            valid_codes = vqvae.encode(normalize(valid.images).to(run.device)).cpu()
        texts, rows = self._pairs
        valid_text, valid_rows = _pairs(tokenizer, [c[:1] for c in valid.captions], text_length)
        valid_batches = list(TensorBatches({"text": torch.tensor(valid_text), "codes": valid_codes[valid_rows]}, 250,
                                           shuffle=False))
        smoothing = args.label_smoothing
        config = part_config(run.out, steps=args.max_steps, lr=args.lr, seed=args.seed, progress=not args.no_progress,
                             warmup=args.warmup, validate=True)
        return Trainer(model, lambda m, b: text_to_image_loss(m, b, label_smoothing=smoothing),
                       TensorBatches({"text": torch.tensor(texts), "codes": codes[torch.tensor(rows)]},
                                     args.batch_size, seed=args.seed),
                       config, valid_batches=valid_batches, model_files=run.model_files(), run_info=run_info)

    def save(self, run, model, trainer):
        from attnlab.families.text_to_image.task import ATTRIBUTES_SUBDIR, VQVAE_SUBDIR

        model_dir = super().save(run, model, trainer)
        self._data["vqvae"].save_pretrained(model_dir / VQVAE_SUBDIR)
        self._data["classifier"].save_pretrained(model_dir / ATTRIBUTES_SUBDIR)
        self._seconds = time.perf_counter() - self._started
        return model_dir

    def finish(self, run, model, data, budget):
        from attnlab.families.text_to_image.task import evaluate_text_to_image
        from attnlab.files import atomic_write_json

        args = run.args
        results = {"data": "scenes32", "train_seconds": round(self._seconds, 1)}
        results.update(evaluate_text_to_image(model, data["vqvae"], data["tokenizer"], data["classifier"], data["test"],
                                              prompts=args.eval_prompts, temperature=args.temperature, top_k=args.top_k,
                                              seed=args.seed, budget=budget, progress=not args.no_progress))
        (run.out / "evaluation").mkdir(exist_ok=True)
        atomic_write_json(run.out / "evaluation" / "results.json", results, indent=2)
        _say(report(results))


def _pairs(tokenizer, captions, text_length: int) -> tuple[list[list[int]], list[int]]:
    """Every caption that fits ``text_length`` (with BOS and EOS), encoded, and its image's row."""
    from attnlab.families.text_to_image.task import encode_prompt

    texts, rows = [], []
    for index, image_captions in enumerate(captions):
        for caption in image_captions:
            if len(tokenizer.encode(caption)) + 2 <= text_length:
                texts.append(encode_prompt(tokenizer, caption, text_length))
                rows.append(index)
    return texts, rows


TASK = TextToImageTask()


def add_arguments(parser) -> None:
    add_training_arguments(parser, TASK)


def run(args) -> int:
    return run_training(TASK, args)


def _add_text_to_image_arguments(parser) -> None:
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
                            "20 %% and 15 %% of it (neither trains with --init), fidelity is scored in the last "
                            "10 %%, the text-to-image model has the rest")
    evaluation = parser.add_argument_group("evaluation")
    evaluation.add_argument("--eval-prompts", type=int, default=400, help="held-out prompts, half unseen (default: 400)")
    evaluation.add_argument("--temperature", type=TEMPERATURE, default=1.0, metavar="T",
                            help="sampling temperature (default: 1.0)")
    evaluation.add_argument("--top-k", type=bounded_int(1, 1 << 20), default=32, metavar="K",
                            help="sample among the K likeliest tokens (default: 32)")
    run_group = parser.add_argument_group("run")
    add_threads_argument(run_group)
    run_group.add_argument("--seed", type=SEED, default=0,
                           help="the run's random seed: new weights, data order, dropout (default: 0)")
    run_group.add_argument("--out", required=True, help="output directory")
    run_group.add_argument("--resume", action="store_true",
                           help="continue an interrupted run from its checkpoints (OUT/vqvae, OUT/attributes, "
                                "OUT/checkpoints): the same command plus --resume")
    add_force_argument(run_group, RUN_FORCE)
    run_group.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_device_argument(parser)


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
