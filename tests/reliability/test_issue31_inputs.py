"""Issue 31, nothing silent: the music, image and ViT verbs refuse values that would give a
wrong result or an unclear failure, with one line naming the flag or file (exit 2), and a
music model directory remembers where its data was (issue 29.5)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from attnlab.data.music import JSB_FILE

from .conftest import run_cli
from .issue31_fixtures import (TINY_MUSIC, image_model, jsb_root, music_model, vit_model,  # noqa: F401
                               write_folder, write_jsb)


def refused(argv, capsys, *needles: str) -> str:
    """Run ``argv``: exit 2 (from the verb, or argparse's SystemExit), no traceback, and a
    last line that names each of ``needles``."""
    try:
        code, err = run_cli(argv, capsys)
    except SystemExit as exit:
        code, err = exit.code, capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("attnlab"), err
    for needle in needles:
        assert needle in last, (argv, err)
    return last


# -- generate-music / evaluate-music / train music ------------------------------------------------
def test_generate_music_refuses_a_negative_chorale_and_primer_steps(music_model, jsb_root, tmp_path, capsys):
    base = ["generate-music", "--model", str(music_model), "--data-dir", str(jsb_root), "--length", "4",
            "--no-audio", "--device", "cpu", "--out", str(tmp_path / "x.mid")]
    refused([*base, "--primer", "jsb-valid:-1"], capsys, "--primer jsb-valid:-1", "0..2")
    refused([*base, "--primer", "jsb-valid:3"], capsys, "--primer jsb-valid:3", "0..2")
    refused([*base, "--primer", "jsb-valid:0", "--primer-steps", "-1"], capsys, "--primer-steps")
    refused([*base, "--primer", "jsb-valid:0", "--primer-steps", "0"], capsys, "--primer-steps")
    refused([*base, "--threads", "-1"], capsys, "--threads")
    assert not (tmp_path / "x.mid").exists()


@pytest.mark.parametrize("size", ("-1", "0"))
def test_evaluate_music_refuses_a_batch_size_below_one(size, music_model, jsb_root, capsys):
    refused(["evaluate-music", "--model", str(music_model), "--data-dir", str(jsb_root), "--context", "8",
             "--batch-size", size, "--device", "cpu"], capsys, "--batch-size")


def test_evaluate_music_writes_null_and_says_so_for_a_non_finite_result(music_model, jsb_root, tmp_path, capsys,
                                                                         monkeypatch):
    import attnlab.families.music.task as task

    monkeypatch.setattr(task, "evaluate_nll", lambda *a, context, **k: {"nll": math.nan, "tokens": 10,
                                                                         "context": context})
    result = tmp_path / "r.json"
    code, err = run_cli(["evaluate-music", "--model", str(music_model), "--data-dir", str(jsb_root), "--context",
                         "8", "--json", str(result), "--device", "cpu"], capsys)
    assert code == 1 and "not finite" in err and "Traceback" not in err
    assert json.loads(result.read_text())["results"][0]["nll"] is None  # strict JSON


@pytest.mark.parametrize("flag, value", [("--context", "0"), ("--context", "-1"), ("--val-batches", "0"),
                                         ("--val-batches", "-1")])
def test_train_music_refuses_empty_windows_and_validation(flag, value, jsb_root, tmp_path, capsys):
    args = ["train", "music", "--data", "jsb", "--data-dir", str(jsb_root), "--out", str(tmp_path / "run"),
            *TINY_MUSIC]
    args[args.index(flag) + 1] = value
    refused(args, capsys, flag, f"{value} must be")  # the value given, not a default put in its place
    assert not (tmp_path / "run").exists()


def test_an_empty_jsb_archive_is_named(tmp_path, capsys, music_model):
    (tmp_path / JSB_FILE).parent.mkdir(parents=True)
    (tmp_path / JSB_FILE).write_bytes(b"")
    refused(["evaluate-music", "--model", str(music_model), "--data-dir", str(tmp_path), "--device", "cpu"], capsys,
            str(tmp_path / JSB_FILE))


def test_evaluate_music_refuses_validation_without_notes(tmp_path, capsys, music_model):
    write_jsb(tmp_path, valid=2, steps=12)
    path = tmp_path / JSB_FILE
    arrays = dict(np.load(path))
    arrays["valid_steps"] = np.zeros((0, 4))
    arrays["valid_lengths"] = np.zeros(2, dtype=np.int64)
    np.savez(path, **arrays)
    refused(["evaluate-music", "--model", str(music_model), "--data-dir", str(tmp_path), "--device", "cpu"], capsys,
            "no notes")


def test_a_music_model_remembers_where_its_data_was(jsb_root, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    assert run_cli(["train", "music", "--data", "jsb", "--data-dir", str(jsb_root), "--out", str(out), *TINY_MUSIC],
                   capsys)[0] == 0
    record = json.loads((out / "model" / "music.json").read_text())
    assert record == {"data": "jsb", "data_dir": str(jsb_root.resolve())}
    monkeypatch.setenv("ATTNLAB_DATA", str(tmp_path / "nothing-here"))
    song = tmp_path / "c.mid"
    assert run_cli(["generate-music", "--model", str(out / "model"), "--primer", "jsb-valid:0", "--length", "4",
                    "--no-audio", "--seed", "0", "--device", "cpu", "--out", str(song)], capsys)[0] == 0
    assert song.stat().st_size > 0
    code, err = run_cli(["evaluate-music", "--model", str(out / "model"), "--context", "8", "--device", "cpu"], capsys)
    assert code == 0, err


def test_a_model_without_the_record_still_finds_data_the_old_way(music_model, jsb_root, tmp_path, capsys,
                                                                 monkeypatch):
    monkeypatch.setenv("ATTNLAB_DATA", str(jsb_root))
    assert run_cli(["generate-music", "--model", str(music_model), "--primer", "jsb-valid:1", "--length", "4",
                    "--no-audio", "--device", "cpu", "--out", str(tmp_path / "c.mid")], capsys)[0] == 0


# -- classify / sidecars ----------------------------------------------------------------------------
@pytest.fixture
def image_file(tmp_path):
    from PIL import Image

    path = tmp_path / "x.png"
    Image.new("L", (8, 8), 200).save(path)
    return path


def _copy(model, tmp_path):
    import shutil

    target = tmp_path / "model"
    shutil.copytree(model, target)
    return target


def test_classify_without_classes_json_says_so_and_labels_classes(vit_model, image_file, capsys):
    from attnlab.cli.main import main

    capsys.readouterr()
    assert main(["classify", "--model", str(vit_model), str(image_file), "--device", "cpu"]) == 0
    captured = capsys.readouterr()
    ranked = captured.out.split(": ", 1)[1]
    assert sorted(part.rsplit(" ", 1)[0] for part in ranked.strip().split(", ")) == ["class 0", "class 1"]
    assert captured.err.count("classes.json") == 1


@pytest.mark.parametrize("text, needle", [("not json", "classes.json"), ('{"classes": ["a", "b", "c"]}', "3 classes"),
                                          ('{"classes": [1, {}]}', "list of names")])
def test_classify_refuses_a_damaged_classes_json(text, needle, vit_model, image_file, tmp_path, capsys):
    model = _copy(vit_model, tmp_path)
    (model / "classes.json").write_text(text)
    refused(["classify", "--model", str(model), str(image_file), "--device", "cpu"], capsys,
            str(model / "classes.json"), needle)


@pytest.mark.parametrize("text, needle", [("garbage", "image.json"), ('{"classes": ["a", "b", "c"]}', "3 classes"),
                                          ('["a", "b"]', "image.json")])
def test_image_verbs_refuse_a_damaged_image_json(text, needle, image_model, tmp_path, capsys):
    model = _copy(image_model, tmp_path)
    (model / "image.json").write_text(text)
    refused(["sample-images", "--model", str(model), "--n", "1", "--no-progress", "--device", "cpu", "--out",
             str(tmp_path / "s.png")], capsys, str(model / "image.json"), needle)
    assert not (tmp_path / "s.png").exists()


def test_evaluate_image_refuses_images_of_another_size(image_model, tmp_path, capsys):
    folder = write_folder(tmp_path / "rgb", ("a", "b"), size=32, mode="RGB")
    refused(["evaluate-image", "--model", str(image_model), "--data", str(folder), "--no-progress", "--device", "cpu"],
            capsys, f"--data {folder}", "32×32")


def test_train_vit_refuses_a_single_class(tmp_path, capsys):
    folder = write_folder(tmp_path / "one", ("only",))
    refused(["train", "vit", "--data", str(folder), "--out", str(tmp_path / "run"), "--max-steps", "1",
             "--no-progress", "--device", "cpu"], capsys, f"--data {folder}", "at least 2")
    assert not (tmp_path / "run").exists()


# -- sizes checked before allocating --------------------------------------------------------------
@pytest.mark.parametrize("verb, extra, flag", [
    ("vit", ["--image-size", "1000000"], "--image-size 1000000"),
    ("image", ["--image-size", "1000000"], "--image-size 1000000"),
    ("image", ["--attention", '{"name": "local_1d", "block_length": 1000000000}'], "--attention"),
    ("vit", ["--set", "image_size=4000"], "--set"),  # the images fit; the model's attention does not
])
def test_sizes_are_checked_against_memory_before_allocating(verb, extra, flag, tmp_path, capsys):
    folder = write_folder(tmp_path / "images", ("a", "b"))
    refused(["train", verb, "--data", str(folder), "--out", str(tmp_path / "run"), "--max-steps", "1",
             "--no-progress", "--device", "cpu", *extra], capsys, flag, "memory")
    assert not (tmp_path / "run").exists()


def test_a_music_batch_is_checked_against_memory_before_allocating(jsb_root, tmp_path, capsys):
    args = ["train", "music", "--data", "jsb", "--data-dir", str(jsb_root), "--out", str(tmp_path / "run"),
            *TINY_MUSIC]
    args[args.index("--batch-size") + 1] = "100000000"
    refused(args, capsys, "--batch-size 100000000", "memory")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("verb", ["classify", "evaluate-vit", "vit-figures", "evaluate-image", "sample-images",
                                  "complete-image", "super-resolve", "evaluate-music", "generate-music"])
@pytest.mark.parametrize("threads", ["0", "-1"])
def test_every_verb_here_refuses_threads_below_one(verb, threads, tmp_path, capsys):
    extra = {"classify": ["x.png"], "complete-image": ["x.png", "--keep-rows", "1"], "super-resolve": ["x.png"]}
    out = {"vit-figures": ["--out", str(tmp_path / "f")], "generate-music": ["--out", str(tmp_path / "x.mid")],
           "sample-images": ["--out", str(tmp_path / "x.png")], "complete-image": ["--out", str(tmp_path / "x.png")],
           "super-resolve": ["--out", str(tmp_path / "x.png")]}
    refused([verb, "--model", str(tmp_path / "model"), *extra.get(verb, []), *out.get(verb, []), "--threads", threads],
            capsys, "--threads", f"{threads} must be")


def test_evaluate_vit_refuses_images_of_another_size(vit_model, tmp_path, capsys):
    folder = write_folder(tmp_path / "rgb", ("class 0", "class 1"), size=32, mode="RGB")  # the model's classes
    refused(["evaluate-vit", "--model", str(vit_model), "--data", str(folder), "--device", "cpu"], capsys,
            f"--data {folder}", "32×32")
    other = write_folder(tmp_path / "other", ("a", "b"), size=28, mode="L")  # classes the model lacks
    refused(["evaluate-vit", "--model", str(vit_model), "--data", str(other), "--device", "cpu"], capsys,
            f"--data {other}", "'a'")
