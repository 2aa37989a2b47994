"""The last step of every converter: copy renamed weights into a fresh attnlab model."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

def read_safetensors(directory: str | os.PathLike, what: str) -> dict[str, Tensor]:
    """``directory/model.safetensors`` as a state dict; ValueError naming the file when it is
    missing (saying so when only a pickled ``pytorch_model.bin`` is there: attnlab does not
    unpickle it) or unreadable. ``what`` names the weights in the message ("timm")."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(directory) / "model.safetensors"
    if not path.is_file():
        pickled = " (pytorch_model.bin is a pickle, which attnlab never loads)" if (
            Path(directory) / "pytorch_model.bin").is_file() else ""
        raise ValueError(f"{path}: no such file; attnlab reads {what} weights as safetensors{pickled}")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as error:
        raise ValueError(f"{path}: not a readable safetensors file (truncated or foreign?): {error}") from None


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
    for name, value in weights.items():
        if expected[name] != value.shape:
            raise ValueError(f"{source}: {name} has shape {tuple(value.shape)} in {origin} but "
                             f"{tuple(expected[name])} in the config")
    model = model_class(config)
    parameters = dict(model.named_parameters())
    for name, value in weights.items():
        parameters[name].copy_(value)
    return model.eval()
