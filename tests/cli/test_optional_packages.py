"""A verb that needs an optional package checks for it before it starts (one shared
helper, options.require_packages) and names the package and how to install it; it is
never found missing after minutes of training. A package is hidden by a ``sys.modules``
entry set to None, which makes importing it fail as if it were not installed."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.cli.main import main
from attnlab.cli.options import OPTIONAL_PACKAGES, require_packages

SRC = Path(__file__).resolve().parents[2] / "src"


def test_the_helper_names_package_purpose_and_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pycocoevalcap", None)
    with pytest.raises(ValueError) as error:
        require_packages("train caption", "pycocoevalcap", "json")  # json is there: only the missing one is named
    message = str(error.value)
    assert message.startswith("attnlab train caption needs pycocoevalcap (BLEU-4 and CIDEr")
    assert "attnlab[caption]" in message and "json" not in message and "\n" not in message
    require_packages("train caption", "json")  # present: no error


def test_an_unknown_optional_package_gets_a_pip_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "some_optional_thing", None)
    with pytest.raises(ValueError, match="pip install some_optional_thing"):
        require_packages("x", "some_optional_thing")


def test_every_listed_package_has_a_purpose_and_an_install_line():
    for module, (purpose, install) in OPTIONAL_PACKAGES.items():
        assert purpose and install.startswith("pip install"), module


def test_train_caption_without_pycocoevalcap_stops_before_training(tmp_path):
    """In a fresh interpreter, as a user without the caption extra would run it."""
    out = tmp_path / "run"
    code = ("import sys; sys.modules['pycocoevalcap'] = None\n"
            "from attnlab.cli.main import main\n"
            f"sys.exit(main(['train', 'caption', '--data', 'scenes', '--train-images', '64', '--preset', "
            f"'captioner_tiny', '--max-steps', '2', '--batch-size', '8', '--no-progress', '--device', 'cpu', "
            f"'--out', {str(out)!r}]))")
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "pycocoevalcap" in done.stderr and "attnlab[caption]" in done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert not out.exists()  # nothing trained, nothing written


@pytest.mark.parametrize("module, argv, install", [
    ("pycocoevalcap", ["evaluate-caption", "--model", "MISSING"], "attnlab[caption]"),
    ("onnx", ["export-onnx", "--model", "MISSING", "-o", "OUT/m.onnx"], "attnlab[onnx]"),
    ("tokenizers", ["embed", "--model", "MISSING", "hello"], "pip install tokenizers"),
])
def test_verbs_check_before_they_start(monkeypatch, tmp_path, capsys, module, argv, install):
    monkeypatch.setitem(sys.modules, module, None)
    argv = [str(tmp_path / "no-model") if a == "MISSING" else a.replace("OUT", str(tmp_path)) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"needs {module}" in err and install in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_explore_needs_tokenizers_only_for_bert(monkeypatch, minilm_dir, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    assert main(["explore", "--model", str(minilm_dir), "--html", str(tmp_path / "p.html"), "hi"]) == 2
    assert "explore needs tokenizers" in capsys.readouterr().err
