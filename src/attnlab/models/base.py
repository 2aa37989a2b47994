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
from attnlab.files import tensors_size
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
                raise ValueError(f"{source}: {cls.__name__}.{name}={value!r} is not {_type_name(hints[name])}")
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


def require_positive(config, *names: str) -> None:
    """Raise ValueError naming the first of ``names`` whose value in ``config`` is below 1."""
    for name in names:
        if getattr(config, name) < 1:
            raise ValueError(f"{name}={getattr(config, name)} must be >= 1")


@dataclasses.dataclass(frozen=True)
class LayerConfig(ModelConfig):
    """The fields of the shared Transformer layer (attention + feed-forward + residual/norm),
    declared and validated once. Every family's config derives from this one (token stacks
    through :class:`StackConfig`); a family changes only defaults and adds its own fields."""

    d_model: int = 512
    num_heads: int = 8
    d_ff: int = 2048
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation: str = "relu"
    norm_first: bool = False
    layer_norm_eps: float = 1e-5

    def __post_init__(self):
        from attnlab.layers.feedforward import ACTIVATIONS

        require_positive(self, "d_model", "num_heads", "d_ff")
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}")
        for name in ("dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name}={getattr(self, name)} must be in [0, 1)")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation={self.activation!r}; choose one of {sorted(ACTIVATIONS)}")


@dataclasses.dataclass(frozen=True)
class StackConfig(LayerConfig):
    """A stack over a token sequence: the layer fields plus positions and attention patterns;
    a family adds its own (layer counts, vocabulary, its attention pattern fields) and lists
    its pattern fields in ``pattern_fields`` (with whether each must be causal).

    ``positional`` is one of :data:`attnlab.layers.positional.POSITIONAL_KINDS`; "none"
    (NoPE) is valid only when every pattern is causal or sees positions itself (relative).
    Patterns are registry specs
    (:func:`attnlab.attention.build_pattern`): a name or ``{"name": ..., **parameters}``.
    """

    pattern_fields: ClassVar[dict[str, bool]] = {}  # field name -> must be causal
    positional_kinds: ClassVar[tuple[str, ...] | None] = None  # None: layers.positional.POSITIONAL_KINDS

    positional: str = "sinusoidal"
    max_positions: int = 1024

    def __post_init__(self):
        from attnlab.attention.patterns import build_pattern
        from attnlab.layers.positional import check_positional

        super().__post_init__()
        require_positive(self, "max_positions")
        if self.positional_kinds is None:
            check_positional(self.positional)
        else:
            check_positional(self.positional, self.positional_kinds)
        for name, must_be_causal in self.pattern_fields.items():
            spec = getattr(self, name)
            try:
                pattern = build_pattern(spec)
            except ValueError as error:
                raise ValueError(f"{name}: {error}") from None
            causal = pattern.causal
            if must_be_causal and not causal:
                raise ValueError(f"{name}={spec!r} is not a causal pattern; this stack is decoded step by step")
            if self.positional == "none" and not (causal or pattern.encodes_positions):
                raise ValueError(f"positional='none' needs causal attention (nothing else tells positions apart) "
                                 f"or a relative pattern, but {name}={spec!r}")


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


def _type_name(annotation: Any) -> str:
    """How an error names what a field takes: ``bool`` -> "true or false"."""
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string", type(None): "none"}
    if annotation in names:
        return names[annotation]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(arg) for arg in typing.get_args(annotation))
    return f"of type {annotation}"


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


def check_weights(tensors, source: str, *, buffers: tuple[str, ...] = ()) -> None:
    """The one check every loader runs on the weights it reads, before they reach a model
    (attnlab's own directories, checkpoints, and every converter of another library's
    files): each tensor floating point and finite. ``tensors``: ``{name: tensor}`` as the
    file names them; ``source`` names the file in the ValueError. ``buffers``: name endings
    of integer bookkeeping tensors a foreign file may carry and the loader never uses
    (BERT's ``position_ids``); their dtype is not judged."""
    for name, tensor in tensors.items():
        if not tensor.is_floating_point():
            if name.endswith(buffers) and buffers:
                continue
            raise ValueError(f"{source}: tensor {name!r} has dtype {str(tensor.dtype).removeprefix('torch.')}; "
                             "weights must be floating point (float16, bfloat16, float32 or float64)")
        # A finite sum means every value is finite (NaN and infinity propagate through a sum), and
        # costs a twelfth of isfinite(); a sum that overflows is judged value by value.
        if tensor.numel() and not bool(torch.isfinite(tensor.sum())) and not bool(torch.isfinite(tensor).all()):
            raise ValueError(f"{source}: tensor {name!r} holds NaN or infinity; the model is unusable "
                             "(a diverged training run, or a damaged file?)")


def check_images(images, channels: int, size: int) -> None:
    """Raise ValueError unless ``images`` is a float ``(batch, channels, size, size)`` tensor
    (pixels scaled to [-1, 1], the input of the image models)."""
    expected = (channels, size, size)
    if images.dim() != 4 or tuple(images.shape[1:]) != expected:
        raise ValueError(f"images must be (batch, {', '.join(map(str, expected))}) floats in [-1, 1], "
                         f"got shape {tuple(images.shape)}")
    if not images.is_floating_point():
        raise ValueError(f"images must be floating point (pixels scaled to [-1, 1]), got {images.dtype}")


class AttnlabModel(nn.Module):
    """Base class of attnlab models: holds ``config`` and saves itself."""

    config_class: ClassVar[type[ModelConfig]]
    legacy_names: ClassVar[tuple[tuple[str, str], ...]] = ()
    """``(old prefix, new prefix)`` of parameter names an older attnlab saved, so that its
    model directories and checkpoints still load (see :meth:`load_state_dict`)."""

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

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """``nn.Module.load_state_dict`` that also accepts the parameter names of older
        versions (:attr:`legacy_names`)."""
        return super().load_state_dict(self.upgrade_state_dict(state_dict), strict=strict, assign=assign)

    def upgrade_state_dict(self, state_dict):
        """Rename keys an older version wrote; unchanged when every key is a current name."""
        own = self.state_dict()
        if not self.legacy_names or all(key in own for key in state_dict):
            return state_dict
        renamed = {}
        for key, value in state_dict.items():
            if key not in own:
                for old, new in self.legacy_names:
                    if key.startswith(old):
                        key = new + key[len(old):]
                        break
            renamed[key] = value
        # A tied tensor is stored once; keep it under the name safetensors' loader keeps
        # (the first in sorted order) when the file's name is an old one.
        groups: dict[int, list[str]] = {}
        for name, parameter in self.named_parameters(remove_duplicate=False):
            groups.setdefault(id(parameter), []).append(name)
        for names in groups.values():
            present = [name for name in names if name in renamed]
            if len(names) > 1 and present:
                value = renamed[present[0]]
                for name in names:
                    renamed.pop(name, None)
                renamed[sorted(names)[0]] = value
        return renamed

    quantized: str | None = None
    """The quantisation applied by :meth:`quantize` ("int8"), None for a float model."""

    def quantize(self, mode: str = "int8") -> "AttnlabModel":
        """Quantise the linear layers in place for CPU decoding and return the model (eval mode).
        ``mode``: "int8" (int8 weights, one scale per output row, torch's dynamically quantised
        linear kernel; see :mod:`attnlab.quantize`). Unknown modes raise ValueError."""
        from attnlab.quantize import quantize_model

        return quantize_model(self, mode)

    def save_pretrained(self, directory: str | os.PathLike, *, extra_files: dict[str, bytes] | None = None) -> Path:
        """Write ``config.json`` + ``model.safetensors`` (+ ``extra_files``) into ``directory``.

        Each file is written to a temporary name in the same directory and renamed into
        place, so an interrupted save never leaves a half-written file under the real name.
        Tied weights are stored once.
        """
        if getattr(self, "quantized", None):
            raise ValueError(f"a {self.quantized}-quantised model is for decoding only and cannot be saved; save the "
                             "float model and quantise it after loading")
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        config_bytes = (json.dumps(self.config.to_dict(), indent=2, sort_keys=True) + "\n").encode()
        files = {CONFIG_NAME: config_bytes, **(extra_files or {})}
        _atomic_write(directory / WEIGHTS_NAME, lambda path: save_model(self, str(path)),
                      size=tensors_size(self.state_dict()))  # a full disk says how much it needed
        for name, data in files.items():
            _atomic_write(directory / name, lambda path, data=data: Path(path).write_bytes(data))
        return directory
