"""attnlab's own sidecar files are read as a foreign directory's are (issue 39, beyond point
11): classes.json, music.json, translation.json and a COCO captions file nested 100k deep
are one ValueError naming the file, never a RecursionError."""

import shutil

import pytest

import attnlab
from reference.damaged import nested_json


@pytest.mark.parametrize("fixture, name", [("vit_dir", "classes.json"), ("translation_dir", "translation.json")])
def test_attnlab_load_names_a_deeply_nested_sidecar(fixture, name, request, tmp_path):
    directory = tmp_path / "model"
    shutil.copytree(request.getfixturevalue(fixture), directory)
    (directory / name).write_text(nested_json())
    with pytest.raises(ValueError, match=rf"{name}: .*nested too deeply"):
        attnlab.load(directory)


def test_music_json_nested_too_deeply_is_named(music_dir, tmp_path):
    from attnlab.families.music.task import recorded_data

    directory = tmp_path / "model"
    shutil.copytree(music_dir, directory)
    (directory / "music.json").write_text(nested_json())
    with pytest.raises(ValueError, match=r"music\.json: .*nested too deeply"):
        recorded_data(directory)


def test_a_coco_captions_file_nested_too_deeply_is_named(tmp_path):
    from attnlab.families.caption.data import read_coco_captions

    path = tmp_path / "captions.json"
    path.write_text(nested_json(50_000))
    with pytest.raises(ValueError, match=r"captions\.json: .*nested too deeply"):
        read_coco_captions(path)


@pytest.mark.parametrize("generation, message", [
    ({"num_beams": 10**9}, r"translation\.json: num_beams=1000000000 exceeds the largest beam"),
    ({"num_beams": "4"}, r"translation\.json: num_beams='4' is not an integer"),
    ([1, 2], r"translation\.json: \"generation\" must be an object"),
])
def test_translation_json_decoding_settings_are_bounded(translation_dir, tmp_path, generation, message):
    """A saved MarianMT model keeps its decoding settings in translation.json: checked as the
    MarianMT generation_config.json they came from (num_beams 1e9 tried to allocate 264 GB)."""
    import json

    directory = tmp_path / "model"
    shutil.copytree(translation_dir, directory)
    (directory / "translation.json").write_text(json.dumps({"generation": generation}))
    with pytest.raises(ValueError, match=message):
        attnlab.load(directory)
