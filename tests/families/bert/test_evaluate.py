"""attnlab evaluate-bert: masked-token accuracy and NLL, checked against HuggingFace's
BertForMaskedLM on the same masked inputs; the masking protocol; the refusals."""

from __future__ import annotations

import json
import math

import pytest
import torch

from attnlab.cli.main import main
from attnlab.families.bert.evaluate import mask_batch

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "man", "is", "playing", "guitar", "the", "dog", "runs",
         "cat", "sleeps", ".", ",", "##s", "on", "mat"]
LINES = ["a man is playing guitar .", "the dog runs .", "the cat sleeps on the mat .", "a dog , a cat .",
         "the man runs", "cat"] * 3


def _hf_bert(directory, cls):
    config = transformers.BertConfig(vocab_size=len(WORDS), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=32)
    torch.manual_seed(0)
    model = cls(config).eval()
    model.save_pretrained(str(directory), safe_serialization=True)
    (directory / "vocab.txt").write_text("\n".join(WORDS) + "\n", encoding="utf-8")
    return model


@pytest.fixture(scope="module")
def mlm_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("mlm") / "model"
    return directory, _hf_bert(directory, transformers.BertForMaskedLM)


def test_scores_equal_huggingface_on_the_same_masked_tokens(mlm_dir, tmp_path):
    from attnlab.interop.hf_bert import load_hf_bert

    directory, hf = mlm_dir
    text = tmp_path / "held_out.txt"
    text.write_text("\n".join(LINES) + "\n\n")
    out = tmp_path / "scores.json"
    assert main(["evaluate", "--model", str(directory), "--text", str(text), "--batch-size", "4",
                 "--json", str(out), "--no-progress", "--seed", "3"]) == 0  # routed to evaluate-bert
    got = json.loads(out.read_text())
    # The same masking (seed 3, batches of 4), scored by HuggingFace's model.
    _, tokenizer = load_hf_bert(directory)
    vocab = tokenizer.tokenizer
    special = {vocab.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]")}
    generator = torch.Generator().manual_seed(3)
    nll, correct, count, answers = 0.0, 0, 0, []
    for start in range(0, len(LINES), 4):
        batch, _ = tokenizer.encode(LINES[start:start + 4])
        ids, targets = mask_batch(batch["ids"], batch["attention_mask"], special, vocab.token_to_id("[MASK]"), 0.15,
                                  generator)
        with torch.no_grad():
            logits = hf(input_ids=ids, attention_mask=batch["attention_mask"],
                        token_type_ids=batch["token_type_ids"]).logits.double()
        where = targets != -100
        nll += float(torch.nn.functional.cross_entropy(logits[where], targets[where], reduction="sum"))
        correct += int((logits[where].argmax(-1) == targets[where]).sum())
        count += int(where.sum())
        answers += [vocab.id_to_token(i) for i in targets[where].tolist()]
    assert got["masked_tokens"] == count and got["lines"] == len(LINES)
    # the frequency baseline: the token most often masked (ties: the smaller id), and its share
    most = max(set(answers), key=lambda token: (answers.count(token), -vocab.token_to_id(token)))
    assert got["most_frequent_token"] == most
    assert got["most_frequent_share"] == pytest.approx(answers.count(most) / count)
    assert got["nll"] == pytest.approx(nll / count, abs=1e-4)
    assert got["perplexity"] == pytest.approx(math.exp(nll / count), rel=1e-3)
    # accuracy: argmax ties between two float paths are possible only at exact ties; allow one token
    assert abs(got["accuracy"] * count - correct) <= 1


def test_masking_follows_the_protocol():
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 20, (400, 12))
    ids[:, 0], ids[:, 11] = 2, 3  # [CLS] ... [SEP]
    attention = torch.ones_like(ids)
    attention[::2, 8:] = 0  # padded rows
    ids[::2, 8:] = 0
    masked, targets = mask_batch(ids, attention, {0, 2, 3}, 4, 0.5, generator)
    chosen = targets != -100
    assert not chosen[:, 0].any() and not chosen[:, 11].any() and not chosen[::2, 8:].any()
    assert (masked[chosen] == 4).all() and (targets[chosen] == ids[chosen]).all()
    assert (masked[~chosen] == ids[~chosen]).all()
    candidates = int((attention.bool() & (ids >= 5)).sum())
    assert 0.4 < int(chosen.sum()) / candidates < 0.6
    one = mask_batch(ids[:1], attention[:1], {0, 2, 3}, 4, 1e-9, generator)[1]
    assert int((one != -100).sum()) == 1  # at least one token per line


def test_a_bert_without_its_masked_lm_head_is_refused(tmp_path, capsys):
    directory = tmp_path / "embedder"
    _hf_bert(directory, transformers.BertModel)
    assert main(["evaluate-bert", "--model", str(directory)]) != 0
    err = capsys.readouterr().err
    assert "no masked-LM head" in err and "attnlab embed" in err and "Traceback" not in err


def test_bad_arguments_are_named(mlm_dir, tmp_path, capsys):
    directory, _ = mlm_dir
    with pytest.raises(SystemExit) as exit_:
        main(["evaluate-bert", "--model", str(directory), "--mask-rate", "0"])
    assert exit_.value.code == 2 and "--mask-rate: 0 must be above 0" in capsys.readouterr().err
    assert main(["evaluate-bert", "--model", str(directory), "--text", str(tmp_path / "missing.txt")]) != 0
    assert "--text" in capsys.readouterr().err
    existing = tmp_path / "r.json"
    existing.write_text("keep")
    assert main(["evaluate-bert", "--model", str(directory), "--json", str(existing), "--limit", "2"]) != 0
    assert existing.read_text() == "keep" and "--force" in capsys.readouterr().err
