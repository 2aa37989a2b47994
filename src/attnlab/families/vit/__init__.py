"""The Vision Transformer: image classification, and the paper's figures."""

from attnlab.families import Family, register_family

FAMILY = register_family(Family(
    name="vit",
    config_family="vit",
    title="Vision Transformer",
    verbs={"classify": "attnlab.families.vit.classify", "evaluate-vit": "attnlab.families.vit.evaluate",
           "vit-figures": "attnlab.families.vit.figures"},
    train="attnlab.families.vit.train",
    evaluate="evaluate-vit",
    pipeline="attnlab.families.vit.pipeline:ClassifierPipeline",
    attention="attnlab.families.vit.explore:attention",
    explore="attnlab.families.vit.explore:load_source",
    onnx="attnlab.families.vit.onnx:graph",
    recognise=("attnlab.interop.timm_vit:is_timm_vit_directory",),  # timm hub checkpoints (config.json + safetensors)
))
