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
    attention="attnlab.families.text_to_image.explore:attention",
    explore="attnlab.families.text_to_image.explore:load_source",
    onnx="attnlab.families.text_to_image.onnx:graph",
    parts_not_exported={
        "vqvae": "the VQ-VAE is the text-to-image model's image tokenizer (its codebook lookup is an argmin "
                 "over distances with a straight-through estimator); export the text-to-image model's "
                 "directory instead",
        "scene_attributes": "the scene-attribute reader is text-to-image's fidelity judge, not a model to "
                            "deploy",
    },
))
