"""embed and explore: truncation is said, another family's directory is named as such,
HuggingFace fields are named as config.json spells them, the LM's default text fits the
model, --generate is checked against the context, and --html keeps what is there."""

import json
import os

import pytest

from .conftest import char_lm_directory


@pytest.fixture
def char_lm(tmp_path):
    """A character LM of 32 positions whose vocabulary is lower-case only (no 'R' for "ROMEO")."""
    return char_lm_directory(tmp_path / "lm", positions=32)


# -- embed --------------------------------------------------------------------------------
def test_embed_says_how_many_tokens_it_dropped(minilm_dir, run_verb):
    long = " ".join(["word"] * 10_000)  # 10,000 pieces + [CLS] + [SEP]
    code, out, err = run_verb(["embed", "--model", str(minilm_dir), "--device", "cpu", long, "a short one"])
    assert code == 0
    assert "sentence 1 has 10,002 tokens" in err and "512" in err and "9,490" in err
    assert "sentence 2" not in err
    assert "384 dimensions" in out and len(max(out.splitlines(), key=len)) < 200  # the table shows a short line


def test_embed_on_another_family_says_it_is_not_bert(char_lm, run_verb):
    code, _, err = run_verb(["embed", "--model", str(char_lm), "hello"])
    assert code == 2 and "holds a 'decoder_lm' model" in err and "not a BERT" in err and err.count("\n") == 1
    assert "vocab.txt: no such file" not in err


@pytest.mark.parametrize("field, value, needles", [
    ("hidden_size", 385, ["hidden_size=385", "num_attention_heads=12"]),
    ("hidden_size", "big", ["hidden_size='big'"]),
    ("hidden_dropout_prob", 2, ["hidden_dropout_prob=2"]),
    ("num_hidden_layers", 0, ["num_hidden_layers=0"]),
])
def test_bert_config_errors_name_the_huggingface_field(minilm_dir, tmp_path, run_verb, field, value, needles):
    broken = tmp_path / "bert"
    broken.mkdir()
    for name in ("model.safetensors", "vocab.txt"):
        (broken / name).symlink_to(minilm_dir / name)
    config = json.loads((minilm_dir / "config.json").read_text())
    config[field] = value
    (broken / "config.json").write_text(json.dumps(config))
    code, _, err = run_verb(["embed", "--model", str(broken), "hello"])
    assert code == 2 and "config.json" in err
    for needle in needles:
        assert needle in err
    for ours in ("d_model", "num_heads", "BertConfig", "dropout=", "num_layers"):
        assert ours not in err


def test_a_config_holding_a_list_is_named(tmp_path, run_verb):
    (tmp_path / "config.json").write_text("[1, 2, 3]")
    code, _, err = run_verb(["explore", "--model", str(tmp_path), "--html", str(tmp_path / "p.html"), "x"])
    assert code == 2 and "config.json: expected a JSON object" in err and "family None" not in err


def test_a_huggingface_directory_given_to_an_attnlab_verb(minilm_dir, tmp_path, run_verb):
    code, _, err = run_verb(["caption", "--model", str(minilm_dir), str(tmp_path / "x.png")])
    assert code == 2 and "HuggingFace config" in err and "family None" not in err


# -- explore ------------------------------------------------------------------------------
def test_explore_default_text_fits_a_lower_case_char_lm(char_lm, tmp_path, run_verb):
    out = tmp_path / "page.html"
    code, stdout, err = run_verb(["explore", "--model", str(char_lm), "--html", str(out)])
    assert code == 0, err
    assert out.read_text().startswith("<!DOCTYPE html>") and "self-contained" in stdout


def test_explore_generate_is_checked_against_the_context(char_lm, tmp_path, run_verb):
    out = tmp_path / "page.html"
    code, _, err = run_verb(["explore", "--model", str(char_lm), "--html", str(out), "--generate", "256", "to be"])
    # "to be" is 5 characters of a 32-position context: 27 can follow
    assert code == 2 and "--generate 256" in err and "at most 27" in err
    assert not out.exists()
    code, _, err = run_verb(["explore", "--model", str(char_lm), "--html", str(out), "--generate", "27", "to be"])
    assert code == 0, err
    code, _, err = run_verb(["explore", "--model", str(char_lm), "--generate", "300", "--html",
                             str(tmp_path / "q.html")])
    assert code == 2 and "--generate" in err and "256" in err
    code, _, err = run_verb(["explore", "--model", str(char_lm), "--generate", "4"])
    assert code == 2 and "--generate is for --html" in err


def test_explore_html_keeps_a_symlink(char_lm, tmp_path, run_verb):
    target = tmp_path / "target.html"
    target.write_text("mine")
    link = tmp_path / "link.html"
    link.symlink_to(target)
    code, _, err = run_verb(["explore", "--model", str(char_lm), "--html", str(link), "hi"])
    assert code == 2 and "--html" in err and "symlink" in err
    assert link.is_symlink() and os.readlink(link) == str(target) and target.read_text() == "mine"
