"""attnlab evaluate-lm (and evaluate --model LM_DIR routed to it): held-out NLL of a
language model through the command line; bad input exits 2 with one line, nothing written."""

import json

import pytest
import torch

from attnlab import create_model
from attnlab.cli.main import main
from attnlab.data.text import CharTokenizer
from attnlab.families.lm.task import evaluate_text

TEXT = "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n" * 3


@pytest.fixture
def lm_dir(tmp_path):
    torch.manual_seed(0)
    tokenizer = CharTokenizer.from_text(TEXT)
    model = create_model("lm_tiny", vocab_size=tokenizer.vocab_size)
    directory = tmp_path / "lm"
    model.save_pretrained(directory)
    tokenizer.save(directory)
    (tmp_path / "held_out.txt").write_text(TEXT)
    return directory


def test_scores_a_text_and_writes_json(lm_dir, tmp_path, capsys):
    out = tmp_path / "scores.json"
    code = main(["evaluate-lm", "--model", str(lm_dir), "--text", str(tmp_path / "held_out.txt"), "--context", "32",
                 "--stride", "8", "--json", str(out), "--threads", "1", "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    written = json.loads(out.read_text())
    tokenizer = CharTokenizer.load(lm_dir)
    import attnlab

    expected = evaluate_text(attnlab.load_model(lm_dir), tokenizer.encode(TEXT), context=32, stride=8)
    assert written["nll"] == pytest.approx(expected["nll"], rel=1e-6)
    assert written["tokens"] == len(TEXT) - 1 and written["stride"] == 8
    assert f"held-out NLL {expected['nll']:.4f} nats/token" in printed
    assert written["bits_per_char"] == pytest.approx(written["bits_per_token"])  # one token per character


def test_limit_scores_the_first_tokens(lm_dir, tmp_path, capsys):
    out = tmp_path / "limited.json"
    assert main(["evaluate-lm", "--model", str(lm_dir), "--text", str(tmp_path / "held_out.txt"), "--limit", "20",
                 "--json", str(out), "--no-progress"]) == 0
    written = json.loads(out.read_text())
    import attnlab

    ids = CharTokenizer.load(lm_dir).encode(TEXT)[:20]
    expected = evaluate_text(attnlab.load_model(lm_dir), ids, context=64)
    assert written["tokens"] == 19 and written["nll"] == pytest.approx(expected["nll"], rel=1e-6)
    assert "its first 20 tokens (--limit)" in capsys.readouterr().out


def test_quantize_int8_scores_the_int8_model(lm_dir, tmp_path, capsys):
    out = tmp_path / "int8.json"
    assert main(["evaluate-lm", "--model", str(lm_dir), "--text", str(tmp_path / "held_out.txt"), "--context", "32",
                 "--quantize", "int8", "--json", str(out), "--no-progress"]) == 0
    written = json.loads(out.read_text())
    import attnlab

    model = attnlab.load_model(lm_dir).quantize("int8")
    expected = evaluate_text(model, CharTokenizer.load(lm_dir).encode(TEXT), context=32)
    assert written["quantize"] == "int8" and written["nll"] == pytest.approx(expected["nll"], rel=1e-6)


def test_evaluate_routes_a_language_model_here(lm_dir, tmp_path, capsys):
    assert main(["evaluate", "--model", str(lm_dir), "--text", str(tmp_path / "held_out.txt"), "--no-progress"]) == 0
    assert "held-out NLL" in capsys.readouterr().out


def test_bad_input_is_refused_with_one_line(lm_dir, tmp_path, capsys):
    existing = tmp_path / "mine.json"
    existing.write_text("keep me")
    held_out = str(tmp_path / "held_out.txt")
    cases = [
        (["--json", str(existing)], "--json"),
        (["--context", "0"], "--context"),
        (["--context", "8", "--stride", "9"], "--stride 9"),
        (["--context", "65"], "max_positions=64"),
        (["--threads", "0"], "--threads"),
    ]
    for extra, named in cases:
        try:
            code = main(["evaluate-lm", "--model", str(lm_dir), "--text", held_out, "--no-progress", *extra])
        except SystemExit as stop:  # refused by the parser
            code = stop.code
        err = capsys.readouterr().err
        assert code == 2 and named in err and "Traceback" not in err, (extra, err)
    assert existing.read_text() == "keep me"
    create_model("vit_tiny_patch4_28").save_pretrained(tmp_path / "vit")
    assert main(["evaluate-lm", "--model", str(tmp_path / "vit"), "--text", held_out]) == 2
    assert "holds a 'vit' model" in capsys.readouterr().err
    assert main(["evaluate-lm", "--model", str(lm_dir), "--text", str(tmp_path / "missing.txt")]) == 2
    assert "missing.txt" in capsys.readouterr().err
