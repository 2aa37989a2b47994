"""Labelled files (TSV, CSV, JSONL): what is read, and each bad input refused in one line
naming the flag, the file and the line, exit 2, nothing written; classify-text on a model
of another family; the metrics against a float64 reference."""

from __future__ import annotations

import pytest
import torch

from attnlab.families.text_classification.data import MAX_LINE_BYTES, read_labelled

pytest.importorskip("tokenizers")


def test_tsv_csv_and_jsonl_are_read(tmp_path):
    (tmp_path / "a.tsv").write_text("id\ttext\ttext_pair\tlabel\n1\tA man, walking.\tHe walks\tyes\n\n"
                                    "2\t\"quoted\"\tno\tno\n", encoding="utf-8")
    rows = read_labelled(str(tmp_path / "a.tsv"))
    assert rows.texts == ["A man, walking.", '"quoted"'] and rows.pairs == ["He walks", "no"]
    assert rows.labels == ["yes", "no"] and rows.lines == [2, 4] and rows.label_set() == ["no", "yes"]
    (tmp_path / "b.csv").write_text('label,text\npos,"good, very ""good"""\nneg,bad\n', encoding="utf-8")
    rows = read_labelled(str(tmp_path / "b.csv"))
    assert rows.texts == ['good, very "good"', "bad"] and rows.pairs is None and rows.labels == ["pos", "neg"]
    (tmp_path / "c.jsonl").write_text('{"text": "x", "label": 3}\n\n{"text": "y", "label": "4"}\n', encoding="utf-8")
    rows = read_labelled(str(tmp_path / "c.jsonl"))
    assert rows.labels == ["3", "4"] and rows.lines == [1, 3]


def _big_line_file(path):
    """A TSV whose second line is 100 MB (written in pieces, never held whole)."""
    with open(path, "wb") as handle:
        handle.write(b"text\tlabel\n")
        piece = b"a" * (1 << 20)
        for _ in range(100):
            handle.write(piece)
        handle.write(b"\tx\nshort\ty\n")


BAD = {
    "missing column": ("text\tclass\nhello\ta\n", "--train {p}, line 1: no 'label' column in the header"),
    "missing field": ("text\tlabel\nhello\ta\nhello\n", "--train {p}, line 3: 1 field(s), but the header has 2"),
    "empty label": ("text\tlabel\nhello\ta\nworld\t \n", "--train {p}, line 3: empty label"),
    "empty text": ("text\tlabel\nhello\ta\n\tb\n", "--train {p}, line 3: empty text"),
    "one label": ("text\tlabel\nhello\ta\nworld\ta\n", "--train {p}: every row has the label 'a'; a classifier needs "
                                                      "at least 2 labels"),
    "header only": ("text\tlabel\n", "--train {p}: no rows (only a header"),
    "empty file": ("", "--train {p}: empty file"),
    "invalid UTF-8": (b"text\tlabel\nhello\ta\nw\xc3(rld\tb\n", "--train {p}, line 3: not valid UTF-8"),
    "100 MB line": (None, f"--train {{p}}, line 2: longer than {MAX_LINE_BYTES:,d} bytes"),
    "jsonl field": ('{"text": "a", "label": "x"}\n{"text": "b"}\n', "--train {p}, line 2: no 'label' field"),
    "jsonl type": ('{"text": "a", "label": "x"}\n{"text": ["b"], "label": "y"}\n', "--train {p}, line 2: 'text' is "
                                                                                  "list, not a string"),
    "pairs and singles": ("text\ttext_pair\tlabel\na\tb\tx\nc\td\ty\n", None),
    "unknown format": ("text,label\n", "unknown format '.txt'"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_training_file_is_one_line_and_nothing_is_written(case, tmp_path, run_verb):
    content, expected = BAD[case]
    suffix = {"jsonl field": ".jsonl", "jsonl type": ".jsonl", "unknown format": ".txt"}.get(case, ".tsv")
    path = tmp_path / f"train{suffix}"
    if content is None:
        _big_line_file(path)
    else:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    if case == "pairs and singles":  # a pair file is fine on its own: refused against a single-text --valid
        (tmp_path / "valid.tsv").write_text("text\tlabel\nc\tx\n")
        expected = "--valid {v}: single texts, but --train {p} holds text pairs"
    out = tmp_path / "run"
    argv = ["train", "text-classification", "--train", str(path), "--out", str(out)]
    if case == "pairs and singles":
        argv += ["--valid", str(tmp_path / "valid.tsv")]
    code, _, err = run_verb(argv)
    assert code == 2 and err.count("\n") == 1, err
    assert expected.format(p=path, v=tmp_path / "valid.tsv") in err, err
    assert not out.exists()


def test_a_label_seen_only_in_the_valid_file_is_refused(tmp_path, run_verb):
    (tmp_path / "train.csv").write_text("text,label\na,x\nb,y\n")
    (tmp_path / "valid.csv").write_text("text,label\nc,x\nd,z\n")
    code, _, err = run_verb(["train", "text-classification", "--train", str(tmp_path / "train.csv"), "--valid",
                         str(tmp_path / "valid.csv"), "--out", str(tmp_path / "run")])
    assert code == 2 and err.count("\n") == 1
    assert f"--valid {tmp_path / 'valid.csv'}, line 3: the label 'z' does not occur in --train" in err
    assert not (tmp_path / "run").exists()


def test_init_on_a_vit_directory_is_refused_before_reading_data(tmp_path, run_verb):
    from attnlab import create_model

    create_model("vit_tiny_patch4_28", num_classes=10).save_pretrained(tmp_path / "vit")
    (tmp_path / "train.csv").write_text("text,label\na,x\nb,y\n")
    code, _, err = run_verb(["train", "text-classification", "--train", str(tmp_path / "train.csv"), "--init",
                         str(tmp_path / "vit"), "--out", str(tmp_path / "run")])
    assert code == 2 and err.count("\n") == 1 and "holds a 'vit' model" in err and "not a BERT" in err
    assert not (tmp_path / "run").exists()


def test_classify_text_on_a_model_of_another_family_says_which(tmp_path, run_verb):
    from attnlab import create_model

    create_model("vit_tiny_patch4_28", num_classes=10).save_pretrained(tmp_path / "vit")
    code, out, err = run_verb(["classify-text", "--model", str(tmp_path / "vit"), "hello"])
    assert code == 2 and err.count("\n") == 1 and not out
    assert f"--model {tmp_path / 'vit'}: holds a Vision Transformer ('vit'), not a text classifier" in err
    assert "attnlab classify" in err  # where a ViT goes instead


def test_scores_equal_a_float64_reference():
    from attnlab.evaluation.classification import classification_scores, confusion_matrix

    generator = torch.Generator().manual_seed(0)
    true = torch.randint(0, 4, (300,), generator=generator)
    predicted = torch.where(torch.rand(300, generator=generator) < 0.6, true,
                            torch.randint(0, 4, (300,), generator=generator))
    predicted[predicted == 3] = 2  # class 3 is never predicted: precision 0 by definition
    scores = classification_scores(confusion_matrix(true, predicted, 5), ["a", "b", "c", "d", "e"])
    pairs = list(zip(true.tolist(), predicted.tolist()))
    f1s = []
    for k, name in enumerate("abcde"):
        tp = sum(t == k and p == k for t, p in pairs)
        predicted_k, support = sum(p == k for _, p in pairs), sum(t == k for t, _ in pairs)
        precision = tp / predicted_k if predicted_k else 0.0
        recall = tp / support if support else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        if support or predicted_k:
            f1s.append(f1)
        got = scores["per_class"][name]
        assert (got["precision"], got["recall"], got["support"]) == pytest.approx((precision, recall, support),
                                                                                   abs=1e-12)
        assert got["f1"] == pytest.approx(f1, abs=1e-12)
    assert scores["accuracy"] == pytest.approx(sum(t == p for t, p in pairs) / 300, abs=1e-12)
    assert scores["macro_f1"] == pytest.approx(sum(f1s) / len(f1s), abs=1e-12)  # class e: in neither, left out
    assert scores["per_class"]["d"]["precision"] == 0.0 and len(f1s) == 4
