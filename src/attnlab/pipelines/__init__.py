"""One entry point per model directory: ``attnlab.load(dir)`` -> the family's pipeline.

    import attnlab
    translator = attnlab.load("runs/quickstart/model")       # a TranslationPipeline
    translator.translate(["Ein Hund läuft."], beam=4)

A pipeline carries the model with what its directory holds (tokenizer, class names,
VQ-VAE, ...) and offers the family's natural calls on raw inputs (docs/api.md). Each
family's registration (:mod:`attnlab.families`) names its pipeline class and the
directories of other libraries it reads (a HuggingFace BERT directory is the ``bert``
family's, an OPUS-MT MarianMT directory the translation family's).
"""

from __future__ import annotations

import os

from attnlab.pipelines.base import Pipeline, known_pipelines
from attnlab.pipelines.images import to_pil

__all__ = ["load", "known_pipelines", "Pipeline", "to_pil"]


def load(directory: str | os.PathLike, *, device: str = "cpu") -> Pipeline:
    """The pipeline of a model directory, by its family (:func:`attnlab.families.family_for_directory`:
    the ``family`` of its ``config.json``, or a HuggingFace directory a family reads).
    ValueError naming the directory and the known families for anything else."""
    from attnlab.families import family_for_directory
    from attnlab.models.registry import load_config, require_model_directory

    if not isinstance(directory, (str, os.PathLike)):
        raise TypeError(f"directory: expected a path, got {type(directory).__name__}")
    known = ", ".join(known_pipelines()) + " (and HuggingFace BERT, GPT-2 and MarianMT, and timm ViT directories)"
    path = require_model_directory(directory, known=f"; attnlab.load knows the families {known}")
    family = family_for_directory(path)
    if family is None:
        try:
            config_family = load_config(path).family  # says what is wrong with config.json
        except ValueError as error:
            raise ValueError(f"{path}: not a model directory attnlab.load can read ({error}); it knows the "
                             f"families {known}") from None
        raise ValueError(f"{path}: holds a {config_family!r} model, which has no pipeline; attnlab.load knows the "
                         f"families {known}")
    cls = family.pipeline_class()
    if cls is None:
        raise ValueError(f"{path}: holds a {family.title} model ({family.config_family!r}), which has no pipeline; "
                         f"attnlab.load knows the families {known}")
    return cls.load(path, device=_check_device(device))


def _check_device(device) -> str:
    """``device`` as a string torch accepts, on a machine that has it; ValueError otherwise."""
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device={device!r}: not a torch device (cpu, cuda, cuda:N, ...)") from None
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"device={device!r}: no CUDA GPU is available here; use device='cpu'")
        if parsed.index is not None and parsed.index >= count:
            raise ValueError(f"device={device!r}: this machine has {count} CUDA GPU(s) (cuda:0 .. cuda:{count - 1})")
    return str(parsed)
