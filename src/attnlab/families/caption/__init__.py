"""Image captioning: a ViT or CNN encoder, a Transformer decoder with cross-attention."""

from attnlab.families import Family, register_family

FAMILY = register_family(Family(
    name="caption",
    config_family="captioner",
    title="image captioner",
    verbs={"caption": "attnlab.families.caption.caption",
           "evaluate-caption": "attnlab.families.caption.evaluate"},
    train="attnlab.families.caption.train",
    evaluate="evaluate-caption",
    pipeline="attnlab.families.caption.pipeline:CaptionPipeline",
    attention="attnlab.families.caption.explore:attention",
    explore="attnlab.families.caption.explore:load_source",
    onnx="attnlab.families.caption.onnx:graph",
))
