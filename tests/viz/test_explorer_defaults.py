"""The explorer's default input of the text families comes from the model's own held-out
data where its directory records it (issue 39, point 4), and says so; where it does not,
the shipped default is kept and said to be from another data set."""

import json
import shutil

import pytest

from attnlab.viz.explorer import load_source


@pytest.fixture(autouse=True)
def _one_thread(single_thread):
    yield


def test_a_language_model_opens_on_its_own_held_out_text(lm_dir, tmp_path):
    directory = tmp_path / "lm"
    shutil.copytree(lm_dir, directory)
    held_out = tmp_path / "valid.txt"
    held_out.write_text("\n\nbut soft, what light\nthrough yonder window\n", encoding="utf-8")
    (directory / "lm.json").write_text(json.dumps({"text": [str(held_out)], "valid_text": [str(held_out)],
                                                   "held_out": "--valid-text"}))
    source = load_source(directory)
    assert source.default_text == "but soft, what light"
    assert "the start of the model's own held-out text" in source.default_note and str(held_out) in source.default_note
    assert source.default_note[1:] in source.description
    plain = load_source(lm_dir)  # no lm.json: the shipped default, said to be from elsewhere
    assert plain.default_text == "ROMEO:\nBut soft, what light" and "not from this model's data" in plain.default_note


def test_a_translation_model_opens_on_its_own_held_out_sentence(translation_dir, tmp_path):
    directory = tmp_path / "translation"
    shutil.copytree(translation_dir, directory)
    held_out = tmp_path / "valid.fr"
    held_out.write_text("\nun homme lit un livre\n", encoding="utf-8")
    (directory / "translation.json").write_text(json.dumps({"src_lang": "fr", "tgt_lang": "en", "data": None,
                                                            "valid_src": str(held_out), "valid_tgt": str(held_out)}))
    source = load_source(directory)
    assert source.default_text == "un homme lit un livre"
    assert f"the first of {held_out}" in source.default_note
    held_out.unlink()  # gone: the German default, said not to be this French model's language
    gone = load_source(directory)
    assert gone.default_text.startswith("Ein Mann")
    assert "not this model's source language (fr)" in gone.default_note and "valid.fr" in gone.default_note


def test_a_jsb_music_model_opens_on_its_own_held_out_chorale(music_dir, shared_data, tmp_path, monkeypatch):
    from attnlab.data import music

    if not music.jsb_path(shared_data).is_file():
        pytest.skip("JSB Chorales not in the shared data")
    from attnlab import create_model

    directory = tmp_path / "music"  # a context of 128: jsb-valid:N is 16 steps x 4 voices, and START
    create_model("music_tiny", max_positions=128).save_pretrained(directory)
    (directory / "music.json").write_text(json.dumps({"data": "jsb", "data_dir": str(shared_data)}))
    source = load_source(directory)
    assert source.default_text == "jsb-valid:0" and "own held-out JSB chorales" in source.default_note
    # the data no longer where music.json says: the shipped chord, said not to be from its data
    (directory / "music.json").write_text(json.dumps({"data": "jsb", "data_dir": str(tmp_path / "empty")}))
    monkeypatch.setenv("ATTNLAB_DATA", str(tmp_path / "empty"))
    gone = load_source(directory)
    assert gone.default_text != "jsb-valid:0" and "not from this model's data" in gone.default_note
    assert "not from this model's data" in load_source(music_dir).default_note  # no music.json
