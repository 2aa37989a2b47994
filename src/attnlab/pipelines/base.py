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
        """Move every module of the pipeline to ``device``; returns the pipeline."""
        for module in self.modules():
            module.to(device)
        return self

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


def check_sampling(temperature: float, top_k: int | None, *, greedy_allowed: bool, top_k_max: int | None = None):
    """``temperature`` a finite number > 0 (>= 0 where 0 means greedy), ``top_k`` None or 1..``top_k_max``."""
    lowest_ok = 0.0 if greedy_allowed else math.nextafter(0.0, 1.0)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
            or not lowest_ok <= temperature < math.inf:
        raise ValueError(f"temperature={temperature!r} must be a finite number "
                         + (">= 0 (0: greedy)" if greedy_allowed else "> 0"))
    if top_k is not None:
        check_int(top_k, "top_k", maximum=top_k_max)


def attention_groups(analysis) -> dict[str, torch.Tensor]:
    """``{group name: (layers, heads, Lq, Lk)}`` of an explorer :class:`Analysis`: what a
    text pipeline's ``attention()`` returns."""
    return {group.name: group.weights for group in analysis.groups}
