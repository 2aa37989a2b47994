"""timm's ``VisionTransformer`` -> attnlab's :class:`VisionTransformer` (a key map; no transposes).

timm is not a dependency of attnlab: the converter only reads the module it is given.
The layouts agree: timm's fused ``qkv`` Linear holds [q; k; v] with heads contiguous,
as ``qkv_proj`` does; its blocks are pre-LN with exact GELU, as the shared layer is.
"""

from __future__ import annotations

import torch
from torch import nn

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
    ours = VisionTransformer(config)
    source = model.state_dict()
    state = {
        "patch_embed.proj.weight": source["patch_embed.proj.weight"],
        "patch_embed.proj.bias": source["patch_embed.proj.bias"],
        "position_embedding": source["pos_embed"],
        "norm.weight": final.weight,
        "norm.bias": final.bias,
    }
    if config.class_token:
        state["class_token"] = source["cls_token"]
    if num_classes:
        state["head.weight"], state["head.bias"] = source["head.weight"], source["head.bias"]
    for index in range(len(blocks)):
        for theirs, mine in _BLOCK_KEYS.items():
            for suffix in ("", ".weight", ".bias"):
                key = f"blocks.{index}.{theirs}{suffix}"
                if key in source and (suffix or theirs.endswith("gamma")):
                    state[f"encoder.layers.{index}.{mine}{suffix}"] = source[key]
    with torch.no_grad():
        missing, unexpected = ours.load_state_dict({k: v.detach().clone() for k, v in state.items()}, strict=False)
    if missing or unexpected:
        raise ValueError(f"from_timm_vit: unmatched parameters: missing {sorted(missing)}, "
                         f"unexpected {sorted(unexpected)}")
    return ours.eval()
