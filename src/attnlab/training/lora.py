"""LoRA: low-rank adapters on a trained model's linear layers (Hu et al. 2021, "LoRA: Low-Rank
Adaptation of Large Language Models"; the anchor is peft's ``LoraConfig`` / ``merge_and_unload``).

A chosen linear layer ``y = x W^T + b`` (W frozen) becomes

    y = x W^T + b + (alpha / r) · dropout(x) A^T B^T,      A (r, in), B (out, r)

with A initialised as peft does (Kaiming-uniform, a = sqrt(5)) and B zero, so the adapted
model starts as exactly the model it was given. Only A and B train (and whatever the caller
names in ``trainable``, e.g. a new classification head); everything else is frozen.
:func:`merge_lora` folds ``(alpha / r) B A`` into W and puts plain :class:`attnlab.linear.Linear`
layers back, so the result is a plain model (its ``state_dict`` names are the original ones;
``save_pretrained`` and every loader work unchanged).

The targets: ``"attention"`` = the joint qkv projection and the output projection of every
:class:`~attnlab.attention.multihead.MultiHeadAttention` (self and cross); ``"ffn"`` = both
linears of every :class:`~attnlab.layers.feedforward.FeedForward`. The adapted layer keeps
its base weight and bias as its own ``weight`` / ``bias`` (so a checkpoint of a LoRA run holds
the base names plus ``lora_A`` / ``lora_B``); the cross-attention row slices of the joint
projection go through ``forward_rows``, and a decode step of a model not yet merged multiplies
``merged_weights()`` (one tensor per layer, written again when the adapter changed), both
found by :mod:`attnlab.linear`'s ``linear_rows`` / ``step_weights``.

Adapters apart (``--lora-keep``): :func:`save_lora` writes ``lora.safetensors`` (the adapters
and the parameters trained in full) and ``lora.json`` (the config and those names);
:func:`load_lora` applies and loads them onto the same base model. Nothing is pickled.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.attention.multihead import MultiHeadAttention
from attnlab.files import atomic_write, atomic_write_json, read_json_object
from attnlab.layers.feedforward import FeedForward
from attnlab.linear import Linear, derived_key

__all__ = ["LORA_TARGETS", "LoraConfig", "LoraLinear", "LoraReport", "apply_lora", "merge_lora", "lora_state_dict",
           "save_lora", "load_lora", "has_lora", "lora_record", "read_lora_record", "LORA_WEIGHTS_FILE",
           "LORA_CONFIG_FILE"]

LORA_TARGETS = ("attention", "ffn")
LORA_WEIGHTS_FILE = "lora.safetensors"
LORA_CONFIG_FILE = "lora.json"
_FORMAT = "attnlab-lora"
_MAX_JSON_BYTES = 1 << 20


@dataclass(frozen=True)
class LoraConfig:
    """Which layers get adapters, of what rank and scale.

    Args:
        rank: r, at least 1 and at most every adapted layer's ``min(in, out)``.
        alpha: the scale is ``alpha / rank``; None = ``2 * rank`` (a common choice: a scale
            of 2 whatever the rank; peft's own default is ``lora_alpha=8``).
        targets: a subset of ``("attention", "ffn")``.
        dropout: dropout on the adapters' input, in training only (peft's ``lora_dropout``).
    The errors name the command-line flags (``--lora``, ``--lora-alpha``, ...).
    """

    rank: int
    alpha: float | None = None
    targets: tuple[str, ...] = ("attention",)
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise ValueError(f"--lora: the rank must be a whole number of at least 1, got {self.rank!r}")
        if self.alpha is not None and (isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float))
                                       or not math.isfinite(self.alpha) or self.alpha <= 0):
            raise ValueError(f"--lora-alpha must be a positive number, got {self.alpha!r}")
        targets = (self.targets,) if isinstance(self.targets, str) else tuple(self.targets)
        if not targets:
            raise ValueError(f"--lora-targets: name at least one of {', '.join(LORA_TARGETS)}")
        unknown = [target for target in targets if target not in LORA_TARGETS]
        if unknown:
            raise ValueError(f"--lora-targets: unknown target {unknown[0]!r}; choose from {', '.join(LORA_TARGETS)}")
        object.__setattr__(self, "targets", tuple(dict.fromkeys(targets)))
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) \
                or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"--lora-dropout must be in [0, 1), got {self.dropout!r}")

    @property
    def lora_alpha(self) -> float:
        """alpha as used: the given one, or ``2 * rank``."""
        return float(self.alpha) if self.alpha is not None else 2.0 * self.rank

    @property
    def scale(self) -> float:
        return self.lora_alpha / self.rank

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "alpha": self.lora_alpha, "targets": list(self.targets), "dropout": self.dropout}

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "LoRA config") -> "LoraConfig":
        known = {"rank", "alpha", "targets", "dropout"}
        unknown = sorted(set(values) - known)
        if unknown or "rank" not in values:
            raise ValueError(f"{source}: " + (f"unknown field {unknown[0]!r}" if unknown else "no 'rank'"))
        targets = values.get("targets", ["attention"])
        if not isinstance(targets, list) or not all(isinstance(target, str) for target in targets):
            raise ValueError(f"{source}: 'targets' must be a list of names, got {targets!r}")
        try:
            return cls(rank=values["rank"], alpha=values.get("alpha"), targets=tuple(targets),
                       dropout=values.get("dropout", 0.0))
        except ValueError as error:
            raise ValueError(f"{source}: {error}") from None


class LoraLinear(Linear):
    """A :class:`~attnlab.linear.Linear` with a low-rank adapter: ``x W^T + b + scale · (drop(x) A^T) B^T``.

    Built from an existing layer, whose ``weight`` and ``bias`` parameters it keeps (the same
    tensors, frozen by :func:`apply_lora`); ``lora_A`` ``(r, in)`` Kaiming-uniform, ``lora_B``
    ``(out, r)`` zero."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, dropout: float = 0.0):
        nn.Module.__init__(self)  # not nn.Linear's: the base layer's weight is reused, not allocated
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight = base.weight
        self.bias = base.bias
        factory = {"dtype": base.weight.dtype, "device": base.weight.device}
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features, **factory))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank, **factory))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # as peft (nn.Linear's default init)
        self.rank, self.alpha, self.scale, self.lora_dropout = rank, float(alpha), float(alpha) / rank, float(dropout)
        self.train(base.training)

    def _low_rank(self, x: Tensor, lora_B: Tensor) -> Tensor:
        if self.training and self.lora_dropout > 0:
            x = F.dropout(x, self.lora_dropout, training=True)
        return F.linear(F.linear(x, self.lora_A), lora_B)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias) + self.scale * self._low_rank(x, self.lora_B)

    def forward_rows(self, x: Tensor, start: int, stop: int) -> Tensor:
        """Output features ``start:stop`` only (cross-attention's slices of the joint projection)."""
        bias = self.bias
        return F.linear(x, self.weight[start:stop], None if bias is None else bias[start:stop]) \
            + self.scale * self._low_rank(x, self.lora_B[start:stop])

    @torch.no_grad()
    def delta_weight(self) -> Tensor:
        """``scale · B A`` ``(out, in)``: what merging adds to the weight."""
        return (self.lora_B @ self.lora_A).mul_(self.scale)

    def merged_weights(self) -> tuple[Tensor, Tensor | None]:
        """``(W + scale · B A, bias)``, detached: what a decode step multiplies by. A normal
        tensor even when asked inside ``torch.inference_mode`` (generation), since the step
        paths key their derived copies on its version counter
        (:func:`~attnlab.linear.derived_key`).

        One tensor per layer, kept while W, A, B (their derived keys) and ``scale`` are unchanged,
        and then written again in place: its version counter moves at every new value, so a key of
        it never comes back (a new tensor per value could land on a freed one's storage, version 0:
        the key of values long gone, and an ahead-of-time package holding those would run them)."""
        inputs = (derived_key(self.weight), derived_key(self.lora_A), derived_key(self.lora_B), self.scale)
        kept = self.__dict__.get("_merged")
        if kept is not None and kept[0] == inputs:
            return kept[1], self.bias
        with torch.inference_mode(False), torch.no_grad():
            merged = self.weight.detach() + self.delta_weight()
            if kept is not None and (kept[1].shape, kept[1].dtype, kept[1].device) == \
                    (merged.shape, merged.dtype, merged.device):
                merged = kept[1].copy_(merged)
        self._merged = (inputs, merged)
        return merged, self.bias

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, rank={self.rank}, alpha={self.alpha:g}, dropout={self.lora_dropout:g}"


@dataclass(frozen=True)
class LoraReport:
    """What :func:`apply_lora` did: the parameters that train, of how many, and where the adapters are."""

    config: LoraConfig
    attention_layers: int
    ffn_layers: int
    trainable: int
    total: int
    trained_in_full: tuple[str, ...] = ()

    @property
    def layers(self) -> int:
        return self.attention_layers + self.ffn_layers

    def describe(self) -> str:
        """One line, e.g. ``LoRA r=8 alpha=16 on 24 attention projections: 442,368 trainable of
        124,882,944 parameters (0.35 %)`` (the total counts the adapters)."""
        where = [f"{count} {what}" for count, what in ((self.attention_layers, "attention projections"),
                                                        (self.ffn_layers, "feed-forward linears")) if count]
        extra = f" (and {', '.join(self.trained_in_full)} in full)" if self.trained_in_full else ""
        share = 100.0 * self.trainable / self.total if self.total else 0.0
        return (f"LoRA r={self.config.rank} alpha={self.config.lora_alpha:g} on {' and '.join(where)}{extra}: "
                f"{self.trainable:,} trainable of {self.total:,} parameters ({share:.2f} %)")


def has_lora(model: nn.Module) -> bool:
    """Whether ``model`` holds LoRA adapters not yet merged."""
    return any(isinstance(module, LoraLinear) for module in model.modules())


def _targets(model: nn.Module, config: LoraConfig) -> list[tuple[str, nn.Module, str, str]]:
    """(qualified name, parent, attribute, kind) of every linear layer ``config`` adapts."""
    found = []
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        if isinstance(module, MultiHeadAttention) and "attention" in config.targets:
            found += [(prefix + attribute, module, attribute, "attention") for attribute in ("qkv_proj", "out_proj")]
        elif isinstance(module, FeedForward) and "ffn" in config.targets:
            found += [(prefix + attribute, module, attribute, "ffn") for attribute in ("linear1", "linear2")]
    return found


def _count(parameters: Iterable[nn.Parameter]) -> int:
    return sum(p.numel() for p in {id(p): p for p in parameters}.values())


def apply_lora(model: nn.Module, config: LoraConfig, *, trainable: Iterable[str] = ()) -> LoraReport:
    """Put adapters on the linear layers ``config`` names and freeze everything else.

    Args:
        trainable: parameter names or name prefixes (as in ``model.named_parameters()``,
            e.g. ``"head"`` for a new classification head) that train in full beside the
            adapters; each must name at least one parameter.
    Returns:
        a :class:`LoraReport` (``describe()``: the one line a run prints).
    Raises ValueError, naming the flag, for a rank larger than a layer's ``min(in, out)``,
    targets the model does not have, or a model that already has adapters; the model is
    then unchanged.
    """
    if not isinstance(config, LoraConfig):
        raise TypeError(f"config must be a LoraConfig, got {type(config).__name__}")
    if has_lora(model):
        raise ValueError("the model already has LoRA adapters (merge them first, or load the adapters onto the "
                         "base model)")
    trainable = tuple(trainable)
    found = _targets(model, config)
    if not found:
        raise ValueError(f"--lora-targets {','.join(config.targets)}: {type(model).__name__} has no such layers "
                         f"(attention = MultiHeadAttention projections, ffn = FeedForward linears)")
    for name, parent, attribute, _ in found:
        linear = getattr(parent, attribute)
        if type(linear) is not Linear and type(linear) is not nn.Linear:
            raise ValueError(f"{name} is a {type(linear).__name__}, not a float linear layer LoRA can adapt")
        smaller = min(linear.in_features, linear.out_features)
        if config.rank > smaller:
            raise ValueError(f"--lora {config.rank} is larger than {name}'s smaller side "
                             f"(min(in, out) = {smaller}); choose a rank of at most {smaller}")
    named = list(model.named_parameters(remove_duplicate=False))
    unmatched = [t for t in trainable if not any(n == t or n.startswith(t + ".") for n, _ in named)]
    if unmatched:
        raise ValueError(f"trainable: {unmatched[0]!r} names no parameter of {type(model).__name__}")

    before = {name: p.requires_grad for name, p in model.named_parameters()}
    keep = {id(p) for n, p in named if any(n == t or n.startswith(t + ".") for t in trainable)}
    for _, p in named:
        p.requires_grad_(id(p) in keep)
    adapted: dict[int, LoraLinear] = {}
    for _, parent, attribute, _ in found:
        linear = getattr(parent, attribute)
        if id(linear) not in adapted:  # a layer shared by two parents gets one adapter
            adapted[id(linear)] = LoraLinear(linear, config.rank, config.lora_alpha, config.dropout)
        setattr(parent, attribute, adapted[id(linear)])
    _drop_step_plans(model)
    model._lora = {"config": config, "requires_grad": before, "trainable": trainable}
    parameters = list(model.parameters())
    return LoraReport(config=config, attention_layers=sum(kind == "attention" for *_, kind in found),
                      ffn_layers=sum(kind == "ffn" for *_, kind in found),
                      trainable=_count(p for p in parameters if p.requires_grad), total=_count(parameters),
                      trained_in_full=trainable)


def _drop_step_plans(model: nn.Module) -> None:
    # Decode-step plans gathered the weights as they were; the next decode gathers them again.
    for module in model.modules():
        if "_step_plan" in vars(module):
            module._step_plan = None


@torch.no_grad()
def merge_lora(model: nn.Module) -> nn.Module:
    """Fold each adapter into its weight (``W += (alpha / r) B A``), put plain
    :class:`~attnlab.linear.Linear` layers back and restore which parameters train: a plain
    model with the original ``state_dict`` names (peft's ``merge_and_unload``). In place;
    returns ``model``."""
    replaced: dict[int, Linear] = {}
    for parent in list(model.modules()):
        for attribute, child in list(parent.named_children()):
            if not isinstance(child, LoraLinear):
                continue
            if id(child) not in replaced:
                child.weight.add_(child.delta_weight().to(child.weight.dtype))
                plain = Linear.__new__(Linear)
                nn.Module.__init__(plain)
                plain.in_features, plain.out_features = child.in_features, child.out_features
                plain.weight, plain.bias = child.weight, child.bias
                plain.train(child.training)
                replaced[id(child)] = plain
            setattr(parent, attribute, replaced[id(child)])
    state = getattr(model, "_lora", None)
    if state is not None:
        for name, parameter in model.named_parameters():
            parameter.requires_grad_(state["requires_grad"].get(name, True))
        del model._lora
    _drop_step_plans(model)
    return model


def lora_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """The adapters (``*.lora_A``, ``*.lora_B``) and the parameters trained in full
    (``apply_lora``'s ``trainable``), detached, by their names in ``model.state_dict()``."""
    if not has_lora(model):
        raise ValueError("the model has no LoRA adapters")
    trainable = getattr(model, "_lora", {}).get("trainable", ())
    return {name: tensor.detach() for name, tensor in model.state_dict().items()
            if name.endswith((".lora_A", ".lora_B")) or any(name == t or name.startswith(t + ".") for t in trainable)}


def save_lora(model: nn.Module, directory: str | os.PathLike) -> Path:
    """Write the adapters apart (``--lora-keep``): ``directory/lora.safetensors`` and
    ``directory/lora.json`` (the config and the names trained in full), each atomically. The
    caller has checked ``directory`` against the output rule. Call before :func:`merge_lora`."""
    import safetensors.torch

    tensors = {name: tensor.contiguous() for name, tensor in lora_state_dict(model).items()}
    state = model._lora
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write(directory / LORA_WEIGHTS_FILE,
                 lambda tmp: safetensors.torch.save_file(tensors, tmp, metadata={"format": "pt"}))
    atomic_write_json(directory / LORA_CONFIG_FILE, lora_record(state["config"], state["trainable"]))
    return directory


def lora_record(config: LoraConfig, trainable: Iterable[str] = ()) -> dict[str, Any]:
    """The JSON record of a LoRA config and the names trained in full: ``lora.json`` of
    :func:`save_lora`, and a LoRA run's ``lora_run.json`` (attnlab.models.registry.LORA_RUN_FILE)."""
    return {"format": _FORMAT, **config.to_dict(), "trainable": list(trainable)}


def read_lora_record(path: str | os.PathLike) -> tuple[LoraConfig, list[str]]:
    """``(config, trainable)`` from a file :func:`lora_record` wrote; ValueError naming the file."""
    values = read_json_object(path, max_bytes=_MAX_JSON_BYTES, what="a LoRA config object")
    if values.pop("format", None) != _FORMAT:
        raise ValueError(f"{path}: not an attnlab LoRA config (no format {_FORMAT!r})")
    trainable = values.pop("trainable", [])
    if not isinstance(trainable, list) or not all(isinstance(name, str) for name in trainable):
        raise ValueError(f"{path}: 'trainable' must be a list of parameter names")
    return LoraConfig.from_dict(values, str(path)), trainable


def load_lora(model: nn.Module, directory: str | os.PathLike) -> LoraReport:
    """Apply the adapters :func:`save_lora` wrote in ``directory`` to ``model`` (the base model
    they were trained on) and load their values; every tensor must be there with its shape.
    Returns the :class:`LoraReport`; :func:`merge_lora` then gives the fine-tuned model."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    directory = Path(directory)
    config_path, weights_path = directory / LORA_CONFIG_FILE, directory / LORA_WEIGHTS_FILE
    for path in (config_path, weights_path):
        if not path.is_file():
            raise ValueError(f"{path}: no such file (a LoRA directory holds {LORA_CONFIG_FILE} and "
                             f"{LORA_WEIGHTS_FILE})")
    config, trainable = read_lora_record(config_path)
    try:
        tensors = load_file(str(weights_path))
    except (SafetensorError, OSError) as error:
        raise ValueError(f"{weights_path}: not a readable safetensors file: {error}") from None
    report = apply_lora(model, config, trainable=trainable)
    expected = lora_state_dict(model)
    missing, unexpected = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
    reshaped = [name for name in set(expected) & set(tensors) if expected[name].shape != tensors[name].shape]
    problem = (f"{len(missing)} tensor(s) missing (e.g. {missing[0]!r})" if missing else
               f"{len(unexpected)} unexpected tensor(s) (e.g. {unexpected[0]!r})" if unexpected else
               f"{reshaped[0]!r} is {tuple(tensors[reshaped[0]].shape)} in the file, "
               f"{tuple(expected[reshaped[0]].shape)} in the model" if reshaped else None)
    bad = next((name for name, tensor in tensors.items()
                if not tensor.is_floating_point() or not bool(torch.isfinite(tensor).all())), None)
    if problem is None and bad is not None:
        problem = f"{bad!r} is not a finite floating-point tensor"
    if problem is not None:
        merge_lora(model)  # undo apply_lora: B may be zero still, so the weights are unchanged
        raise ValueError(f"{weights_path}: does not fit this model: {problem}")
    parameters = dict(model.named_parameters(remove_duplicate=False))
    with torch.no_grad():
        for name, tensor in tensors.items():
            parameters[name].copy_(tensor)
    return report
