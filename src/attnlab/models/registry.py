"""Model families and presets: ``create_model``, ``list_presets``, ``load_model``.

A *family* maps a name (stored in ``config.json``) to a config class and a model class.
A *preset* is a tiny function named after a paper's setting that returns a config.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from safetensors import SafetensorError
from safetensors.torch import load_model as _load_safetensors

from attnlab.models.base import CONFIG_NAME, WEIGHTS_NAME, AttnlabModel, ModelConfig

_FAMILIES: dict[str, type[AttnlabModel]] = {}
_PRESETS: dict[str, Callable[[], ModelConfig]] = {}


def register_family(model_class: type[AttnlabModel]) -> type[AttnlabModel]:
    """Class decorator: make ``model_class`` loadable by its config's ``family`` name."""
    _FAMILIES[model_class.config_class.family] = model_class
    return model_class


def register_preset(fn: Callable[[], ModelConfig]) -> Callable[[], ModelConfig]:
    """Decorator: register a preset under the function's name."""
    if fn.__name__ in _PRESETS:
        raise ValueError(f"preset {fn.__name__!r} is registered twice")
    _PRESETS[fn.__name__] = fn
    return fn


def _ensure_registered() -> None:
    # Importing the model modules runs their @register_* decorators.
    import attnlab.models  # noqa: F401


def list_presets() -> list[str]:
    """Names of all registered presets, sorted."""
    _ensure_registered()
    return sorted(_PRESETS)


def get_preset(name: str, **overrides) -> ModelConfig:
    """The config of preset ``name`` with ``overrides`` applied."""
    _ensure_registered()
    if name not in _PRESETS:
        raise ValueError(f"unknown preset {name!r}; available presets: {', '.join(sorted(_PRESETS))}")
    config = _PRESETS[name]()
    return config.replace(**overrides) if overrides else config


def model_class_for(config: ModelConfig) -> type[AttnlabModel]:
    _ensure_registered()
    return _FAMILIES[config.family]


def create_model(name: str, **overrides) -> AttnlabModel:
    """Build a freshly initialised model from preset ``name``, e.g.
    ``create_model('transformer_base', vocab_size=37000)``."""
    config = get_preset(name, **overrides)
    return model_class_for(config)(config)


def load_config(directory: str | os.PathLike) -> ModelConfig:
    """Read ``config.json`` of a saved model directory."""
    _ensure_registered()
    path = Path(directory) / CONFIG_NAME
    if not path.is_file():
        raise ValueError(f"{path}: no such file; a saved attnlab model directory holds {CONFIG_NAME} and {WEIGHTS_NAME}")
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not a valid JSON config ({error})") from None
    family = values.get("family") if isinstance(values, dict) else None
    if family not in _FAMILIES:
        raise ValueError(f"{path}: unknown model family {family!r}; known families: {sorted(_FAMILIES)}")
    return _FAMILIES[family].config_class.from_dict(values, source=str(path))


def load_model(directory: str | os.PathLike, *, device: str = "cpu") -> AttnlabModel:
    """Rebuild a model saved with ``save_pretrained``. Reads only JSON and safetensors
    (no pickle); a truncated, foreign or mismatched weights file raises ValueError."""
    config = load_config(directory)
    model = model_class_for(config)(config)
    weights = Path(directory) / WEIGHTS_NAME
    if not weights.is_file():
        raise ValueError(f"{weights}: no such file")
    try:
        missing, unexpected = _load_safetensors(model, str(weights), strict=False, device=device)
    except SafetensorError as error:
        raise ValueError(f"{weights}: not a readable safetensors file (truncated or foreign?): {error}") from None
    except RuntimeError as error:  # shape mismatches
        raise ValueError(f"{weights}: weights do not fit the model in {CONFIG_NAME}: {error}") from None
    if missing or unexpected:
        raise ValueError(f"{weights}: weights do not fit the model in {CONFIG_NAME}: "
                         f"missing {sorted(missing)}, unexpected {sorted(unexpected)}")
    return model.to(device).eval()
