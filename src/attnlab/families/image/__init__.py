"""The Image Transformer: local 1D/2D attention; generation, completion, super-resolution."""

from attnlab.families import Family, register_family

FAMILY = register_family(Family(
    name="image",
    config_family="image_transformer",
    title="Image Transformer",
    verbs={"sample-images": "attnlab.cli.sample_images", "complete-image": "attnlab.cli.complete_image",
           "super-resolve": "attnlab.cli.super_resolve", "evaluate-image": "attnlab.cli.evaluate_image"},
    train="attnlab.cli.image",
    evaluate="evaluate-image",
    pipeline="attnlab.pipelines.vision:ImageTransformerPipeline",
    explore="attnlab.families.image.explore:load_source",
    onnx="attnlab.interop.onnx_export:image_transformer_graph",
))
