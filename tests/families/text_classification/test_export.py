"""``attnlab export --format hf`` of a text classifier: transformers'
``BertForSequenceClassification`` opens it and gives attnlab's logits (float64), with the
labels and the tokenizer (issue 38: a classifier leaves attnlab too)."""

from __future__ import annotations

import json

import pytest
import torch

import attnlab
from attnlab.cli.main import main

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "man", "is", "playing", "guitar", "the", "dog", "runs",
         "cat", "sleeps", ".", ",", "##s", "on", "mat"]
LABELS = ["comedies", "histories", "tragedies"]


@pytest.fixture
def classifier_dir(tmp_path):
    from attnlab.families.text_classification.task import LABELS_FILE, labels_file_bytes

    torch.manual_seed(0)
    model = attnlab.create_model("bert_classifier_tiny", vocab_size=len(WORDS), max_positions=32, num_labels=3)
    with torch.no_grad():  # a head that is not all zeros, so the logits differ by label
        model.classifier.bias.normal_()
    directory = model.save_pretrained(tmp_path / "model")
    (directory / "vocab.txt").write_text("\n".join(WORDS) + "\n", encoding="utf-8")
    (directory / LABELS_FILE).write_bytes(labels_file_bytes(LABELS, False))
    return directory


def test_a_classifier_becomes_a_bert_for_sequence_classification(classifier_dir, tmp_path, capsys):
    out = tmp_path / "hf"
    assert main(["export", "--model", str(classifier_dir), "--format", "hf", "-o", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    hf = transformers.BertForSequenceClassification.from_pretrained(str(out)).eval().double()
    assert [hf.config.id2label[i] for i in range(3)] == LABELS
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(out))
    ours = attnlab.load(classifier_dir)
    ours.model.double()
    texts = ["a man is playing guitar .", "the cat sleeps on the mat"]
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        theirs = hf(**batch).logits
        mine = ours.model.classify(batch["input_ids"], attention_mask=batch["attention_mask"].bool(),
                                   token_type_ids=batch["token_type_ids"])
    torch.testing.assert_close(theirs, mine, rtol=1e-10, atol=1e-10)
    # the pipeline tokenizes with attnlab's WordPiece, transformers with the exported files: same answer
    probabilities = ours.probabilities(texts).double()
    torch.testing.assert_close(probabilities, theirs.softmax(-1), rtol=1e-5, atol=1e-6)


def test_without_its_head_nothing_is_dropped(classifier_dir):
    """The plain BERT exporter refuses a classifier (its head has no place there)."""
    from attnlab.interop.export_hf import bert_export

    with pytest.raises(ValueError, match="classifier"):
        bert_export(attnlab.load(classifier_dir))
