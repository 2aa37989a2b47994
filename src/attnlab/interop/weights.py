"""The last step of every converter: copy renamed weights into a fresh attnlab model."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn


@torch.no_grad()
def copy_converted_weights(model: nn.Module, weights: Mapping[str, Tensor], source: str, origin: str) -> nn.Module:
    """Copy ``weights`` (attnlab parameter names) into ``model`` and return it in eval mode.

    Every parameter must be given exactly once (a tied parameter appears once, under its
    first name) with its shape; otherwise ValueError names ``source`` and the offending
    keys. ``origin`` names the other library's weights in messages ("the GPT-2 weights").
    """
    parameters = dict(model.named_parameters())
    missing, extra = set(parameters) - set(weights), set(weights) - set(parameters)
    if missing or extra:
        raise ValueError(f"{source}: weights do not fit the config: missing {sorted(missing)}, "
                         f"unexpected {sorted(extra)}")
    for name, value in weights.items():
        if parameters[name].shape != value.shape:
            raise ValueError(f"{source}: {name} has shape {tuple(value.shape)} in {origin} but "
                             f"{tuple(parameters[name].shape)} in the config")
        parameters[name].copy_(value)
    return model.eval()
