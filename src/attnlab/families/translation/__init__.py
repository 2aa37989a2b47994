"""The encoder–decoder Transformer of "Attention Is All You Need": translation."""

from attnlab.families import Family, register_family

FAMILY = register_family(Family(
    name="translation",
    config_family="transformer",
    title="translation (encoder-decoder Transformer)",
    verbs={"translate": "attnlab.cli.translate", "attention": "attnlab.cli.attention"},
    train="attnlab.cli.train_translation",
    evaluate="evaluate",  # attnlab evaluate itself scores translation models
    pipeline="attnlab.pipelines.text:TranslationPipeline",
    explore="attnlab.viz.explorer.maps:load_translation_source",
    onnx="attnlab.interop.onnx_export:translation_graph",
    recognise=("attnlab.interop.hf_marian:is_hf_marian_directory",),  # OPUS-MT directories
))
