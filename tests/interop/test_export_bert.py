"""`attnlab export --format hf` of BERT: the real all-MiniLM-L6-v2 goes back exactly (every
weight, every tokenizer file) and transformers' BertModel on the export gives attnlab's
hidden states; an attnlab BERT with its masked-LM head becomes a BertForMaskedLM with
attnlab's logits (float64) and token ids; `attnlab.load` of the export gives the weights back."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

import attnlab  # noqa: E402
from attnlab.cli.main import main  # noqa: E402
from attnlab.models.bert import BertEncoder, bert_tiny  # noqa: E402

SENTENCES = ["The animal didn't cross the street because it was too tired.", "A man is playing a guitar.",
             "Someone plays an instrument.", "Zürich's café", "Two dogs run through the snow!"]


def _export(model_dir, out, *extra):
    return main(["export", "--model", str(model_dir), "--format", "hf", "-o", str(out), *extra])


def test_minilm_round_trip_is_exact(minilm_dir, tmp_path):
    from safetensors.torch import load_file

    assert _export(minilm_dir, tmp_path / "out") == 0
    before, after = load_file(str(minilm_dir / "model.safetensors")), load_file(str(tmp_path / "out" / "model.safetensors"))
    weights = {name: value for name, value in before.items() if value.is_floating_point()}
    assert set(weights) == set(after)  # BertModel's own names, no prefix
    assert all(torch.equal(weights[name], after[name]) for name in weights)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert (tmp_path / "out" / name).read_bytes() == (minilm_dir / name).read_bytes()
    ours = attnlab.load(tmp_path / "out")
    original = attnlab.load(minilm_dir)
    assert all(torch.equal(value, ours.model.state_dict()[name]) for name, value in original.model.state_dict().items())
    hf = transformers.AutoModel.from_pretrained(str(tmp_path / "out")).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    encoded, _ = ours.tokenizer.encode(SENTENCES)
    assert torch.equal(encoded["ids"], batch["input_ids"])
    with torch.no_grad():
        expected = hf(**batch).last_hidden_state
        got = ours.model(encoded["ids"], attention_mask=encoded["attention_mask"],
                         token_type_ids=encoded["token_type_ids"]).hidden
    mask = batch["attention_mask"].bool()
    torch.testing.assert_close(got[mask], expected[mask], rtol=1e-4, atol=1e-4)


@pytest.fixture
def bert_dir(tmp_path):
    words = sorted({w.strip(".,!?'").lower() for s in SENTENCES for w in s.split()} - {""})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words, "##s", "##'", "'", "!", ".", ",", "?"]
    directory = tmp_path / "bert"
    torch.manual_seed(0)
    model = BertEncoder(bert_tiny().replace(vocab_size=len(vocab) + 3)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    model.save_pretrained(directory)
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    return directory, model


def test_an_attnlab_bert_becomes_a_bert_for_masked_lm(bert_dir, tmp_path):
    directory, model = bert_dir
    assert _export(directory, tmp_path / "out") == 0
    hf = transformers.AutoModelForMaskedLM.from_pretrained(str(tmp_path / "out")).eval().double()
    assert type(hf).__name__ == "BertForMaskedLM"
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    ours = attnlab.load(directory)
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    encoded, _ = ours.tokenizer.encode(SENTENCES)
    assert torch.equal(encoded["ids"], batch["input_ids"])
    model = model.double()
    with torch.no_grad():
        hidden = model(batch["input_ids"], attention_mask=batch["attention_mask"]).hidden
        torch.testing.assert_close(hf(**batch).logits, model.mlm_logits(hidden), rtol=1e-10, atol=1e-10)
        base = transformers.BertModel.from_pretrained(str(tmp_path / "out")).eval().double()
        out = base(**batch)
        torch.testing.assert_close(out.last_hidden_state, hidden, rtol=1e-10, atol=1e-10)
        single = tokenizer(SENTENCES[:1], return_tensors="pt")
        torch.testing.assert_close(base(**single).pooler_output, model(single["input_ids"]).pooled,
                                   rtol=1e-10, atol=1e-10)
    back = attnlab.load(tmp_path / "out")
    original = attnlab.load(directory).model.state_dict()
    assert set(original) == set(back.model.state_dict())
    assert all(torch.equal(value, back.model.state_dict()[name]) for name, value in original.items())


def test_a_head_is_one_function_over_bert_export(bert_dir, tmp_path):
    """How a BERT sequence classifier joins: an exporter calling bert_export with its head;
    here a linear head on the pooled output stands in for one, and transformers'
    BertForSequenceClassification computes its logits (float64)."""
    from types import SimpleNamespace

    from attnlab.interop.export_hf import bert_export

    directory, model = bert_dir
    model.classifier = torch.nn.Linear(model.config.d_model, 3).double()
    model = model.double()
    labels = ["negative", "neutral", "positive"]

    def head(state, config):
        return ({"classifier.weight": state["classifier.weight"], "classifier.bias": state["classifier.bias"]},
                "BertForSequenceClassification",
                {"num_labels": 3, "id2label": dict(enumerate(labels)), "label2id": {n: i for i, n in enumerate(labels)}})

    pipeline = SimpleNamespace(model=model, tokenizer=None, directory=directory)
    with pytest.raises(ValueError, match="no place for: classifier.bias, classifier.weight"):
        bert_export(pipeline)  # without its head the classifier would be dropped: refused
    bert_export(pipeline, head=head).write(tmp_path)
    hf = transformers.BertForSequenceClassification.from_pretrained(str(tmp_path)).eval().double()
    ids = torch.tensor([[2, 7, 9, 11, 3]])
    with torch.no_grad():
        expected = model.classifier(model(ids).pooled)
        torch.testing.assert_close(hf(ids).logits, expected, rtol=1e-10, atol=1e-10)
    assert hf.config.id2label[2] == "positive"
