"""Decoder-only text-to-image: a VQ-VAE image tokenizer and one decoder over [text; image tokens]."""

from attnlab.families import Family, register_family

FAMILY = register_family(Family(
    name="text_to_image",
    config_family="text_to_image",
    title="text-to-image model",
    verbs={"imagine": "attnlab.families.text_to_image.imagine",
           "evaluate-text-to-image": "attnlab.families.text_to_image.evaluate"},
    train="attnlab.families.text_to_image.train",
    evaluate="evaluate-text-to-image",
    pipeline="attnlab.families.text_to_image.pipeline:TextToImagePipeline",
    explore="attnlab.families.text_to_image.explore:load_source",
    onnx="attnlab.interop.onnx_export:text_to_image_graph",
))
