"""docs/translation.md's Python calls run as written (issue 39, point 19: it called
``translate(..., beam_size=4)`` where the pipeline takes ``beam=``), with its model
directories replaced by tiny ones; and ``beam`` is the one name of the beam everywhere."""

import re
import warnings
from pathlib import Path

import pytest

import attnlab

DOC = Path(__file__).resolve().parents[2] / "docs" / "translation.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory):
    pytest.importorskip("transformers")
    pytest.importorskip("sentencepiece")
    from reference.foreign_dirs import marian_directory

    return marian_directory(tmp_path_factory.mktemp("marian") / "opus-mt-de-en")


def test_the_doc_has_its_python_examples():
    assert len(BLOCKS) >= 2 and any("Translator.load" in block for block in BLOCKS)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_each_python_block_runs(index, translation_dir, marian_dir, monkeypatch, tmp_path):
    import transformers

    from attnlab.families.translation import task, train

    trained = []

    def train_translation(options):  # the documented options are built for real; training is not rerun
        assert isinstance(options, task.TranslationTrainOptions)
        trained.append(options)
        return translation_dir

    monkeypatch.setattr(train, "train_translation", train_translation)  # the training run lives in train.py
    monkeypatch.chdir(tmp_path)
    block = BLOCKS[index].replace('"opus-mt-de-en"', repr(str(marian_dir)))
    names = {"__name__": "__doc_example__",
             "transformers_marian_model": transformers.MarianMTModel.from_pretrained(str(marian_dir))}
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the docs use the current names only
        exec(compile(block, f"docs/translation.md block {index}", "exec"), names)
    assert "translator" in names


def test_beam_is_the_one_name_and_beam_size_a_deprecated_alias(translation_dir):
    from attnlab.translation import Translator

    translator = Translator.load(translation_dir)
    pipeline = attnlab.load(translation_dir)
    sentences = ["ein kleiner hund läuft", "die wiese"]
    assert pipeline.translate(sentences, beam=2) == translator.translate(sentences, beam=2)
    with pytest.warns(DeprecationWarning, match="beam_size"):
        assert translator.translate(sentences, beam_size=2) == translator.translate(sentences, beam=2)
    with pytest.raises(ValueError, match="give only beam"):
        translator.translate(sentences, beam=2, beam_size=3)
    with pytest.raises(TypeError):
        pipeline.translate(sentences, beam_size=2)  # the pipeline never had it


def test_evaluate_reports_the_beam_it_searched(translation_dir, tmp_path, capsys):
    """evaluate printed "(beam None, alpha 0.6)" and wrote "beam": null; the default is 4."""
    import json

    from attnlab.cli.main import main

    source, reference, scores = tmp_path / "src.txt", tmp_path / "ref.txt", tmp_path / "scores.json"
    source.write_text("ein kleiner hund läuft\ndie wiese\n", encoding="utf-8")
    reference.write_text("a small dog runs\nthe meadow\n", encoding="utf-8")
    argv = ["evaluate", "--model", str(translation_dir), "--src-file", str(source), "--ref-file", str(reference),
            "--json", str(scores)]
    assert main(argv) == 0
    assert "(beam 4, alpha 0.6)" in capsys.readouterr().out
    assert json.loads(scores.read_text())["beam"] == 4
    scores.unlink()
    assert main(argv + ["--beam", "2"]) == 0
    assert "(beam 2, alpha 0.6)" in capsys.readouterr().out and json.loads(scores.read_text())["beam"] == 2


@pytest.mark.parametrize("flag, value", [("--beam", "0"), ("--beam", "1000000000"), ("--alpha", "nan"),
                                         ("--max-len-a", "inf")])
def test_translate_flags_are_bounded(translation_dir, capsys, flag, value):
    from attnlab.cli.main import main

    with pytest.raises(SystemExit) as exit_info:
        main(["translate", "--model", str(translation_dir), flag, value])
    assert exit_info.value.code == 2 and flag in capsys.readouterr().err
