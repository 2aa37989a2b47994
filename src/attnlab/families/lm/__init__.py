"""GPT-style decoder-only language models.

The package holds what is only this family's: task.py (texts, tokenizers, windows,
held-out scoring), train.py (``attnlab train lm``), generate.py (``generate``, with
Continuation), evaluate.py (``evaluate-lm``) and pipeline.py (``attnlab.load``). Opening a
model directory is the core's :func:`attnlab.tasks.lm.load_language_model`; the loss and the
windowed scoring are shared with music (training/losses.py, evaluation/windows.py).
"""

from attnlab.families import Family, register_family

FAMILY = register_family(Family(
    name="lm",
    config_family="decoder_lm",
    title="language model (decoder-only)",
    verbs={"generate": "attnlab.families.lm.generate", "evaluate-lm": "attnlab.families.lm.evaluate"},
    train="attnlab.families.lm.train",
    evaluate="evaluate-lm",
    pipeline="attnlab.families.lm.pipeline:LanguageModelPipeline",
    attention="attnlab.viz.explorer.maps:decoder_lm_attention",
    explore="attnlab.families.lm.explore:load_source",
    onnx="attnlab.families.lm.onnx:graph",
    recognise=("attnlab.interop.hf_gpt2:is_hf_gpt2_directory",),  # HuggingFace GPT-2 directories
))
