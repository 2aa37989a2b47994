"""attnlab train translation --init DIR: a saved tiny translation model fine-tuned on other
pairs (its vocabulary kept, no vocabulary learned, weights moved, held-out before and after),
and the Python API's init."""

import json

import pytest
import torch
from safetensors.torch import load_file

from attnlab.cli.main import main

pytestmark = pytest.mark.usefixtures("single_thread")


def _pairs(directory, name, sources, targets):
    src, tgt = directory / f"{name}.de", directory / f"{name}.en"
    src.write_text("".join(line + "\n" for line in sources), encoding="utf-8")
    tgt.write_text("".join(line + "\n" for line in targets), encoding="utf-8")
    return ["--train-src", str(src), "--train-tgt", str(tgt)] if name.startswith("train") else \
        ["--valid-src", str(src), "--valid-tgt", str(tgt)]


RUN = ["--preset", "transformer_tiny", "--max-tokens", "256", "--max-length", "32", "--warmup", "1",
       "--val-every", "2", "--save-every", "2", "--no-progress", "--threads", "1"]


def test_fine_tune_keeps_the_vocabulary_and_prints_before_and_after(tmp_path, capsys):
    words = ["hund", "katze", "haus", "baum"], ["dog", "cat", "house", "tree"]
    first = _pairs(tmp_path, "train_a", [f"ein {w} {i}" for i in range(30) for w in words[0][:2]],
                   [f"a {w} {i}" for i in range(30) for w in words[1][:2]])
    second = _pairs(tmp_path, "train_b", [f"ein {w} {i}" for i in range(30) for w in words[0][2:]],
                    [f"a {w} {i}" for i in range(30) for w in words[1][2:]])
    valid = _pairs(tmp_path, "valid_b", [f"ein {w} {i}" for i in range(5) for w in words[0][2:]],
                   [f"a {w} {i}" for i in range(5) for w in words[1][2:]])
    start = tmp_path / "start"
    assert main(["train", "translation", *first, *valid, "--vocab-size", "60", "--max-steps", "2", "--out",
                 str(start), *RUN]) == 0
    out = tmp_path / "ft"
    capsys.readouterr()
    no_warmup = [arg for i, arg in enumerate(RUN) if arg != "--warmup" and RUN[i - 1] != "--warmup"]
    assert main(["train", "translation", *second, *valid, "--init", str(start / "model"), "--max-steps", "4",
                 "--max-unknown", "100", "--out", str(out), *no_warmup]) == 0
    err = capsys.readouterr().err
    assert "vocabulary:" not in err  # none learned
    assert "held-out before fine-tuning:" in err and "held-out: " in err and "validation perplexity" in err
    # Noam's peak is lr_scale * d**-0.5 * warmup**-0.5: the shorter warm-up must not raise it
    # again (it gave 3.2x the default's peak before), so the peak is a tenth of the default's
    import re

    from attnlab.cli.main import build_parser

    defaults = build_parser().parse_args(["train", "translation", *second, "--out", str(out)])
    found = re.search(r"peak --lr-scale ([0-9.e-]+) \(a tenth of the default's peak learning rate.*warm-up (\d+) "
                      r"updates", err)
    assert found, err
    scale, warmup = float(found.group(1)), int(found.group(2))
    assert warmup < defaults.warmup
    assert scale * warmup ** -0.5 == pytest.approx(0.1 * defaults.lr_scale * defaults.warmup ** -0.5, rel=1e-4)
    assert (out / "model" / "tokenizer.model").read_bytes() == (start / "model" / "tokenizer.model").read_bytes()
    before, after = load_file(start / "model" / "model.safetensors"), load_file(out / "model" / "model.safetensors")
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert json.loads((out / "model" / "start.json").read_text())["init"] == str((start / "model").resolve())
    assert "start_valid_ppl" in json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    import attnlab

    assert isinstance(attnlab.load(out / "model").translate("ein baum 3"), str)

    # the Python API takes init too
    from attnlab.translation import TranslationTrainOptions, train_translation

    options = TranslationTrainOptions(out=str(tmp_path / "api"), train_src=second[1], train_tgt=second[3],
                                      preset="transformer_tiny", max_steps=1, val_every=None, progress_bar=False,
                                      max_tokens=256, max_length=32, init=str(start / "model"), max_unknown=100)
    model_dir = train_translation(options)
    assert (model_dir / "start.json").is_file()


def test_own_files_record_the_languages_given_and_evaluate_keeps_to_them(tmp_path, capsys):
    """Issue 39, point 3: a model trained on the user's French-English files recorded "src_lang":
    "de" (the default of --src), and `evaluate --data multi30k` then fed it German and printed a BLEU."""
    sources = [f"un chien {i} court" for i in range(30)]
    targets = [f"a dog {i} runs" for i in range(30)]
    train = _pairs(tmp_path, "train_fr", sources, targets)
    out = tmp_path / "fr"
    assert main(["train", "translation", *train, "--vocab-size", "40", "--max-steps", "1", "--out", str(out),
                 *RUN]) == 0
    assert json.loads((out / "model" / "translation.json").read_text())["src_lang"] is None  # not "de"
    capsys.readouterr()
    assert main(["evaluate", "--model", str(out / "model"), "--data", "multi30k", "--limit", "2"]) == 2
    assert "does not record its languages" in capsys.readouterr().err
    given = tmp_path / "fr_given"
    assert main(["train", "translation", *train, "--src", "fr", "--tgt", "en", "--vocab-size", "40", "--max-steps",
                 "1", "--out", str(given), *RUN]) == 0
    assert json.loads((given / "model" / "translation.json").read_text())["src_lang"] == "fr"
    capsys.readouterr()
    assert main(["evaluate", "--model", str(given / "model"), "--data", "multi30k", "--src", "de", "--limit",
                 "2"]) == 2
    assert "trained on fr->en" in capsys.readouterr().err
