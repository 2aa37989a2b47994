"""The encoder-only BERT family: sentence embeddings, masked-token scoring, attention."""

from attnlab.families import Family, register_family

FAMILY = register_family(Family(
    name="bert",
    config_family="bert",
    title="BERT encoder",
    verbs={"embed": "attnlab.cli.embed", "evaluate-bert": "attnlab.families.bert.evaluate"},
    evaluate="evaluate-bert",
    pipeline="attnlab.pipelines.text:BertPipeline",
    explore="attnlab.viz.explorer.maps:load_bert_source",
    onnx="attnlab.interop.onnx_export:bert_graph",
    recognise=("attnlab.interop.hf_bert:is_hf_bert_directory",),  # HuggingFace BERT directories
))
