"""One entry point per model directory: ``attnlab.load(dir)`` -> the family's pipeline.

    import attnlab
    translator = attnlab.load("runs/quickstart/model")       # a TranslationPipeline
    translator.translate(["Ein Hund läuft."], beam=4)

A pipeline carries the model with what its directory holds (tokenizer, class names,
VQ-VAE, ...) and offers the family's natural calls on raw inputs (docs/api.md). One
registry keyed by the ``family`` of ``config.json`` (:func:`register_pipeline`); a
HuggingFace BERT directory (``model_type: bert``) loads as the ``bert`` pipeline
(:func:`register_foreign_directory`: how a family claims directories other libraries write).
"""

from __future__ import annotations

import os
from pathlib import Path

from attnlab.pipelines.base import (Pipeline, foreign_family, known_pipelines, pipeline_class,
                                    register_foreign_directory, register_pipeline)
from attnlab.pipelines.images import to_pil

# The families' modules register their pipelines on import.
from attnlab.pipelines import music as _music  # noqa: E402,F401  isort: skip
from attnlab.pipelines import text as _text  # noqa: E402,F401  isort: skip
from attnlab.pipelines import vision as _vision  # noqa: E402,F401  isort: skip

__all__ = ["load", "register_pipeline", "register_foreign_directory", "known_pipelines", "Pipeline", "to_pil"]


def load(directory: str | os.PathLike, *, device: str = "cpu") -> Pipeline:
    """The pipeline of a model directory, by the ``family`` in its ``config.json`` (or a
    HuggingFace BERT directory). ValueError naming the directory and the known families
    for anything else."""
    from attnlab.models.registry import load_config

    if not isinstance(directory, (str, os.PathLike)):
        raise TypeError(f"directory: expected a path, got {type(directory).__name__}")
    path = Path(directory)
    known = ", ".join(known_pipelines()) + " (and HuggingFace BERT directories)"
    if not path.is_dir():
        raise ValueError(f"{path}: no such model directory; attnlab.load knows the families {known}")
    family = foreign_family(path)
    if family is None:
        try:
            family = load_config(path).family
        except ValueError as error:
            raise ValueError(f"{path}: not a model directory attnlab.load can read ({error}); it knows the "
                             f"families {known}") from None
    cls = pipeline_class(family)
    if cls is None:
        raise ValueError(f"{path}: holds a {family!r} model, which has no pipeline; attnlab.load knows the "
                         f"families {known}")
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
