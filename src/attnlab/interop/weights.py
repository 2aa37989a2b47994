"""The last step of every converter: copy renamed weights into a fresh attnlab model."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.models.base import check_weights

# Integer bookkeeping tensors other libraries save beside the weights and no converter
# reads: BERT's position ids, old GPT-2 files' attention-mask buffers, batch-norm counters.
FOREIGN_BUFFERS = ("position_ids", "attn.bias", "attn.masked_bias", "num_batches_tracked")


def pickle_refusal(directory: str | os.PathLike, what: str) -> str:
    """The message for a directory whose weights are only a pickled ``pytorch_model.bin``:
    attnlab never unpickles a file it is given; how to convert it once, where the file is trusted."""
    bin_path = Path(directory) / "pytorch_model.bin"
    return (f"{Path(directory) / 'model.safetensors'}: no such file; attnlab reads {what} weights as safetensors, "
            f"and {bin_path.name} is a pickle, which attnlab never loads (unpickling runs code). Convert it once, "
            f"on a machine where you trust the file: python -c \"import torch, safetensors.torch as s; "
            f"s.save_file({{k: v.clone().contiguous() for k, v in torch.load('{bin_path}', weights_only=True)"
            f".items()}}, '{Path(directory) / 'model.safetensors'}')\" (or transformers' "
            f"from_pretrained(...).save_pretrained(..., safe_serialization=True))")


def read_safetensors(directory: str | os.PathLike, what: str) -> dict[str, Tensor]:
    """``directory/model.safetensors`` as a state dict, checked as attnlab's own weights are
    (:func:`attnlab.models.base.check_weights`: floating point and finite, naming the
    tensor as the file names it). ValueError naming the file when it is missing (with how
    to convert a ``pytorch_model.bin``, which attnlab never unpickles), unreadable or
    refused. ``what`` names the weights in the message ("timm")."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(directory) / "model.safetensors"
    if not path.is_file():
        if (Path(directory) / "pytorch_model.bin").is_file():
            raise ValueError(pickle_refusal(directory, what))
        if (Path(directory) / "model.safetensors.index.json").is_file():
            raise ValueError(f"{path}: no such file; the {what} weights are split into shards "
                             "(model.safetensors.index.json), and attnlab reads one model.safetensors")
        raise ValueError(f"{path}: no such file; attnlab reads {what} weights as safetensors")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError) as error:
        raise ValueError(f"{path}: not a readable safetensors file (truncated or foreign?): {error}") from None
    check_weights(tensors, str(path), buffers=FOREIGN_BUFFERS)
    return tensors


@torch.no_grad()
def copy_converted_weights(model_class: Callable[[Any], nn.Module], config: Any, weights: Mapping[str, Tensor],
                           source: str, origin: str) -> nn.Module:
    """``model_class(config)`` with ``weights`` (attnlab parameter names) copied in, in eval mode.

    Every parameter must be given exactly once (a tied parameter appears once, under its
    first name) with its shape; otherwise ValueError names ``source`` and the offending
    keys. ``origin`` names the other library's weights in messages ("the GPT-2 weights").
    The names and shapes are checked on the meta device first, so a config that does not
    match its weights (a huge vocabulary beside a small file) is refused before the model
    is allocated.
    """
    with torch.device("meta"):
        expected = {name: parameter.shape for name, parameter in model_class(config).named_parameters()}
    missing, extra = set(expected) - set(weights), set(weights) - set(expected)
    if missing or extra:
        raise ValueError(f"{source}: weights do not fit the config: missing {sorted(missing)}, "
                         f"unexpected {sorted(extra)}")
    check_weights(weights, source)  # a converted model's weights too (from_hf_*(a loaded model))
    for name, value in weights.items():
        if expected[name] != value.shape:
            raise ValueError(f"{source}: {name} has shape {tuple(value.shape)} in {origin} but "
                             f"{tuple(expected[name])} in the config")
    model = model_class(config)
    parameters = dict(model.named_parameters())
    for name, value in weights.items():
        parameters[name].copy_(value)
    return model.eval()


def foreign_config(config_class, values: Mapping[str, Any], source: str, names: Mapping[str, str]):
    """``config_class.from_dict(values)`` (types, caps and ranges checked as for attnlab's
    own configs) for a config converted from another library's ``config.json``: its
    errors name the file's own fields (``names``: attnlab field -> the file's field,
    ``n_layer`` for ``num_layers``), not attnlab's class and field names."""
    import re

    try:
        return config_class.from_dict(dict(values), source=source)
    except (TypeError, ValueError) as error:
        message = str(error)
        prefix = f"{source}: "
        body = message[len(prefix):] if message.startswith(prefix) else message
        body = body.replace(f"{config_class.__name__}.", "")
        if names:
            body = re.sub(r"\b(" + "|".join(map(re.escape, names)) + r")\b", lambda m: names[m.group(1)], body)
        raise ValueError(prefix + body) from None


def foreign_int(value: Any, field: str, source: str, *, minimum: int = 0) -> int:
    """A whole number read from another library's file (not a bool, a float or a string),
    at least ``minimum``; ValueError naming ``source`` and the file's ``field``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{source}: {field}={value!r} is not an integer")
    if value < minimum:
        raise ValueError(f"{source}: {field}={value} must be at least {minimum}")
    return value


def foreign_flag(value: Any, field: str, source: str) -> bool:
    """A true/false field of another library's file: a JSON ``"false"`` string is not true."""
    if not isinstance(value, bool):
        raise ValueError(f"{source}: {field}={value!r} is not true or false")
    return value


def read_foreign_json(path: str | os.PathLike, *, max_bytes: int | None = None) -> dict:
    """A JSON object file of another library's directory (``config.json``,
    ``tokenizer_config.json``, ``generation_config.json``, ``vocab.json``), read as attnlab's
    own are (:func:`attnlab.files.read_json_object`: size-capped, by default at a config's
    1 MiB, depth-safe, an object): every error is one line naming the file."""
    from attnlab.files import MAX_CONFIG_BYTES, read_json_object

    try:
        return read_json_object(path, max_bytes=MAX_CONFIG_BYTES if max_bytes is None else max_bytes)
    except OSError as error:
        raise ValueError(f"{path}: not a readable JSON file ({error.strerror or error})") from None
