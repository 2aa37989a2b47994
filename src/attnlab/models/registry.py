"""Model classes and presets: ``create_model``, ``list_presets``, ``load_model``.

:func:`register_model_class` maps a config family (the ``family`` stored in
``config.json``) to a config class and a model class (the family packages' registry,
:mod:`attnlab.families`, is another one: it says what the commands do with those models).
A *preset* is a tiny function named after a paper's setting that returns a config.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_model as _load_safetensors

from attnlab.files import MAX_CONFIG_BYTES, read_json_object, recover_directory
from attnlab.models.base import CONFIG_NAME, WEIGHTS_NAME, AttnlabModel, ModelConfig, check_weights

_FLOAT_DTYPES = {"F16", "BF16", "F32", "F64"}
_MODEL_CLASSES: dict[str, type[AttnlabModel]] = {}
_PRESETS: dict[str, Callable[[], ModelConfig]] = {}


def register_model_class(model_class: type[AttnlabModel]) -> type[AttnlabModel]:
    """Class decorator: make ``model_class`` loadable by its config's ``family`` name. (The
    model-class registry; a model *family* — verbs, pipeline, explorer, ONNX — registers with
    :func:`attnlab.families.register_family`.)"""
    _MODEL_CLASSES[model_class.config_class.family] = model_class
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


def known_families() -> list[str]:
    """Names of the registered model families (the ``family`` of a ``config.json``)."""
    _ensure_registered()
    return sorted(_MODEL_CLASSES)


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
    return _MODEL_CLASSES[config.family]


def create_model(name: str, **overrides) -> AttnlabModel:
    """Build a freshly initialised model from preset ``name``, e.g.
    ``create_model('transformer_base', vocab_size=37000)``."""
    config = get_preset(name, **overrides)
    return model_class_for(config)(config)


def require_model_directory(directory: str | os.PathLike, flag: str | None = None, known: str = "") -> Path:
    """``directory`` as a Path where it is a directory, else ValueError naming it (after ``flag``): the one
    check of every verb and loader given a model directory. A file given for its directory (``config.json``
    or the weights) is told which directory to give; ``known``: what follows "no such model directory"."""
    path = Path(directory)
    if path.is_dir():
        return path
    name = f"{flag} {path}" if flag else str(path)
    if path.is_file():
        raise ValueError(f"{name}: a file, not a model directory; a saved model directory holds {CONFIG_NAME} and "
                         f"the weights: give the directory ({path.parent})")
    raise ValueError(f"{name}: no such model directory{known}")


def load_config(directory: str | os.PathLike) -> ModelConfig:
    """Read ``config.json`` of a saved model directory."""
    _ensure_registered()
    if not Path(directory).exists():
        # A run killed while replacing this directory leaves it under a hidden name: put it back.
        for message in recover_directory(directory):
            print(f"attnlab: {message}", file=sys.stderr, flush=True)
    if Path(directory).is_file():
        require_model_directory(directory)
    path = Path(directory) / CONFIG_NAME
    if not path.is_file():
        raise ValueError(f"{path}: no such file; a saved attnlab model directory holds {CONFIG_NAME} and {WEIGHTS_NAME}")
    values = read_json_object(path, max_bytes=MAX_CONFIG_BYTES, what="a JSON object naming the model family")
    family = values.get("family")
    if family is None and values.get("model_type") == "bert":
        raise ValueError(f"{path}: a HuggingFace BERT directory (a HuggingFace config, model_type='bert'), not an "
                         "attnlab one: load it with attnlab.load(directory) (a BERT pipeline) or "
                         "attnlab.interop.hf_bert.load_hf_bert")
    if family is None and "model_type" in values:
        raise ValueError(f"{path}: a HuggingFace config (model_type={values['model_type']!r}), not an attnlab "
                         "model directory; attnlab.load(directory) and the verbs read HuggingFace BERT, GPT-2 and "
                         "MarianMT directories, and attnlab.interop converts other models")
    if family not in _MODEL_CLASSES:
        raise ValueError(f"{path}: unknown model family {family!r}; known families: {sorted(_MODEL_CLASSES)}")
    return _MODEL_CLASSES[family].config_class.from_dict(values, source=str(path))


def _check_weights_fit(config: ModelConfig, weights: Path) -> None:
    """Before allocating anything: the file holds floating-point tensors only, and the
    parameter count ``config.json`` implies (counted on the meta device, which allocates
    nothing) is not far beyond the number of values the file holds."""
    try:
        with safe_open(str(weights), framework="pt") as file:
            stored = 0
            for key in file.keys():
                piece = file.get_slice(key)
                dtype = piece.get_dtype()
                if dtype not in _FLOAT_DTYPES:
                    raise ValueError(f"{weights}: tensor {key!r} has dtype {dtype}; attnlab weights are "
                                     f"floating point ({', '.join(sorted(_FLOAT_DTYPES))})")
                stored += math.prod(piece.get_shape())
    except SafetensorError as error:
        raise ValueError(f"{weights}: not a readable safetensors file (truncated or foreign?): {error}") from None
    with torch.device("meta"):
        implied = model_class_for(config)(config).num_parameters()
    if implied > 2 * stored + 4096:  # near misses get the exact missing/unexpected names below
        raise ValueError(f"{weights.parent / CONFIG_NAME}: the config implies {implied:,d} parameters, but {weights} "
                         f"holds {stored:,d} values; the config and the weights do not belong together")


def load_model(directory: str | os.PathLike, *, device: str = "cpu") -> AttnlabModel:
    """Rebuild a model saved with ``save_pretrained``. Reads only JSON and safetensors
    (no pickle); a truncated, foreign or mismatched weights file raises ValueError."""
    config = load_config(directory)
    weights = Path(directory) / WEIGHTS_NAME
    if not weights.is_file():
        raise ValueError(f"{weights}: no such file")
    _check_weights_fit(config, weights)
    model = model_class_for(config)(config)
    lora_scale = lora_run_scale(directory)
    try:
        if lora_scale is None:
            missing, unexpected = _load_safetensors(model, str(weights), strict=False, device=device)
        else:  # a checkpoint of a LoRA run: its adapters merged into the weights
            missing, unexpected = _load_merged(model, weights, lora_scale, device)
    except SafetensorError as error:
        raise ValueError(f"{weights}: not a readable safetensors file (truncated or foreign?): {error}") from None
    except RuntimeError as error:  # shape mismatches
        raise ValueError(f"{weights}: weights do not fit the model in {CONFIG_NAME}: {error}") from None
    if lora_scale is None and any(name.endswith((".lora_A", ".lora_B")) for name in unexpected):
        raise ValueError(f"{weights}: holds LoRA adapters (lora_A/lora_B) but {Path(directory) / LORA_RUN_FILE} is "
                         "missing, which records their scale; open the run's OUT/model (merged) instead")
    if missing or unexpected:
        raise ValueError(f"{weights}: weights do not fit the model in {CONFIG_NAME}: "
                         f"missing {sorted(missing)}, unexpected {sorted(unexpected)}")
    check_weights(dict(model.named_parameters()), str(weights))  # the check every loader runs
    return model.to(device).eval()


LORA_RUN_FILE = "lora_run.json"
"""In each checkpoint of a LoRA run (and its OUT): the LoRA config (training/lora.py's
``LoraConfig.to_dict()``, format ``attnlab-lora``, and the names trained in full). A checkpoint
holds the base weights and the adapters unmerged (so ``--resume`` continues them); wherever it
is opened as a model (:func:`load_model`: ``attnlab.load``, ``--init``, every verb; checkpoint
averaging) the adapters are merged with the scale recorded here."""


def lora_run_scale(directory: str | os.PathLike) -> float | None:
    """The LoRA scale (alpha / rank) recorded in ``directory``'s :data:`LORA_RUN_FILE`, or None
    where there is none; ValueError naming the file when it is malformed."""
    path = Path(directory) / LORA_RUN_FILE
    if not path.is_file():
        return None
    values = read_json_object(path, max_bytes=MAX_CONFIG_BYTES, what="a LoRA config object")
    rank, alpha = values.get("rank"), values.get("alpha")
    if values.get("format") != "attnlab-lora" or isinstance(rank, bool) or not isinstance(rank, int) or rank < 1 \
            or isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) \
            or alpha <= 0:
        raise ValueError(f"{path}: not an attnlab LoRA record (format 'attnlab-lora', a whole rank >= 1, a "
                         "positive alpha)")
    return float(alpha) / rank


def _load_merged(model: AttnlabModel, weights: Path, scale: float, device: str) -> tuple[list[str], list[str]]:
    """Load a LoRA checkpoint's ``weights`` into ``model`` with the adapters merged
    (:func:`attnlab.linear.merge_low_rank`); (missing, unexpected) as safetensors' load_model
    (a tied weight stored once is not missing)."""
    from safetensors.torch import load_file

    from attnlab.linear import merge_low_rank

    tensors = merge_low_rank(load_file(str(weights), device=device), scale, source=str(weights))
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    state = model.state_dict()
    loaded = {state[name].data_ptr() for name in tensors if name in state}
    return [name for name in missing if state[name].data_ptr() not in loaded], list(unexpected)

