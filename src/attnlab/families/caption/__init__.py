"""Image captioning: a ViT or CNN encoder, a Transformer decoder with cross-attention."""

from attnlab.families import Family, register_family

FAMILY = register_family(Family(
    name="caption",
    config_family="captioner",
    title="image captioner",
    verbs={"caption": "attnlab.cli.caption", "evaluate-caption": "attnlab.cli.evaluate_caption"},
    train="attnlab.cli.train_caption",
    evaluate="evaluate-caption",
    pipeline="attnlab.pipelines.vision:CaptionPipeline",
    explore="attnlab.families.caption.explore:load_source",
    onnx="attnlab.interop.onnx_export:captioner_graph",
))
