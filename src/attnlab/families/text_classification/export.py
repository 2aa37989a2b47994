"""``attnlab export --format hf`` of a text classifier: transformers'
``BertForSequenceClassification`` (the BERT export of :func:`attnlab.interop.export_hf.bert_export`
with the classifier's head, its labels as ``id2label``/``label2id``)."""

from __future__ import annotations

__all__ = ["hf_export"]


def hf_export(pipeline):
    """The classifier's :class:`~attnlab.interop.export.Export`: the encoder and pooler under
    ``bert.``, the head as ``classifier.weight``/``classifier.bias`` (the dropout before it has
    no weights), the labels in ``config.json``, the WordPiece files beside."""
    from attnlab.interop.export_hf import bert_export

    labels = list(pipeline.labels)

    def head(state, config):
        tensors = {"classifier.weight": state["classifier.weight"], "classifier.bias": state["classifier.bias"]}
        fields = {"num_labels": len(labels), "id2label": dict(enumerate(labels)),
                  "label2id": {label: index for index, label in enumerate(labels)},
                  "problem_type": "single_label_classification", "classifier_dropout": None}
        return tensors, "BertForSequenceClassification", fields

    return bert_export(pipeline, head=head)
