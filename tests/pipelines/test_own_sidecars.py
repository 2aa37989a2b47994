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
