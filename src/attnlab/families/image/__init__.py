"""The Image Transformer: local 1D/2D attention; generation, completion, super-resolution."""

from attnlab.families import Family, register_family

FAMILY = register_family(Family(
    name="image",
    config_family="image_transformer",
    title="Image Transformer",
    verbs={"sample-images": "attnlab.families.image.sample", "complete-image": "attnlab.families.image.complete",
           "super-resolve": "attnlab.families.image.super_resolve",
           "evaluate-image": "attnlab.families.image.evaluate"},
    train="attnlab.families.image.train",
    evaluate="evaluate-image",
    pipeline="attnlab.families.image.pipeline:ImageTransformerPipeline",
    attention="attnlab.families.image.explore:attention",
    explore="attnlab.families.image.explore:load_source",
    onnx="attnlab.families.image.onnx:graph",
))
