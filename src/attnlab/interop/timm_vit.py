"""timm's ``VisionTransformer`` -> attnlab's :class:`VisionTransformer` (a key map; no transposes).

timm is not a dependency of attnlab: the converter only reads the module it is given.
The layouts agree: timm's fused ``qkv`` Linear holds [q; k; v] with heads contiguous,
as ``qkv_proj`` does; its blocks are pre-LN with exact GELU, as the shared layer is.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import torch
from torch import nn

from attnlab.files import read_config_json
from attnlab.interop.weights import read_safetensors
from attnlab.models.base import check_weights
from attnlab.models.vit import VisionTransformer, VisionTransformerConfig

_BLOCK_KEYS = {
    "norm1": "self_attn_norm",
    "attn.qkv": "self_attn.qkv_proj",
    "attn.proj": "self_attn.out_proj",
    "ls1.gamma": "self_attn_scale",
    "norm2": "ffn_norm",
    "mlp.fc1": "ffn.linear1",
    "mlp.fc2": "ffn.linear2",
    "ls2.gamma": "ffn_scale",
}


def _refuse(condition: bool, feature: str) -> None:
    if condition:
        raise ValueError(f"from_timm_vit: this timm model uses {feature}, which attnlab's VisionTransformer lacks")


def from_timm_vit(timm_model: nn.Module) -> VisionTransformer:
    """An attnlab ViT computing the same logits as ``timm_model`` (a
    ``timm.models.vision_transformer.VisionTransformer``), in eval mode.

    Supported: class token or none, ``global_pool`` 'token' or 'avg', learned position
    embeddings covering the class token, LayerScale, any patch size, image size and
    channel count. Anything else (register tokens, QK-norm, attention pooling, a pre-norm,
    biases off, another activation or norm) raises ValueError naming it.
    """
    model = timm_model
    blocks = list(model.blocks)
    _refuse(not blocks, "no blocks")
    first = blocks[0]
    _refuse(getattr(model, "num_reg_tokens", 0) > 0, "register tokens")
    _refuse(getattr(model, "no_embed_class", False), "position embeddings without the class token (no_embed_class)")
    _refuse(not isinstance(model.norm_pre, nn.Identity), "a pre-encoder norm (pre_norm)")
    _refuse(model.global_pool not in ("token", "avg"), f"global_pool={model.global_pool!r}")
    _refuse(getattr(model, "attn_pool", None) is not None, "attention pooling")
    _refuse(model.pos_embed is None, "no absolute position embedding")
    _refuse(not isinstance(first.attn.q_norm, nn.Identity), "QK normalisation")
    _refuse(first.attn.qkv.bias is None, "qkv without bias")
    _refuse(not isinstance(getattr(first.attn, "norm", nn.Identity()), nn.Identity), "a norm inside attention")
    _refuse(not isinstance(getattr(first.mlp, "norm", nn.Identity()), nn.Identity), "a norm inside the MLP")
    _refuse(type(first.mlp.act) is not nn.GELU or first.mlp.act.approximate != "none", f"activation {first.mlp.act}")
    _refuse(not isinstance(first.norm1, nn.LayerNorm), f"norm {type(first.norm1).__name__}")
    _refuse(hasattr(model.patch_embed, "backbone"), "a hybrid patch embedding (a CNN backbone: timm's HybridEmbed)")
    _refuse(model.patch_embed.norm is not None and not isinstance(model.patch_embed.norm, nn.Identity),
            "a norm after the patch embedding")
    _refuse(getattr(model.patch_embed, "dynamic_img_pad", False), "dynamic image padding")
    pool = "token" if model.global_pool == "token" else "mean"
    final = model.norm if pool == "token" else model.fc_norm
    _refuse(not isinstance(final, nn.LayerNorm), "no final LayerNorm where attnlab has one")
    other = model.fc_norm if pool == "token" else model.norm
    _refuse(not isinstance(other, nn.Identity), "both a final norm and an fc_norm")
    height, width = model.patch_embed.img_size
    patch_h, patch_w = model.patch_embed.patch_size
    _refuse(height != width or patch_h != patch_w, f"non-square images or patches ({height}x{width}, "
                                                   f"{patch_h}x{patch_w})")
    head = model.head
    num_classes = 0 if isinstance(head, nn.Identity) else head.out_features
    uses_layer_scale = not isinstance(first.ls1, nn.Identity)

    config = VisionTransformerConfig(
        image_size=height, patch_size=patch_h, in_channels=model.patch_embed.proj.in_channels,
        num_classes=num_classes, d_model=model.embed_dim, num_layers=len(blocks), num_heads=first.attn.num_heads,
        d_ff=first.mlp.fc1.out_features, class_token=model.cls_token is not None, pool=pool,
        layer_scale_init=1.0 if uses_layer_scale else None, layer_norm_eps=first.norm1.eps,
    )
    return _load_timm_state(config, model.state_dict(), "from_timm_vit",
                            final_prefix="norm" if pool == "token" else "fc_norm")


def _load_timm_state(config: VisionTransformerConfig, source, origin: str, *, final_prefix: str) -> VisionTransformer:
    """A VisionTransformer of ``config`` holding timm's ``source`` state dict (renamed)."""
    ours = VisionTransformer(config)
    state = {
        "patch_embed.proj.weight": source["patch_embed.proj.weight"],
        "patch_embed.proj.bias": source["patch_embed.proj.bias"],
        "position_embedding": source["pos_embed"],
        "norm.weight": source[f"{final_prefix}.weight"],
        "norm.bias": source[f"{final_prefix}.bias"],
    }
    if config.class_token:
        state["class_token"] = source["cls_token"]
    if config.num_classes:
        state["head.weight"], state["head.bias"] = source["head.weight"], source["head.bias"]
    for index in range(config.num_layers):
        for theirs, mine in _BLOCK_KEYS.items():
            for suffix in ("", ".weight", ".bias"):
                key = f"blocks.{index}.{theirs}{suffix}"
                if key in source and (suffix or theirs.endswith("gamma")):
                    state[f"encoder.layers.{index}.{mine}{suffix}"] = source[key]
    check_weights(state, origin)  # the check every loader runs (floating point, finite)
    with torch.no_grad():
        missing, unexpected = ours.load_state_dict({k: v.detach().clone() for k, v in state.items()}, strict=False)
    if missing or unexpected:
        raise ValueError(f"{origin}: unmatched parameters: missing {sorted(missing)}, "
                         f"unexpected {sorted(unexpected)}")
    return ours.eval()


# timm's plain ViT architectures: vit_<size>_patch<P>_<image size>[.<pretrained tag>]; heads by size
# (timm's vision_transformer.py model functions), checked against the weights' widths.
_TIMM_ARCH = re.compile(r"^vit_(tiny|small|base|large|huge)_patch(\d+)_(\d+)(?:\.[\w.-]+)?$")
_TIMM_SIZES = {"tiny": (192, 3), "small": (384, 6), "base": (768, 12), "large": (1024, 16), "huge": (1280, 16)}
# model_args timm may record that this converter understands (their values are read from the weights)
_TIMM_ARGS = {"img_size", "patch_size", "in_chans", "num_classes", "embed_dim", "depth", "num_heads", "mlp_ratio",
              "global_pool", "class_token", "init_values", "fc_norm"}


def is_timm_vit_directory(directory: str | os.PathLike) -> bool:
    """Whether ``directory`` holds a timm hub ``config.json`` naming a ViT architecture
    (what ``timm.models.save_for_hf`` writes and the HuggingFace hub serves for timm models)."""
    return _is_timm_vit_config(read_config_json(directory))


def _is_timm_vit_config(values: dict | None) -> bool:
    return (values is not None and isinstance(values.get("architecture"), str)
            and values["architecture"].startswith("vit_") and "family" not in values and "model_type" not in values)


def load_timm_vit(directory: str | os.PathLike, *, device: str = "cpu",
                  fold_normalisation: bool = True) -> tuple[VisionTransformer, list[str]]:
    """``(model, class names)`` of a timm ViT checkpoint directory (``config.json`` with its
    ``architecture`` and ``pretrained_cfg``, ``model.safetensors``), without timm: the
    shapes come from the weights, the head count from the architecture's size (or
    ``model_args``). timm normalises pixels with the checkpoint's ``mean``/``std``;
    attnlab's ViT reads uint8 pixels as ``x / 127.5 - 1`` — the difference is a per-channel
    affine map, folded into the patch embedding here (exactly: the patch projection is
    linear and unpadded), so the model takes attnlab's pixels and gives timm's logits.
    A ``pytorch_model.bin`` is never read (it is a pickle). ``fold_normalisation=False``
    keeps the checkpoint's weights as they are (the model then takes timm's normalised
    pixels): what ``attnlab export --format timm`` writes back."""
    directory = Path(directory)
    values = read_config_json(directory)  # read once, size-capped
    if not _is_timm_vit_config(values):
        raise ValueError(f"{directory}: not a timm ViT directory (config.json naming a vit_* architecture)")
    config_path, weights_path = directory / "config.json", directory / "model.safetensors"
    architecture = values["architecture"]
    match = _TIMM_ARCH.match(architecture)
    if match is None:
        raise ValueError(f"{config_path}: architecture {architecture!r}: attnlab converts timm's plain ViTs "
                         "(vit_tiny|small|base|large|huge_patchP_S)")
    for field in ("model_args", "pretrained_cfg"):
        if not isinstance(values.get(field) or {}, dict):
            raise ValueError(f"{config_path}: {field} must be an object, got {values[field]!r}")
    model_args = values.get("model_args") or {}
    unknown = sorted(set(model_args) - _TIMM_ARGS) if isinstance(model_args, dict) else ["(not an object)"]
    if unknown:
        raise ValueError(f"{config_path}: model_args {unknown}: options attnlab's ViT does not have")
    source = read_safetensors(directory, "timm")
    for key, feature in (("reg_token", "register tokens"), ("blocks.0.attn.q_norm.weight", "QK normalisation"),
                         ("norm_pre.weight", "a pre-encoder norm"), ("attn_pool.latent", "attention pooling"),
                         ("patch_embed.norm.weight", "a norm after the patch embedding")):
        if key in source:
            raise ValueError(f"{weights_path}: this timm ViT uses {feature}, which attnlab's VisionTransformer lacks")
    for key in ("patch_embed.proj.weight", "patch_embed.proj.bias", "pos_embed", "blocks.0.mlp.fc1.weight",
                "blocks.0.attn.qkv.bias"):
        if key not in source:
            raise ValueError(f"{weights_path}: the timm ViT weights have no {key!r}")
    projection = source["patch_embed.proj.weight"]
    d_model, channels, patch, patch_w = projection.shape
    depth = len({key.split(".")[1] for key in source if key.startswith("blocks.")})
    class_token = "cls_token" in source
    grid = source["pos_embed"].shape[1] - int(class_token)
    side = math.isqrt(grid)
    if patch != patch_w or side * side != grid:
        raise ValueError(f"{weights_path}: non-square patches or image grid ({patch}x{patch_w}, {grid} positions)")
    size, default_heads = match.group(1), _TIMM_SIZES[match.group(1)][1]
    heads = model_args.get("num_heads", default_heads if d_model == _TIMM_SIZES[size][0] else None)
    if "num_heads" in model_args and (isinstance(heads, bool) or not isinstance(heads, int) or heads <= 0
                                      or d_model % heads):
        raise ValueError(f"{config_path}: model_args num_heads={heads!r} must be a whole number that divides the "
                         f"width {d_model}")
    if isinstance(heads, bool) or not isinstance(heads, int) or heads <= 0 or d_model % heads:
        raise ValueError(f"{config_path}: width {d_model} is not {size}'s {_TIMM_SIZES[size][0]} and model_args gives "
                         "no num_heads that divides it")
    pool = "mean" if "fc_norm.weight" in source else "token"
    if pool == "token" and not class_token:
        raise ValueError(f"{weights_path}: token pooling without a class token")
    config = VisionTransformerConfig.from_dict(dict(
        image_size=side * patch, patch_size=patch, in_channels=channels,
        num_classes=source["head.weight"].shape[0] if "head.weight" in source else 0, d_model=d_model,
        num_layers=depth, num_heads=heads, d_ff=source["blocks.0.mlp.fc1.weight"].shape[0], class_token=class_token,
        pool=pool, layer_scale_init=1.0 if "blocks.0.ls1.gamma" in source else None, layer_norm_eps=1e-6),
        source=str(config_path))
    model = _load_timm_state(config, source, str(weights_path), final_prefix="norm" if pool == "token" else "fc_norm")
    pretrained = values.get("pretrained_cfg") or {}
    if fold_normalisation:
        _fold_normalisation(model, pretrained.get("mean", (0.5,) * channels),
                            pretrained.get("std", (0.5,) * channels), str(config_path))
    return model.to(device).eval(), _class_names(values, config.num_classes)


@torch.no_grad()
def _fold_normalisation(model: VisionTransformer, mean, std, source: str) -> None:
    """Make the patch embedding of ``model`` take attnlab's pixels (y = x/127.5 - 1) where
    timm's took (x/255 - mean)/std: with x/255 = (y + 1)/2, that input is
    y/(2 std) + (1/2 - mean)/std per channel, so W' = W/(2 std) and b' = b + Σ W (1/2 - mean)/std."""
    channels = model.patch_embed.proj.weight.shape[1]
    try:
        mean, std = (torch.tensor([float(v) for v in values], dtype=torch.float64) for values in (mean, std))
    except (TypeError, ValueError):
        raise ValueError(f"{source}: pretrained_cfg mean/std must be lists of numbers") from None
    if mean.numel() != channels or std.numel() != channels or not bool((std > 0).all()) \
            or not bool(torch.isfinite(mean).all() & torch.isfinite(std).all()):
        raise ValueError(f"{source}: pretrained_cfg mean/std need {channels} finite values (std > 0)")
    proj = model.patch_embed.proj
    weight = proj.weight.double()
    shift = ((0.5 - mean) / std).view(1, channels, 1, 1)
    proj.bias.copy_((proj.bias.double() + (weight * shift).sum((1, 2, 3))).to(proj.bias.dtype))
    proj.weight.copy_((weight / (2 * std).view(1, channels, 1, 1)).to(proj.weight.dtype))


def _class_names(values: dict, count: int) -> list[str]:
    """``label_names`` of a timm config (a list, or a dict from index), else "0", "1", ..."""
    names = values.get("label_names")
    if isinstance(names, dict):
        names = [names.get(str(i), names.get(i, str(i))) for i in range(count)]
    if not isinstance(names, list) or len(names) != count:
        return [str(i) for i in range(count)]
    return [str(name) for name in names]
