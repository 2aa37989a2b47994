"""The encoder-only BERT family: masked-LM pre-training, sentence embeddings, masked-token
scoring, attention.

The package holds what is only this family's: train.py (``attnlab train bert``) and
task.py (its windows, masking and loss), embed.py (``attnlab embed``), evaluate.py
(``attnlab evaluate-bert``) and pipeline.py (``attnlab.load``); reading HuggingFace BERT
directories is a converter of the core (attnlab.interop.hf_bert), and what the text
classifier (attnlab.families.text_classification) shares with it is in attnlab.tasks.bert.
"""

from attnlab.families import Family, register_family

FAMILY = register_family(Family(
    name="bert",
    config_family="bert",
    title="BERT encoder",
    verbs={"embed": "attnlab.families.bert.embed", "evaluate-bert": "attnlab.families.bert.evaluate"},
    train="attnlab.families.bert.train",
    evaluate="evaluate-bert",
    pipeline="attnlab.families.bert.pipeline:BertPipeline",
    attention="attnlab.viz.explorer.wordpiece:bert_attention",
    explore="attnlab.families.bert.explore:load_source",
    onnx="attnlab.families.bert.onnx:graph",
    recognise=("attnlab.interop.hf_bert:is_hf_bert_directory",),  # HuggingFace BERT directories
))
