"""The Vision Transformer: image classification, and the paper's figures."""

from attnlab.families import Family, register_family

FAMILY = register_family(Family(
    name="vit",
    config_family="vit",
    title="Vision Transformer",
    verbs={"classify": "attnlab.cli.classify", "evaluate-vit": "attnlab.cli.evaluate_vit",
           "vit-figures": "attnlab.cli.vit_figures"},
    train="attnlab.cli.vit",
    evaluate="evaluate-vit",
    pipeline="attnlab.pipelines.vision:ClassifierPipeline",
    explore="attnlab.families.vit.explore:load_source",
    onnx="attnlab.interop.onnx_export:vit_graph",
))
