"""The encoder–decoder Transformer of "Attention Is All You Need": translation.

The package holds what is only this family's: task.py (corpora -> vocabulary -> Trainer ->
model directory), translator.py (Translator), train.py (``attnlab train translation``),
translate.py and attention.py (its verbs), evaluate.py (what ``attnlab evaluate`` runs for
a translation model) and pipeline.py (``attnlab.load``). ``attnlab.translation`` is the
documented public path of its Python API.
"""

from attnlab.families import Family, register_family

FAMILY = register_family(Family(
    name="translation",
    config_family="transformer",
    title="translation (encoder-decoder Transformer)",
    verbs={"translate": "attnlab.families.translation.translate",
           "attention": "attnlab.families.translation.attention"},
    train="attnlab.families.translation.train",
    # attnlab evaluate itself scores translation models (cli/evaluate.py runs this family's
    # attnlab.families.translation.evaluate)
    evaluate="evaluate",
    pipeline="attnlab.families.translation.pipeline:TranslationPipeline",
    attention="attnlab.families.translation.explore:attention",
    explore="attnlab.families.translation.explore:load_source",
    onnx="attnlab.families.translation.onnx:graph",
    onnx_parts=("encoder", "decoder"),  # beside OUT.onnx: OUT.encoder.onnx, OUT.decoder.onnx
    recognise=("attnlab.interop.hf_marian:is_hf_marian_directory",),  # OPUS-MT directories
))
