"""Text-to-image as a task: VQ-VAE tokenizer, attribute reader, TextToImage, sampling, fidelity.

The pieces of the recipe ``attnlab train text-to-image`` runs on the synthetic scenes
(families/text_to_image/train.py, a TrainingTask on the shared lifecycle):

1. the VQ-VAE (:mod:`attnlab.models.vqvae`) learns 32x32 -> 8x8 codes (or ``vqvae`` names
   a trained one); its reconstruction PSNR and codebook usage on the test split are reported;
2. the attribute reader (:mod:`attnlab.models.scene_attributes`) learns which (colour,
   shape) pairs an image holds and where, on the scenes' ``reader`` split, which has every
   pair (or ``classifier`` names a trained one);
3. the training images become codes; every caption + its image's codes is one example;
   :class:`~attnlab.models.text_to_image.TextToImage` learns the image tokens by next-token
   prediction (label smoothing, AdamW, the shared Trainer);
4. **fidelity**: one image sampled for each held-out prompt (test captions; seen and unseen
   compositions apart) is read by the attribute reader: the share of the prompt's objects
   found (colour and shape), and of its relations that hold between the found centres. The
   same reading of the real test images with the same captions is the ceiling.

Output directory: ``OUT/vqvae/model``, ``OUT/attributes/model`` and ``OUT/model`` (the
TextToImage: config, weights, ``tokenizer.model``, ``text_to_image.json``, and copies of
the VQ-VAE in ``OUT/model/vqvae`` and of the attribute reader in ``OUT/model/attributes``),
``OUT/evaluation/results.json``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.data.images import normalize
from attnlab.data.tokenizer import Tokenizer
from attnlab.training.batches import EpochPosition
from attnlab.training.losses import label_smoothed_cross_entropy

__all__ = ["TensorBatches", "caption_log_likelihood", "attribute_loss", "attribute_targets", "encode_prompt",
           "evaluate_text_to_image", "fidelity", "imagine", "load_text_to_image", "prompt_objects", "save_grid",
           "text_to_image_loss", "train_attribute_reader", "vqvae_loss", "part_config", "check_given_part",
           "train_vqvae", "ATTRIBUTES_SUBDIR"]

TASK_FILE = "text_to_image.json"
VQVAE_SUBDIR = "vqvae"
ATTRIBUTES_SUBDIR = "attributes"
"""A model directory's attribute reader (written by train text-to-image since --init: a
directory holding it gives --init its reader)."""
VQVAE_SHARE = 0.20
READER_SHARE = 0.15
"""The fractions of ``--max-minutes`` the VQ-VAE and the attribute reader may train for
(each stops when its share is spent); final scoring keeps
:data:`attnlab.training.phases.SCORING_SHARE` and the text-to-image model has the rest."""


class TensorBatches(EpochPosition):
    """Shuffled mini-batches of the rows of equally long tensors (a fresh seeded permutation
    each epoch; resumable); ``transform`` maps each batch dict (e.g. pixels to floats)."""

    def __init__(self, tensors: dict[str, Tensor], batch_size: int, *, seed: int = 0, shuffle: bool = True,
                 transform: Callable[[dict[str, Tensor]], dict[str, Tensor]] | None = None):
        sizes = {len(t) for t in tensors.values()}
        if len(sizes) != 1 or 0 in sizes:
            raise ValueError(f"tensors must be non-empty and equally long, got lengths {sorted(sizes)}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.tensors, self.batch_size, self.seed, self.shuffle = tensors, batch_size, seed, shuffle
        self.transform = transform or (lambda batch: batch)
        self.rows = sizes.pop()

    def __len__(self) -> int:
        return -(-self.rows // self.batch_size)

    def __iter__(self) -> Iterator[dict[str, Tensor]]:
        if self.position >= len(self):
            self.epoch, self.position = self.epoch + 1, 0
        order = (torch.randperm(self.rows, generator=torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch))
                 if self.shuffle else torch.arange(self.rows))
        while self.position < len(self):
            index = order[self.position * self.batch_size:(self.position + 1) * self.batch_size]
            self.position += 1
            yield self.transform({name: t[index] for name, t in self.tensors.items()})


def _pixels(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    return {**batch, "images": normalize(batch["images"])}


# -- losses ---------------------------------------------------------------------------------
def vqvae_loss(model, batch):
    """Squared error summed over each image's values + the commitment term, per image."""
    out = model(batch["images"])
    count = batch["images"].shape[0]
    return out.loss, count, {"mse": out.mse * count}


def attribute_loss(model, batch):
    """Presence: binary cross-entropy per pair; centres: 10 x squared error, present pairs only."""
    logits, centres = model(batch["images"])
    present = batch["present"]
    bce = F.binary_cross_entropy_with_logits(logits, present, reduction="sum")
    where = ((centres - batch["centres"]).pow(2).sum(-1) * present).sum()
    correct = ((logits.detach() > 0) == (present > 0.5)).all(1).sum()
    return bce + 10.0 * where, logits.shape[0], {"correct": correct}


def text_to_image_loss(model, batch, *, label_smoothing: float = 0.0):
    logits = model(batch["text"], batch["codes"])
    loss = label_smoothed_cross_entropy(logits, batch["codes"].reshape(logits.shape[:2]), epsilon=label_smoothing)
    return loss.loss_sum, loss.num_tokens, {"nll": loss.nll_sum}


# -- scenes and prompts ---------------------------------------------------------------------
def attribute_targets(scenes) -> dict[str, Tensor]:
    """``present`` ``(N, P)`` and ``centres`` ``(N, P, 2)`` (x, y as fractions of the side)
    for the attribute reader, from the scenes' objects."""
    from attnlab.models.scene_attributes import scene_pairs

    pairs = {pair: i for i, pair in enumerate(scene_pairs())}
    side = scenes.images.shape[-1]
    present = torch.zeros(len(scenes), len(pairs))
    centres = torch.zeros(len(scenes), len(pairs), 2)
    for row, objects in enumerate(scenes.objects):
        for obj in objects:
            k = pairs[(obj.colour, obj.shape)]
            present[row, k] = 1.0
            centres[row, k] = torch.tensor([obj.x / side, obj.y / side])
    return {"images": scenes.images, "present": present, "centres": centres}


def _phrase_pattern():
    from attnlab.data.scenes import COLOURS, RELATIONS, SHAPES, SIZES

    phrase = rf"a (?:(?:{'|'.join(SIZES)}) )?({'|'.join(COLOURS)}) ({'|'.join(SHAPES)})"
    return re.compile(phrase), re.compile(rf"{phrase} ({'|'.join(RELATIONS)}) {phrase}")


def prompt_objects(prompt: str) -> tuple[list[tuple[str, str]], tuple[int, str, int] | None]:
    """The (colour, shape) pairs a scene prompt names, and its relation ``(i, relation, j)``
    between the i-th and j-th pair if it states one."""
    phrase, relation = _phrase_pattern()
    pairs = [(m.group(1), m.group(2)) for m in phrase.finditer(prompt)]
    stated = relation.search(prompt)
    return pairs, ((0, stated.group(3), 1) if stated and len(pairs) >= 2 else None)


def encode_prompt(tokenizer: Tokenizer, text: str, text_length: int) -> list[int]:
    """``[BOS] pieces [EOS] [PAD]...`` of exactly ``text_length`` ids; ValueError naming the
    characters the vocabulary does not know, or the prompt's length when it does not fit."""
    if not text.strip():
        raise ValueError("the prompt is empty")
    ids = tokenizer.encode(text)
    if tokenizer.unk_id in ids:
        unknown = sorted({ch for ch in text if not ch.isspace() and tokenizer.unk_id in tokenizer.encode(ch)})
        raise ValueError(f"prompt {text!r} has characters the model's vocabulary does not know: "
                         f"{' '.join(repr(ch) for ch in unknown) or '(a piece)'}")
    if len(ids) + 2 > text_length:
        raise ValueError(f"prompt {text!r} is {len(ids)} tokens; the model's text context holds {text_length - 2} "
                         f"(text_length={text_length} with BOS and EOS); shorten it")
    return [tokenizer.bos_id] + ids + [tokenizer.eos_id] + [tokenizer.pad_id] * (text_length - len(ids) - 2)


@torch.no_grad()
def caption_log_likelihood(captioner, caption_tokenizer: Tokenizer, images: Tensor, prompt: str) -> Tensor:
    """log p(prompt | image) under a trained captioner (teacher-forced, EOS included), one
    number per uint8 image ``(N, 3, S, S)``: the CLIP-style re-ranking score."""
    config = captioner.config
    if tuple(images.shape[1:]) != (config.in_channels, config.image_size, config.image_size):
        raise ValueError(f"the captioner reads {config.image_size}x{config.image_size} images, these are "
                         f"{tuple(images.shape[1:])}")
    ids = caption_tokenizer.encode(prompt)[: config.max_positions - 1]
    if caption_tokenizer.unk_id in ids:
        raise ValueError(f"prompt {prompt!r} has characters the captioner's vocabulary does not know")
    parameter = next(captioner.parameters())
    tgt_in = torch.tensor([[config.bos_id] + ids] * len(images), device=parameter.device)
    target = torch.tensor(ids + [config.eos_id], device=parameter.device)
    captioner.eval()
    logits = captioner(normalize(images).to(parameter), tgt_in).float()
    return logits.log_softmax(-1).gather(-1, target.expand(len(images), -1)[..., None])[..., 0].sum(-1).cpu()


@torch.no_grad()
def imagine(model, vqvae, tokenizer: Tokenizer, prompts: Sequence[str], *, n: int = 1, temperature: float = 1.0,
            top_k: int | None = None, seed: int | None = 0, batch_size: int = 64, rerank=None,
            candidates: int = 4) -> Tensor:
    """``n`` images per prompt, uint8 ``(len(prompts) · n, 3, S, S)`` (prompt-major): image
    tokens sampled with :func:`attnlab.generation.sampling.generate`, decoded by the VQ-VAE.
    With ``rerank=(captioner, its tokenizer)``, ``n · candidates`` images are drawn per prompt
    and the ``n`` the captioner finds likeliest to be described by the prompt are kept (best
    first; :func:`caption_log_likelihood`)."""
    from attnlab.generation.sampling import generate

    if n < 1 or candidates < 1:
        raise ValueError(f"n={n} and candidates={candidates} must be >= 1")
    if rerank is not None:
        drawn = imagine(model, vqvae, tokenizer, prompts, n=n * candidates, temperature=temperature, top_k=top_k,
                        seed=seed, batch_size=batch_size)
        kept = []
        for k, prompt in enumerate(prompts):
            group = drawn[k * n * candidates:(k + 1) * n * candidates]
            scores = caption_log_likelihood(*rerank, group, prompt)
            kept.append(group[scores.argsort(descending=True)[:n]])
        return torch.cat(kept)
    config = model.config
    rows = [encode_prompt(tokenizer, p, config.text_length) for p in prompts for _ in range(n)]
    generator = torch.Generator(device=next(model.parameters()).device).manual_seed(seed or 0)
    images = []
    for start in range(0, len(rows), batch_size):
        tokens = generate(model, rows[start:start + batch_size], max_new_tokens=config.image_tokens,
                          temperature=temperature, top_k=top_k, generator=generator)
        codes = (torch.tensor(tokens) - config.text_vocab_size).view(-1, config.grid, config.grid)
        pixels = vqvae.decode_codes(codes.to(next(vqvae.parameters()).device))
        images.append(((pixels.float().cpu() + 1) * 127.5).round().clamp(0, 255).to(torch.uint8))
    return torch.cat(images)


@torch.no_grad()
def fidelity(classifier, images: Tensor, prompts: Sequence[str]) -> dict[str, Any]:
    """How well uint8 ``images`` show their ``prompts`` by the attribute reader: ``objects``
    (share of named (colour, shape) pairs it finds), ``colours`` / ``shapes`` (share of named
    objects whose colour / shape it finds on some object), ``relations`` (share of stated
    relations that hold between the found centres; a missing object fails it) and ``all``
    (share of images with every object and relation right)."""
    from attnlab.data.scenes import SceneObject, relation
    from attnlab.models.scene_attributes import scene_pairs

    if len(images) != len(prompts):
        raise ValueError(f"{len(images)} images for {len(prompts)} prompts")
    pairs = scene_pairs()
    index = {pair: i for i, pair in enumerate(pairs)}
    classifier.eval()
    device = next(classifier.parameters()).device
    logits, centres = [], []
    for start in range(0, len(images), 256):
        a, b = classifier(normalize(images[start:start + 256]).to(device))
        logits.append(a.cpu())
        centres.append(b.cpu())
    found, where = torch.cat(logits) > 0, torch.cat(centres)
    objects = colours = shapes = named = relations_ok = relations = everything = 0
    for row, prompt in enumerate(prompts):
        wanted, stated = prompt_objects(prompt)
        seen = [pairs[k] for k in torch.nonzero(found[row]).flatten().tolist()]
        hits = [pair in seen for pair in wanted]
        objects += sum(hits)
        colours += sum(any(c == colour for c, _ in seen) for colour, _ in wanted)
        shapes += sum(any(s == shape for _, s in seen) for _, shape in wanted)
        named += len(wanted)
        ok = all(hits)
        if stated is not None:
            i, said, j = stated
            holds = hits[i] and hits[j] and relation(*(SceneObject(
                wanted[k][1], wanted[k][0], "small", float(where[row, index[wanted[k]], 0]),
                float(where[row, index[wanted[k]], 1]), 0.0) for k in (i, j))) == said
            relations += 1
            relations_ok += holds
            ok = ok and holds
        everything += ok
    share = lambda a, b: a / b if b else None  # noqa: E731
    return {"prompts": len(prompts), "objects": share(objects, named), "colours": share(colours, named),
            "shapes": share(shapes, named), "relations": share(relations_ok, relations),
            "relation_prompts": relations, "all": share(everything, len(prompts))}


def save_grid(images: Tensor, path: str | Path, *, columns: int, scale: int = 4) -> Path:
    """uint8 images ``(N, 3, S, S)`` as one PNG grid (``columns`` a row, 2 px gaps), each
    pixel ``scale`` x ``scale``; written atomically."""
    import io

    from PIL import Image

    from attnlab.files import atomic_write_bytes

    count, _, side, _ = images.shape
    rows = -(-count // columns)
    gap = 2
    canvas = torch.full((3, rows * (side + gap) + gap, columns * (side + gap) + gap), 255, dtype=torch.uint8)
    for k, image in enumerate(images):
        r, c = divmod(k, columns)
        canvas[:, gap + r * (side + gap):gap + r * (side + gap) + side,
               gap + c * (side + gap):gap + c * (side + gap) + side] = image
    picture = Image.fromarray(canvas.permute(1, 2, 0).numpy()).resize(
        (canvas.shape[2] * scale, canvas.shape[1] * scale), Image.Resampling.NEAREST)
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return atomic_write_bytes(Path(path), buffer.getvalue())  # makes missing directories above it


# -- the auxiliary models ------------------------------------------------------------------
def part_config(out: Path, *, steps: int, lr: float, seed: int, progress: bool, warmup: int = 200,
                validate: bool = False, max_minutes: float | None = None):
    """The TrainConfig of each model of the recipe (AdamW, warm-up + cosine, label-free):
    the auxiliary models' (:func:`_train_part`) and the text-to-image model's."""
    from attnlab.training.trainer import TrainConfig

    return TrainConfig(out_dir=str(out), max_steps=steps, schedule="cosine", peak_lr=lr, min_lr=lr / 100,
                       warmup_steps=min(warmup, max(1, steps // 10)), betas=(0.9, 0.98), eps=1e-9, optimizer="adamw",
                       weight_decay=0.01, clip_grad_norm=1.0, log_every=50,
                       validate_every=max(1, steps // 4) if validate else None,
                       checkpoint_every=None, keep_last=1, seed=seed, progress_bar=progress, max_minutes=max_minutes)


def _train_part(model, loss_fn, batches, out: Path, *, steps: int, lr: float, seed: int, progress: bool,
                warmup: int = 200, max_minutes: float | None = None, valid=None, files=(), budget=None,
                reserve: float = 0.0, label: str | None = None, log: Callable[[str], None] | None = None,
                resume: bool = False) -> Path:
    """One model through the shared Trainer (AdamW, warm-up + cosine) -> ``out/model``,
    within ``budget`` (less ``reserve`` seconds; :func:`attnlab.training.phases.train_within`).
    ``label``: an auxiliary model, shown on a progress bar of its own name (the Trainer's
    bar says "train")."""
    from attnlab.training.phases import command_budget, train_within
    from attnlab.training.trainer import Trainer

    config = part_config(out, steps=steps, lr=lr, seed=seed, progress=progress and label is None, warmup=warmup,
                         validate=valid is not None, max_minutes=max_minutes)
    bar = _UpdateBar(label, steps) if label is not None and progress else None
    if bar is not None:
        loss_fn = bar.counting(loss_fn)
    trainer = Trainer(model, loss_fn, batches, config, valid_batches=valid, model_files=list(files))
    try:
        train_within(trainer, budget if budget is not None else command_budget(max_minutes), reserve=reserve,
                     resume=resume, say=log, what=label or "training")
    finally:
        if bar is not None:
            bar.close()
    if label is not None and log is not None:
        stopped = f" (its time share was spent at update {trainer.step:,d})" if trainer.step < steps else ""
        log(f"{label}: {trainer.step:,d} of {steps:,d} updates{stopped}")
    return out


class _UpdateBar:
    """A progress bar named after an auxiliary model (the Trainer's own says "train"), in
    updates: :meth:`counting` wraps the loss function so that each training call advances it,
    one per update (the parts train without gradient accumulation); validation calls (model
    in eval mode) do not count. The bar opens at the first update, below the lines before it."""

    def __init__(self, label: str, steps: int) -> None:
        self.label, self.steps, self.bar = label, steps, None

    def counting(self, loss_fn):
        def counted(model, batch):
            result = loss_fn(model, batch)
            if model.training:
                if self.bar is None:
                    from tqdm.auto import tqdm

                    self.bar = tqdm(total=self.steps, desc=self.label, unit="update", file=sys.stderr,
                                    dynamic_ncols=True)
                self.bar.update(1)
            return result

        return counted

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def train_vqvae(out: str | Path, images: Tensor, *, preset: str = "vqvae_scenes", steps: int = 1500,
                batch_size: int = 64, seed: int = 0, device: str = "cpu", progress: bool = True, budget=None,
                log: Callable[[str], None] | None = None, resume: bool = False):
    """The VQ-VAE image tokenizer, trained on uint8 ``images`` -> ``out/model``, within
    ``budget``; returns the model (in eval mode)."""
    from attnlab.models.registry import create_model

    torch.manual_seed(seed)
    vqvae = create_model(preset).to(device)
    if log is not None:
        log(f"VQ-VAE: {vqvae.num_parameters():,d} parameters, {steps} updates")
    out = Path(out)
    _train_part(vqvae, vqvae_loss, TensorBatches({"images": images}, batch_size, seed=seed, transform=_pixels),
                out, steps=steps, lr=2e-3, seed=seed, progress=progress, budget=budget, label="VQ-VAE", log=log,
                resume=resume)
    vqvae.save_pretrained(out / "model")
    return vqvae.eval()


def train_attribute_reader(out: str | Path, *, steps: int = 2000, batch_size: int = 64, seed: int = 0,
                           device: str = "cpu", progress: bool = True, images: int | None = None, budget=None,
                           log: Callable[[str], None] | None = None, resume: bool = False):
    """The attribute reader, trained on the scenes' ``reader`` split (every colour-shape
    pair, so it can judge unseen compositions too; ``images`` of it, default all 20,000)
    -> ``out/model``, within ``budget`` (a :class:`~attnlab.training.budget.Budget`,
    reading the split included); returns the model."""
    from attnlab.data.scenes import load_scenes
    from attnlab.models.registry import create_model

    torch.manual_seed(seed)
    classifier = create_model("scene_attributes").to(device)
    out = Path(out)
    _train_part(classifier, attribute_loss, TensorBatches(attribute_targets(load_scenes("reader", count=images)), batch_size,
                                                          seed=seed, transform=_pixels),
                out, steps=steps, lr=2e-3, seed=seed, progress=progress, budget=budget, label="attribute reader",
                log=log, resume=resume)
    classifier.save_pretrained(out / "model")
    return classifier.eval()


@torch.no_grad()
def evaluate_text_to_image(model, vqvae, tokenizer: Tokenizer, classifier, test, *, prompts: int = 400,
                           temperature: float = 1.0, top_k: int | None = 32, seed: int = 0, budget=None,
                           progress: bool = False, batch_size: int = 64) -> dict[str, Any]:
    """VQ-VAE test PSNR and codebook use, and the fidelity of one image sampled for each of
    ``prompts`` held-out prompts (the first caption of test scenes; half seen, half unseen
    compositions) next to the same reading of the real test images (the ceiling).

    The prompts are sampled ``batch_size`` at a time, seen and unseen interleaved; with a
    ``budget`` (:class:`attnlab.training.phases.Scoring`) only as many as its time left
    allows (a random sample; ``results["scoring"]`` says how many of how many);
    ``progress``: a bar over the prompts."""
    from attnlab.models.vqvae import psnr
    from attnlab.training.phases import Scoring

    model.eval()
    vqvae.eval()
    device = next(vqvae.parameters()).device
    # The VQ-VAE's reconstructions: cheap next to sampling, so a quarter of the time left at most.
    reconstructing = Scoring("VQ-VAE test PSNR", len(test), unit="image", batch_size=500, first_batch=100,
                             budget=None if budget is None else budget.share(0.25), progress=progress)
    pixels, codes, reconstruction = [], [], []
    for index in reconstructing:
        pixels.append(normalize(test.images[index]).to(device))
        codes.append(vqvae.encode(pixels[-1]))
        reconstruction.append(vqvae.decode_codes(codes[-1]).cpu())
    pixels, codes, reconstruction = torch.cat(pixels).cpu(), torch.cat(codes), torch.cat(reconstruction)
    results: dict[str, Any] = {"vqvae": {"psnr_test": psnr(reconstruction, pixels), **vqvae.codebook_usage(codes),
                                         "codebook_size": vqvae.config.codebook_size,
                                         "test_images": reconstructing.scored},
                               "fidelity": {}}
    text_length = model.config.text_length
    groups = {name: [i for i, u in enumerate(test.unseen) if u == flag
                     and len(tokenizer.encode(test.captions[i][0])) + 2 <= text_length][: prompts // 2]
              for name, flag in (("seen", False), ("unseen", True))}
    items = []  # (group, test row): seen and unseen in turn
    for k in range(max(len(rows) for rows in groups.values())):
        items += [(name, rows[k]) for name, rows in groups.items() if k < len(rows)]
    scoring = Scoring("fidelity: sampling an image per prompt", len(items), unit="prompt", batch_size=batch_size,
                      budget=budget, progress=progress, first_batch=16)
    generated: dict[int, Tensor] = {}
    for number, index in enumerate(scoring):
        texts = [test.captions[items[k][1]][0] for k in index.tolist()]
        images = imagine(model, vqvae, tokenizer, texts, temperature=temperature, top_k=top_k,
                         seed=seed * 1_000_003 + number, batch_size=batch_size)
        generated.update(zip(index.tolist(), images))
    for name in groups:
        kept = [k for k in scoring.indices().tolist() if items[k][0] == name]
        if not kept:
            continue
        rows = [items[k][1] for k in kept]
        texts = [test.captions[row][0] for row in rows]
        images = torch.stack([generated[k] for k in kept])
        results["fidelity"][name] = {"generated": fidelity(classifier, images, texts),
                                     "real_test_images": fidelity(classifier, test.images[rows], texts)}
    if budget is not None:
        results["scoring"] = scoring.record()
        results["vqvae"]["scoring"] = reconstructing.record()
    return results


def load_text_to_image(directory: str | Path, device: str = "cpu", *, flag: str = "--model"):
    """A saved TextToImage, its VQ-VAE (``DIR/vqvae``) and its tokenizer; its
    ``text_to_image.json`` is checked (:func:`attnlab.tasks.read_task_file`). Errors name
    ``flag``, the option that gave ``directory``."""
    import math

    from attnlab.models.registry import load_model
    from attnlab.models.text_to_image import TextToImage
    from attnlab.models.vqvae import VQVAE
    from attnlab.tasks import is_positive_int, is_text, read_task_file

    model = load_model(directory, device=str(device))
    if not isinstance(model, TextToImage):
        raise ValueError(f"{flag} {directory}: holds a {model.config.family} model, not a text-to-image model")
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)  # noqa: E731
    info_path = Path(directory) / TASK_FILE
    info = read_task_file(info_path, {
        "data": (is_text, "a data set name"), "image_size": (is_positive_int, "a whole number of pixels"),
        "temperature": (lambda v: number(v) and v > 0, "a number above 0"),
        "top_k": (lambda v: is_positive_int(v) or v == 0, "a whole number >= 0")})
    vqvae = load_model(Path(directory) / VQVAE_SUBDIR, device=str(device))
    if not isinstance(vqvae, VQVAE) or vqvae.config.codebook_size != model.config.image_vocab_size \
            or vqvae.config.grid != (model.config.grid, model.config.grid):
        raise ValueError(f"{Path(directory) / VQVAE_SUBDIR}: not the VQ-VAE this model's image tokens come from")
    if info.get("image_size") not in (None, vqvae.config.image_size):
        raise ValueError(f"{info_path}: image_size={info['image_size']} but the VQ-VAE draws "
                         f"{vqvae.config.image_size}x{vqvae.config.image_size} images")
    tokenizer = Tokenizer.load(directory)
    if tokenizer.vocab_size > model.config.text_vocab_size:
        raise ValueError(f"{Path(directory) / 'tokenizer.model'}: {tokenizer.vocab_size} pieces do not fit the "
                         f"model's text vocabulary of {model.config.text_vocab_size}")
    return model, vqvae, tokenizer


def check_given_part(directory: str | None, flag: str, family: str, what: str) -> None:
    """Before anything is trained: a model directory given by ``flag`` holds a ``family``
    model for 32x32 RGB scenes (its config.json is read; nothing is loaded)."""
    from attnlab.models.registry import load_config, require_model_directory

    if directory is None:
        return
    require_model_directory(directory, flag)
    config = load_config(directory)
    if config.family != family:
        raise ValueError(f"{flag} {directory}: holds a {config.family} model, not {what}")
    if (config.image_size, config.in_channels) != (32, 3):
        raise ValueError(f"{flag} {directory}: reads {config.image_size}x{config.image_size} images with "
                         f"{config.in_channels} channel(s); the scenes are 32x32 RGB")
