"""Text classification with a BERT encoder: ``train text-classification`` (single texts or
pairs from a labelled TSV/CSV/JSONL file, from a BERT directory or from scratch),
``classify-text``, ``evaluate-text-classifier`` (what ``attnlab evaluate`` runs for these
models), the pipeline's ``classify``, the explorer and ONNX.

Its models are :class:`attnlab.models.bert.BertClassifier` (config family
``bert_classifier``); what it shares with the ``bert`` family (opening any BERT directory
for ``--init``, learning WordPiece vocabularies) is in :mod:`attnlab.tasks.bert`.
"""

from attnlab.families import Family, register_family

FAMILY = register_family(Family(
    name="text_classification",
    config_family="bert_classifier",
    title="BERT text classifier",
    verbs={"classify-text": "attnlab.families.text_classification.classify",
           "evaluate-text-classifier": "attnlab.families.text_classification.evaluate"},
    train="attnlab.families.text_classification.train",
    evaluate="evaluate-text-classifier",
    pipeline="attnlab.families.text_classification.pipeline:TextClassifierPipeline",
    attention="attnlab.viz.explorer.wordpiece:bert_attention",
    explore="attnlab.families.text_classification.explore:load_source",
    onnx="attnlab.families.text_classification.onnx:graph",
    exporters={"hf": "attnlab.families.text_classification.export:hf_export"},  # BertForSequenceClassification
))
