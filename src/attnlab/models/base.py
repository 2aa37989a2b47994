"""What every attnlab model shares: a frozen config, parameter counts, saving."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import types
import typing
from pathlib import Path
from typing import Any, ClassVar

import torch
from safetensors.torch import save_model
from torch import nn

from attnlab.files import atomic_write as _atomic_write
from attnlab.files import default_file_mode  # noqa: F401  (re-exported: tests and old callers import it here)

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Base of the per-family frozen configs. ``family`` names the model class in the registry."""

    family: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, values: dict[str, Any], *, source: str = "config") -> "ModelConfig":
        """Build from a dict (``family`` is ignored here); unknown keys raise ValueError."""
        values = {k: v for k, v in values.items() if k != "family"}
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"{source}: unknown {cls.__name__} field(s) {unknown}; known fields: {sorted(known)}")
        hints = typing.get_type_hints(cls)
        for name, value in values.items():
            if not _fits_type(value, hints.get(name)):
                raise ValueError(f"{source}: {cls.__name__}.{name}={value!r} is not of type {hints[name]}")
            problem = _field_range_problem(name, value)
            if problem:
                raise ValueError(f"{source}: {cls.__name__}.{name}={value!r} {problem}")
        try:
            return cls(**values)
        except ValueError as error:  # the config's own consistency checks: say where it came from
            raise ValueError(f"{source}: {error}") from None

    def replace(self, **overrides) -> "ModelConfig":
        """A copy with some fields changed; unknown names raise ValueError."""
        return self.from_dict({**dataclasses.asdict(self), **overrides}, source="overrides")


# Caps on what a config may ask a loader to build: a hostile config.json must not hang
# (a million layers) or allocate terabytes before the weights file is even looked at.
MAX_LAYERS = 1024
MAX_SIZE = 2**24


def _field_range_problem(name: str, value: Any) -> str | None:
    """What is wrong with a config value's range, judged by the field's name (the same
    conventions in every family): sizes and counts positive and capped, ``*_eps``
    positive, ``*dropout`` in [0, 1), every float finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return "is not a finite number"
    if name.endswith("eps") and not value > 0:
        return "must be positive"
    if "dropout" in name and not 0 <= value < 1:
        return "must be in [0, 1)"
    if isinstance(value, int) and not name.endswith("_id"):
        cap = MAX_LAYERS if "layers" in name else MAX_SIZE
        if value > cap:
            return f"exceeds the cap of {cap:,d} a loaded config may ask for"
    return None


def _fits_type(value: Any, annotation: Any) -> bool:
    """Whether ``value`` (from JSON or overrides) fits a simple field annotation: int, float,
    bool, str, None and unions of them; other annotations are not checked. A JSON ``"no"``
    must not become a truthy ``norm_first``, nor ``"32"`` a d_model."""
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_fits_type(value, arg) for arg in typing.get_args(annotation))
    return True


def check_token_ids(ids, vocab_size: int, name: str) -> None:
    """Raise ValueError unless ``ids`` is a ``(batch, length)`` integer tensor of ids in
    ``[0, vocab_size)`` (the boundary check every model runs on user input)."""
    if ids.dim() != 2:
        raise ValueError(f"{name} must be (batch, length) token ids, got shape {tuple(ids.shape)}")
    if ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{name} must be an integer tensor, got dtype {ids.dtype}")
    if ids.numel() and ids.device.type != "cpu":
        # On an accelerator a host-side check would wait for the GPU at every forward (and
        # break torch.compile's graph): assert on the device instead, asynchronously.
        torch._assert_async(((ids >= 0) & (ids < vocab_size)).all(),
                            f"{name} contains a token id outside the vocabulary [0, {vocab_size})")
    elif ids.numel():
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= vocab_size:
            bad = low if low < 0 else high
            raise ValueError(f"{name} contains token id {bad}, outside the vocabulary [0, {vocab_size})")


class AttnlabModel(nn.Module):
    """Base class of attnlab models: holds ``config`` and saves itself."""

    config_class: ClassVar[type[ModelConfig]]

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config

    def num_parameters(self, *, exclude: tuple[str, ...] = ()) -> int:
        """Number of distinct parameters (tied ones counted once), skipping modules named in ``exclude``."""
        seen, total = set(), 0
        for name, parameter in self.named_parameters():
            if id(parameter) in seen or any(name == e or name.startswith(e + ".") for e in exclude):
                continue
            seen.add(id(parameter))
            total += parameter.numel()
        return total

    def save_pretrained(self, directory: str | os.PathLike, *, extra_files: dict[str, bytes] | None = None) -> Path:
        """Write ``config.json`` + ``model.safetensors`` (+ ``extra_files``) into ``directory``.

        Each file is written to a temporary name in the same directory and renamed into
        place, so an interrupted save never leaves a half-written file under the real name.
        Tied weights are stored once.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        config_bytes = (json.dumps(self.config.to_dict(), indent=2, sort_keys=True) + "\n").encode()
        files = {CONFIG_NAME: config_bytes, **(extra_files or {})}
        _atomic_write(directory / WEIGHTS_NAME, lambda path: save_model(self, str(path)))
        for name, data in files.items():
            _atomic_write(directory / name, lambda path, data=data: Path(path).write_bytes(data))
        return directory
