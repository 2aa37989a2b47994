"""What every pipeline shares.

A pipeline is a loaded model *with everything its directory carries* (tokenizer, class
names, VQ-VAE, ...) and the family's natural calls on raw inputs. Each family's class
is named by its family's registration (:mod:`attnlab.families`); :func:`attnlab.pipelines.load`
picks the class by the family of the directory.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch
from torch import nn

from attnlab.limits import MAX_BEAM, MAX_IMAGES, MAX_SEED, MAX_TEMPERATURE  # noqa: F401  (MAX_IMAGES: pipelines)

__all__ = ["Pipeline", "known_pipelines", "pipeline_class"]


def known_pipelines() -> list[str]:
    """The config families :func:`attnlab.load` can load (each family's registration,
    :mod:`attnlab.families`, names its pipeline), sorted."""
    from attnlab.families import families

    return sorted(family.config_family for family in families() if family.pipeline)


def pipeline_class(config_family: str) -> type[Pipeline] | None:
    """The pipeline class of models whose ``config.json`` says ``"family": config_family``."""
    from attnlab.families import family_for_config

    family = family_for_config(config_family)
    return None if family is None else family.pipeline_class()


def attention_families() -> list[str]:
    """The families whose pipeline shows its attention (overrides :meth:`Pipeline.attention`)."""
    return sorted(name for name in known_pipelines() if pipeline_class(name).attention is not Pipeline.attention)


class Pipeline:
    """A model directory loaded for use: ``.model``, ``.family``, ``.directory``,
    ``.device`` / ``.to(device)``, ``attention(...)`` and the family's own calls."""

    family: str = ""

    def __init__(self, model: nn.Module, directory: str | os.PathLike | None = None):
        self.model = model.eval()
        self.directory = None if directory is None else Path(directory)

    @classmethod
    def load(cls, directory: Path, *, device: str = "cpu") -> Pipeline:  # pragma: no cover - every family overrides
        raise NotImplementedError

    # -- device ---------------------------------------------------------------------------
    def modules(self) -> list[nn.Module]:
        """Every module the pipeline runs (the model; a VQ-VAE, ... where there is one)."""
        return [self.model]

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def to(self, device: str | torch.device) -> Pipeline:
        """Move every module of the pipeline to ``device`` (checked as :func:`attnlab.load`'s
        ``device``: a torch device this machine has); returns the pipeline."""
        from attnlab.pipelines import _check_device

        device = _check_device(device)
        for module in self.modules():
            module.to(device)
        return self

    # -- saving ---------------------------------------------------------------------------
    def save_pretrained(self, directory: str | os.PathLike, *, force: bool = False) -> Path:
        """Write the model **with** everything its family's loader reads beside it (tokenizer,
        class names, task record, VQ-VAE: :meth:`save_parts`) into ``directory``, so that
        ``attnlab.load(directory)`` opens the same pipeline; a pipeline read from another
        library's directory (HuggingFace, timm) is written as an attnlab directory.
        ``directory`` must be new or empty (``force=True``: replaced as a whole); it is
        written as a temporary directory and renamed into place (:func:`attnlab.files.atomic_directory`),
        so a failure leaves nothing. Returns the directory."""
        from attnlab.files import atomic_directory

        if not isinstance(directory, (str, os.PathLike)):
            raise TypeError(f"directory: expected a path, got {type(directory).__name__}")
        check_bool(force, "force")
        if type(self).save_parts is Pipeline.save_parts:
            raise ValueError(f"a {self.family!r} pipeline ({type(self).__name__}) does not say what its directory "
                             "holds beside the model (save_parts); save its model with pipeline.model.save_pretrained")
        for module in self.modules():
            if getattr(module, "quantized", None):
                raise ValueError(f"a {module.quantized}-quantised model is for decoding only and cannot be saved; "
                                 "save the float pipeline and quantise it after loading")
        out = Path(directory)
        if out.is_symlink():
            raise ValueError(f"{out}: is a symlink; attnlab does not write through symlinks")
        if out.exists() and not out.is_dir():
            raise ValueError(f"{out}: is a file, not a directory")
        if out.is_dir() and any(out.iterdir()) and not force:
            raise ValueError(f"{out}: the directory exists and is not empty; pass force=True to replace it as a "
                             "whole, or choose a new directory")
        with atomic_directory(out) as temporary:
            self.model.save_pretrained(temporary)
            self.save_parts(temporary)
        return out

    def save_parts(self, directory: Path) -> None:  # pragma: no cover - every family overrides
        """Write what the family's loader reads beside ``config.json`` and ``model.safetensors``
        (each family's pipeline overrides it; :meth:`save_pretrained` refuses a pipeline that does not)."""
        raise NotImplementedError

    def copy_records(self, directory: Path, *names: str) -> None:
        """Copy the task records ``names`` (JSON files the pipeline does not hold in memory, such
        as where the training data was) from the directory it was loaded from, when there."""
        import shutil

        for name in names:
            source = None if self.directory is None else self.directory / name
            if source is not None and source.is_file() and not source.is_symlink():
                shutil.copyfile(source, directory / name)

    # -- attention ------------------------------------------------------------------------
    def attention(self, *args, **kwargs) -> dict[str, torch.Tensor]:
        """The attention weights of one input, ``{group: (layers, heads, Lq, Lk)}`` float32
        on the CPU, through :func:`attnlab.viz.explorer.maps.attention_maps`."""
        raise ValueError(f"a {self.family!r} pipeline does not show its attention yet; attention() works for "
                         f"the families {', '.join(attention_families())}")

    def __repr__(self) -> str:
        parameters = sum(p.numel() for p in self.model.parameters())
        where = f", directory={str(self.directory)!r}" if self.directory is not None else ""
        return f"{type(self).__name__}(family={self.family!r}, parameters={parameters:,d}, device={self.device}{where})"


def single_or_list(values) -> tuple[list, bool]:
    """``(list of inputs, whether one input was given)``: a str is one text; a list or tuple is many."""
    if isinstance(values, (list, tuple)):
        return list(values), False
    return [values], True


def check_texts(texts, name: str = "texts") -> tuple[list[str], bool]:
    """One string or a list of strings; TypeError naming ``name`` otherwise."""
    items, single = single_or_list(texts)
    for index, text in enumerate(items):
        if not isinstance(text, str):
            where = name if single else f"{name}[{index}]"
            raise TypeError(f"{where}: expected a string, got {type(text).__name__}")
    return items, single


def check_int(value, name: str, *, minimum: int = 1, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}={value!r}: expected a whole number")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"in {minimum}..{maximum}" if maximum is not None else f"at least {minimum}"
        raise ValueError(f"{name}={value} must be {bound}")
    return value


def check_number(value, name: str, *, low: float | None = None, high: float | None = None,
                 include_low: bool = True) -> float:
    """A finite number (not a bool) in ``[low, high]`` (``(low, high]`` without
    ``include_low``; a missing bound is open), as the CLI's ``bounded_float`` checks a flag:
    TypeError for a non-number, ValueError naming ``name`` for NaN, infinity or out of range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}={value!r}: expected a number")
    if not math.isfinite(value):
        raise ValueError(f"{name}={value!r} must be a finite number")
    if (low is not None and (value < low or (value == low and not include_low))) or (high is not None
                                                                                        and value > high):
        lower = "" if low is None else f"{'at least' if include_low else 'above'} {low:g}"
        upper = "" if high is None else f"at most {high:g}"
        raise ValueError(f"{name}={value!r} must be {' and '.join(part for part in (lower, upper) if part)}")
    return float(value)


def check_bool(value, name: str) -> bool:
    """``True`` or ``False`` (a truthy string or number is not a flag)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name}={value!r}: expected True or False")
    return value


def check_seed(seed, name: str = "seed", *, optional: bool = False) -> int | None:
    """A seed as ``--seed`` takes it: 0 to 2^63 - 1 (None allowed when ``optional``)."""
    if seed is None and optional:
        return None
    return check_int(seed, name, minimum=0, maximum=MAX_SEED)


def check_beam(beam, name: str = "beam") -> int:
    """A beam size as ``--beam`` takes it: 1 (greedy) to :data:`attnlab.limits.MAX_BEAM`."""
    return check_int(beam, name, minimum=1, maximum=MAX_BEAM)


def check_sampling(temperature: float, top_k: int | None, *, greedy_allowed: bool, top_k_max: int | None = None,
                   top_p: float | None = None) -> None:
    """The sampling arguments as the CLI's flags take them: ``temperature`` a finite number
    above 0 (or 0 where it means greedy) and at most 100 (``--temperature``), ``top_k`` None
    or 1..``top_k_max``, ``top_p`` None or in (0, 1]."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not (
            (0.0 <= temperature if greedy_allowed else 0.0 < temperature) and temperature <= MAX_TEMPERATURE):
        raise ValueError(f"temperature={temperature!r} must be a finite number "
                         + (">= 0 (0: greedy)" if greedy_allowed else "> 0") + f" and at most {MAX_TEMPERATURE:g}")
    if top_k is not None:
        check_int(top_k, "top_k", maximum=top_k_max)
    if top_p is not None:
        check_number(top_p, "top_p", low=0.0, high=1.0, include_low=False)


def check_nonempty_texts(texts, name: str = "texts") -> tuple[list[str], bool]:
    """:func:`check_texts`, refusing an empty list and a text with nothing but white space
    (there is nothing in it to embed, score or condition on)."""
    items, single = check_texts(texts, name)
    if not items:
        raise ValueError(f"{name}: an empty list; give at least one text")
    for index, text in enumerate(items):
        if not text.strip():
            where = name if single else f"{name}[{index}]"
            raise ValueError(f"{where}: {'an empty string' if not text else 'only white space'}; give a text")
    return items, single


def attention_groups(analysis) -> dict[str, torch.Tensor]:
    """``{group name: (layers, heads, Lq, Lk)}`` of an explorer :class:`Analysis`: what a
    text pipeline's ``attention()`` returns."""
    return {group.name: group.weights for group in analysis.groups}
