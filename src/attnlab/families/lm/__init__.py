"""GPT-style decoder-only language models."""

from attnlab.families import Family, register_family

FAMILY = register_family(Family(
    name="lm",
    config_family="decoder_lm",
    title="language model (decoder-only)",
    verbs={"generate": "attnlab.cli.generate", "evaluate-lm": "attnlab.cli.evaluate_lm"},
    train="attnlab.cli.train_lm",
    evaluate="evaluate-lm",
    pipeline="attnlab.pipelines.text:LanguageModelPipeline",
    explore="attnlab.viz.explorer.maps:load_lm_source",
    onnx="attnlab.interop.onnx_export:lm_graph",
    recognise=("attnlab.interop.hf_gpt2:is_hf_gpt2_directory",),  # HuggingFace GPT-2 directories
))
