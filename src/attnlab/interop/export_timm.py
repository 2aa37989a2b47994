"""attnlab's Vision Transformer as a timm checkpoint directory (and as HuggingFace's
``ViTForImageClassification`` where that layout is exact): :mod:`attnlab.interop.timm_vit`
read backwards.

Pixels. attnlab's ViT reads a uint8 pixel x as ``x / 127.5 - 1``, which is timm's
``(x / 255 - mean) / std`` with ``mean = std = 0.5`` per channel: the export of an attnlab
model says exactly that in ``pretrained_cfg``, with ``crop_mode`` "squash", ``crop_pct`` 1
and bicubic interpolation (attnlab resizes an image to the square, bicubic, and crops
nothing), so timm's own transforms (``timm.data.resolve_data_config`` +
``create_transform``) feed it the numbers attnlab feeds its model. A timm directory attnlab read has its ``mean``/``std``
folded into the patch embedding when it is loaded (``load_timm_vit``); the export reloads
it unfolded (``fold_normalisation=False``) and writes its weights and ``pretrained_cfg``
back as they were, so the round trip changes no weight.

The directory is timm's hub layout (``config.json`` with ``architecture``, ``model_args``,
``pretrained_cfg``, ``label_names``; ``model.safetensors`` with timm's names):
``timm.create_model(cfg["architecture"], pretrained=True,
pretrained_cfg_overlay=dict(file=".../model.safetensors"), **cfg["model_args"])`` opens
it, and so does attnlab (``attnlab.load``). The architecture is a registered timm ViT of
the same width family (``vit_tiny_patch16_224`` ...); ``model_args`` set every size.
"""

from __future__ import annotations

from pathlib import Path

from torch import Tensor

from attnlab.interop.export import Export, StateReader, json_bytes, refuse_differences

__all__ = ["hf_vit_export", "timm_export"]

_WIDTHS = {192: "tiny", 384: "small", 768: "base", 1024: "large"}


def _vit_problems(model, layout: str) -> list[str]:
    c = model.config
    problems = []
    if getattr(model, "quantized", None):
        problems.append(f"the model is {model.quantized}-quantised (export the float model)")
    if c.stem_channels:
        problems.append(f"stem_channels={list(c.stem_channels)}: the hybrid's convolutional stem is not in {layout}")
    if c.position_embedding != "learned":
        problems.append(f"position_embedding={c.position_embedding!r}: {layout} learns its position table")
    if not c.norm_first:
        problems.append(f"norm_first=false (post-LN): {layout}'s blocks are pre-LN")
    if c.activation != "gelu":
        problems.append(f"activation={c.activation!r}: {layout}'s MLP uses exact GELU")
    return problems


def _source_weights(pipeline):
    """(model, mean, std, label names, pretrained_cfg of the source or None): a timm directory
    reloaded with its normalisation unfolded, an attnlab ViT as it is (mean = std = 0.5)."""
    from attnlab.interop.timm_vit import is_timm_vit_directory, load_timm_vit

    source = Path(pipeline.directory)
    channels = pipeline.model.config.in_channels
    if is_timm_vit_directory(source):
        from attnlab.files import read_config_json

        model, classes = load_timm_vit(source, fold_normalisation=False)
        pretrained = dict((read_config_json(source) or {}).get("pretrained_cfg") or {})
        mean = pretrained.get("mean", [0.5] * channels)
        std = pretrained.get("std", [0.5] * channels)
        return model, list(mean), list(std), classes, pretrained
    return pipeline.model, [0.5] * channels, [0.5] * channels, list(pipeline.classes), None


def timm_export(pipeline) -> Export:
    """A Vision Transformer as a timm checkpoint directory (see the module docstring)."""
    from attnlab.interop.timm_vit import _BLOCK_KEYS

    model = pipeline.model
    c = model.config
    problems = _vit_problems(model, "timm's VisionTransformer")
    if c.layer_norm_eps != 1e-6:
        problems.append(f"layer_norm_eps={c.layer_norm_eps}: timm's ViT LayerNorms use 1e-6")
    mlp_ratio = c.d_ff / c.d_model
    if int(c.d_model * mlp_ratio) != c.d_ff:
        problems.append(f"d_ff={c.d_ff} is not int(d_model * mlp_ratio) for any ratio timm computes")
    refuse_differences(problems, "timm's VisionTransformer")

    model, mean, std, classes, pretrained = _source_weights(pipeline)
    state = StateReader(model)
    final = "norm" if c.pool == "token" else "fc_norm"
    tensors = {"patch_embed.proj.weight": state["patch_embed.proj.weight"],
               "patch_embed.proj.bias": state["patch_embed.proj.bias"],
               "pos_embed": state["position_embedding"],
               f"{final}.weight": state["norm.weight"], f"{final}.bias": state["norm.bias"]}
    if c.class_token:
        tensors["cls_token"] = state["class_token"]
    if c.num_classes:
        tensors["head.weight"], tensors["head.bias"] = state["head.weight"], state["head.bias"]
    for i in range(c.num_layers):
        for theirs, mine in _BLOCK_KEYS.items():
            suffixes = ("",) if theirs.endswith("gamma") else (".weight", ".bias")
            for suffix in suffixes:
                key = f"encoder.layers.{i}.{mine}{suffix}"
                if key in state:
                    tensors[f"blocks.{i}.{theirs}{suffix}"] = state[key]
    state.check_all_read("timm's VisionTransformer")
    size = _WIDTHS.get(c.d_model, "base")
    architecture = f"vit_{size}_patch16_224"
    model_args = {"img_size": c.image_size, "patch_size": c.patch_size, "in_chans": c.in_channels,
                  "num_classes": c.num_classes, "embed_dim": c.d_model, "depth": c.num_layers,
                  "num_heads": c.num_heads, "mlp_ratio": mlp_ratio, "class_token": c.class_token,
                  "global_pool": "token" if c.pool == "token" else "avg"}
    if c.layer_scale_init is not None:
        model_args["init_values"] = c.layer_scale_init  # any value makes LayerScale; the weights set the gains
    cfg = pretrained if pretrained is not None else {
        "tag": "attnlab", "custom_load": False, "input_size": [c.in_channels, c.image_size, c.image_size],
        "fixed_input_size": True, "interpolation": "bicubic", "crop_pct": 1.0, "crop_mode": "squash",
        "mean": mean, "std": std, "num_classes": c.num_classes, "pool_size": None,
        "first_conv": "patch_embed.proj", "classifier": "head"}
    config = {"architecture": architecture, "num_classes": c.num_classes, "num_features": c.d_model,
              "global_pool": model_args["global_pool"], "model_args": model_args, "pretrained_cfg": cfg,
              "label_names": list(classes)}
    notes = [f"pixels: timm's transforms for this pretrained_cfg compute (x/255 - mean)/std with mean={mean}, "
             f"std={std}" + (" = attnlab's x/127.5 - 1" if pretrained is None else
                             " (the checkpoint's own normalisation, unfolded from the patch embedding)")]
    return Export(tensors, {"config.json": json_bytes(config)},
                  f"timm.create_model({architecture!r}, pretrained=True, pretrained_cfg_overlay=dict(file=...), "
                  "**model_args) or attnlab.load", notes)


def hf_vit_export(pipeline) -> Export:
    """A Vision Transformer as HuggingFace's ``ViTForImageClassification`` (+ a
    ``preprocessor_config.json`` for ``ViTImageProcessor`` with the pixel normalisation),
    where that layout is exact: a class token read by the head, no LayerScale."""
    model = pipeline.model
    c = model.config
    problems = _vit_problems(model, "HuggingFace's ViT")
    if c.pool != "token" or not c.class_token:
        problems.append("pool='mean': ViTForImageClassification classifies the class token")
    if c.layer_scale_init is not None:
        problems.append("LayerScale (layer_scale_init): HuggingFace's ViT has none")
    if not c.num_classes:
        problems.append("num_classes=0: ViTForImageClassification needs a head")
    refuse_differences(problems, "HuggingFace's ViTForImageClassification")

    model, mean, std, classes, _ = _source_weights(pipeline)
    state = StateReader(model)
    d = c.d_model
    tensors = {"vit.embeddings.cls_token": state["class_token"],
               "vit.embeddings.position_embeddings": state["position_embedding"],
               "vit.embeddings.patch_embeddings.projection.weight": state["patch_embed.proj.weight"],
               "vit.embeddings.patch_embeddings.projection.bias": state["patch_embed.proj.bias"],
               "vit.layernorm.weight": state["norm.weight"], "vit.layernorm.bias": state["norm.bias"],
               "classifier.weight": state["head.weight"], "classifier.bias": state["head.bias"]}
    names = {"self_attn.out_proj": "attention.output.dense", "self_attn_norm": "layernorm_before",
             "ffn_norm": "layernorm_after", "ffn.linear1": "intermediate.dense", "ffn.linear2": "output.dense"}
    for i in range(c.num_layers):
        ours, theirs = f"encoder.layers.{i}.", f"vit.encoder.layer.{i}."
        for part in ("weight", "bias"):
            qkv = state[f"{ours}self_attn.qkv_proj.{part}"]
            for index, name in enumerate(("query", "key", "value")):
                tensors[f"{theirs}attention.attention.{name}.{part}"] = qkv[index * d:(index + 1) * d]
            for mine, hf_name in names.items():
                tensors[f"{theirs}{hf_name}.{part}"] = state[f"{ours}{mine}.{part}"]
    state.check_all_read("HuggingFace's ViTForImageClassification")
    config = {"architectures": ["ViTForImageClassification"], "model_type": "vit", "hidden_size": d,
              "num_hidden_layers": c.num_layers, "num_attention_heads": c.num_heads, "intermediate_size": c.d_ff,
              "hidden_act": "gelu", "hidden_dropout_prob": c.dropout,
              "attention_probs_dropout_prob": c.attention_dropout, "layer_norm_eps": c.layer_norm_eps,
              "image_size": c.image_size, "patch_size": c.patch_size, "num_channels": c.in_channels,
              "qkv_bias": True, "encoder_stride": c.patch_size, "initializer_range": 0.02,
              "id2label": {str(i): name for i, name in enumerate(classes)},
              "label2id": {name: i for i, name in enumerate(classes)},
              "dtype": str(tensors["vit.layernorm.weight"].dtype).removeprefix("torch.")}
    processor = {"image_processor_type": "ViTImageProcessor", "do_resize": True,
                 "size": {"height": c.image_size, "width": c.image_size}, "resample": 3, "do_rescale": True,
                 "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": mean, "image_std": std}
    notes = [f"pixels: ViTImageProcessor computes (x/255 - mean)/std with mean={mean}, std={std}"]
    return Export(tensors, {"config.json": json_bytes(config), "preprocessor_config.json": json_bytes(processor)},
                  "transformers.ViTForImageClassification + ViTImageProcessor", notes)
