"""``attnlab explore --html``: a self-contained page, careful with existing files, clear errors."""

import pytest

from attnlab.cli.main import main


@pytest.fixture
def lm_directory(tmp_path):
    import torch

    from attnlab import create_model
    from attnlab.data.text import CharTokenizer

    tokenizer = CharTokenizer.from_text("abcdefghijklmnopqrstuvwxyz .,")
    torch.manual_seed(0)
    create_model("lm_tiny", vocab_size=tokenizer.vocab_size).save_pretrained(tmp_path / "lm")
    tokenizer.save(tmp_path / "lm")
    return tmp_path / "lm"


def test_html_export(lm_directory, tmp_path, capsys):
    out = tmp_path / "page.html"
    assert main(["explore", "--model", str(lm_directory), "--html", str(out), "--generate", "4", "hello world",
                 "--device", "cpu"]) == 0
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and '"query_tokens":["h","e","l","l","o"' in page
    assert "self-contained" in capsys.readouterr().out
    # an existing file is kept unless --force
    out.write_text("mine")
    assert main(["explore", "--model", str(lm_directory), "--html", str(out), "hi"]) == 2
    assert out.read_text() == "mine" and "--force" in capsys.readouterr().err
    assert main(["explore", "--model", str(lm_directory), "--html", str(out), "--force", "hi"]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize("args, message", [
    (["--html", "page.png"], "ending in .html"),
    (["--html", "notes.txt/page.html"], "notes.txt is a file, not a directory"),
    (["--port", "70000"], "--port: 70000 must be between 0 and 65,535"),
    (["some text"], "TEXT is for --html"),
    (["--html", "page.html", "ünïcode ☃"], "not in the tokenizer's vocabulary"),
])
def test_errors(lm_directory, tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    try:
        code = main(["explore", "--model", str(lm_directory), *args])
    except SystemExit as stop:  # refused by the parser
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "page.html").exists()


def test_bad_model_directory(tmp_path, capsys):
    assert main(["explore", "--model", str(tmp_path / "nope"), "--html", str(tmp_path / "p.html"), "x"]) == 2
    assert "no such model directory" in capsys.readouterr().err
