"""Damaged copies of a model directory's weights for the loaders' refusal tests:
``damage_weights(directory, "int" | "nan" | "inf")`` rewrites ``model.safetensors`` with its
largest floating-point tensor turned into integers, or holding one NaN / infinity, and
returns that tensor's name as the file names it."""

from __future__ import annotations

from pathlib import Path

import torch


def damage_weights(directory: str | Path, kind: str) -> str:
    from safetensors.torch import load_file, save_file

    path = Path(directory) / "model.safetensors"
    tensors = load_file(str(path))
    name = max((k for k, v in tensors.items() if v.is_floating_point()), key=lambda k: tensors[k].numel())
    value = tensors[name].clone()
    if kind == "int":
        value = (value * 100).round().to(torch.int64)
    else:
        value.view(-1)[value.numel() // 2] = float("nan") if kind == "nan" else float("inf")
    tensors[name] = value
    save_file(tensors, str(path), metadata={"format": "pt"})
    return name


def nested_json(depth: int = 100_000) -> str:
    """A JSON object nested ``depth`` deep (small in bytes, too deep for a recursive parser)."""
    return '{"a":' * depth + "1" + "}" * depth
