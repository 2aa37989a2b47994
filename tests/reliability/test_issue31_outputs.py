"""Issue 31, nothing lost: every verb here refuses to replace what it did not write
(one line naming the flag, exit 2, files byte for byte unchanged) unless --force, and
then replaces it atomically; a training --out whose model/ exists is refused by one shared
check (attnlab.training.outputs.check_run_output)."""

from __future__ import annotations

import json
import shutil

import pytest

import attnlab

from .conftest import lm_args, run_cli, snapshot
from .issue31_fixtures import TINY_MUSIC, image_model, jsb_root, music_model, vit_model, write_folder  # noqa: F401


def one_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.startswith("attnlab")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def user_directory(root, *, model: bool) -> None:
    """``root/model`` holding a trained model (config + weights) or only a user's notes."""
    (root / "model").mkdir(parents=True)
    if model:
        (root / "model" / "config.json").write_text('{"family": "lm"}\n')
        (root / "model" / "model.safetensors").write_bytes(b"weights")
    (root / "model" / "README.md").write_text("my notes about this model\n")


# -- average -------------------------------------------------------------------------------------
def test_average_refuses_a_trained_model_directory_and_its_own_input(lm_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(lm_run, run)
    upload = tmp_path / "up" / "mytrained"
    shutil.copytree(run / "model", upload)
    (upload / "README.md").write_text("how I trained it\n")
    before = snapshot(tmp_path)
    code, err = run_cli(["average", str(run / "model"), "-o", str(upload)], capsys)
    assert code == 2 and "-o" in one_line(err) and "--force" in err and "README.md" in err
    for target in (run / "model", run):  # its own input, or a directory holding it: even with --force
        for force in ([], ["--force"]):
            code, err = run_cli(["average", str(run / "model"), "-o", str(target), *force], capsys)
            assert code == 2 and "input" in one_line(err)
    assert snapshot(tmp_path) == before
    assert run_cli(["average", str(run / "model"), "-o", str(upload), "--force"], capsys)[0] == 0
    assert sorted(p.name for p in upload.iterdir()) == sorted(p.name for p in (run / "model").iterdir())
    assert attnlab.load_model(upload) is not None


# -- evaluate-music / evaluate-image --json --------------------------------------------------------
def test_evaluate_music_json_keeps_the_users_file_and_symlink(music_model, jsb_root, tmp_path, capsys):
    results = tmp_path / "results.json"
    results.write_text("my results\n")
    target = tmp_path / "notes.json"
    target.write_text("linked notes\n")
    link = tmp_path / "link_notes.json"
    link.symlink_to(target)
    before = snapshot(tmp_path)
    base = ["evaluate-music", "--model", str(music_model), "--data", "jsb", "--data-dir", str(jsb_root),
            "--context", "8", "--device", "cpu"]
    for existing in (results, link):
        code, err = run_cli([*base, "--json", str(existing)], capsys)
        assert code == 2 and "--json" in one_line(err) and "--force" in err
    assert snapshot(tmp_path) == before
    assert run_cli([*base, "--json", str(link), "--force"], capsys)[0] == 0
    assert not link.is_symlink() and json.loads(link.read_text())["results"][0]["context"] == 8
    assert target.read_text() == "linked notes\n"  # the link was replaced, not written through


@pytest.fixture
def tiny_image_folder(tmp_path):
    return write_folder(tmp_path / "images", ("a", "b"))


def test_evaluate_image_json_refused_then_replaced_with_force(image_model, tmp_path, tiny_image_folder, capsys):
    model = image_model
    existing = tmp_path / "r.json"
    existing.write_text("mine\n")
    args = ["evaluate-image", "--model", str(model), "--data", str(tiny_image_folder), "--json", str(existing),
            "--no-progress", "--device", "cpu"]
    code, err = run_cli(args, capsys)
    assert code == 2 and "--json" in one_line(err) and "--force" in err and existing.read_text() == "mine\n"
    assert run_cli([*args, "--force"], capsys)[0] == 0
    assert json.loads(existing.read_text())["bits_per_dim"] > 0


# -- attention / vit-figures -----------------------------------------------------------------------
def test_attention_png_is_not_overwritten(translation_model, tmp_path, capsys):
    png = tmp_path / "attention.png"
    png.write_bytes(b"my figure")
    args = ["attention", "--model", str(translation_model), "ein kleiner hund", "-o", str(png), "--device", "cpu"]
    code, err = run_cli(args, capsys)
    assert code == 2 and "-o" in one_line(err) and "--force" in err and png.read_bytes() == b"my figure"
    assert run_cli([*args, "--force"], capsys)[0] == 0
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_vit_figures_are_not_overwritten(vit_model, tmp_path, capsys):
    from PIL import Image

    image = tmp_path / "x.png"
    Image.new("L", (8, 8), 128).save(image)
    figures = tmp_path / "figures"
    figures.mkdir()
    (figures / "attention_maps.png").write_bytes(b"my earlier figure")
    (figures / "notes.txt").write_text("keep me\n")
    before = snapshot(figures)
    args = ["vit-figures", "--model", str(vit_model), "--image", str(image), "--out", str(figures), "--device", "cpu"]
    code, err = run_cli(args, capsys)
    assert code == 2 and "--out" in one_line(err) and "attention_maps.png" in err and "--force" in err
    assert snapshot(figures) == before
    assert run_cli([*args, "--force"], capsys)[0] == 0
    assert (figures / "attention_maps.png").read_bytes()[:4] == b"\x89PNG"
    assert (figures / "notes.txt").read_text() == "keep me\n"


# -- training --out: one shared check --------------------------------------------------------------
def _train_commands(tmp_path, out, jsb_root, lm_text):
    folder = tmp_path / "folder"
    if not folder.exists():
        write_folder(folder, ("a", "b"))
    tiny_images = ["--set", "num_layers=1", "--set", "d_model=16", "--set", "num_heads=2", "--set", "d_ff=32",
                   "--batch-size", "4", "--max-steps", "1", "--warmup", "1", "--val-every", "0", "--save-every", "0",
                   "--no-progress", "--device", "cpu"]
    return {
        "music": ["train", "music", "--data", "jsb", "--data-dir", str(jsb_root), "--out", str(out), *TINY_MUSIC],
        "vit": ["train", "vit", "--data", str(folder), "--out", str(out), *tiny_images],
        "image": ["train", "image", "--data", str(folder), "--out", str(out), "--preset",
                  "imagetransformer_mnist_small", "--attention", '{"name": "local_1d", "block_length": 16}',
                  *tiny_images],
        "lm": lm_args(lm_text, out),
        "caption": ["train", "caption", "--data", "scenes", "--out", str(out), "--max-steps", "1"],
        "text-to-image": ["train", "text-to-image", "--out", str(out), "--max-steps", "1"],
        "translation": ["train", "translation", "--data", "multi30k", "--out", str(out), "--max-steps", "1"],
    }


VERBS = ("music", "vit", "image", "lm", "caption", "text-to-image", "translation")


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("holds_model", (True, False), ids=("trained-model", "user-notes"))
def test_training_refuses_an_out_whose_model_exists(verb, holds_model, tmp_path, jsb_root, lm_text, capsys):
    out = tmp_path / "run"
    user_directory(out, model=holds_model)
    before = snapshot(out)
    code, err = run_cli(_train_commands(tmp_path, out, jsb_root, lm_text)[verb], capsys)
    line = one_line(err)
    assert code == 2 and "--out" in line and "--force" in line
    if holds_model:
        assert "a trained attnlab model" in line
    else:
        assert "README.md" in line and "trained" not in line  # it says what is there
    assert snapshot(out) == before


@pytest.mark.parametrize("verb", ("music", "vit", "image", "lm"))
def test_training_with_force_replaces_the_model_directory_as_a_whole(verb, tmp_path, jsb_root, lm_text, capsys):
    out = tmp_path / "run"
    user_directory(out, model=False)
    command = _train_commands(tmp_path, out, jsb_root, lm_text)[verb]
    assert run_cli([*command, "--force"], capsys)[0] == 0
    assert not (out / "model" / "README.md").exists()  # replaced as a whole, not mixed with the new files
    assert attnlab.load_model(out / "model") is not None
    assert [p.name for p in out.iterdir() if p.name.startswith(".model")] == []


def test_resume_without_checkpoints_does_not_overwrite_a_model(tmp_path, lm_text, capsys):
    out = tmp_path / "run"
    user_directory(out, model=True)
    before = snapshot(out)
    code, err = run_cli(lm_args(lm_text, out, "--resume"), capsys)
    assert code == 2 and "no checkpoints to resume" in one_line(err)
    assert snapshot(out) == before


def test_resume_replaces_its_own_model_and_keeps_the_users_files_there(lm_run, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(lm_run, out)
    (out / "model" / "README.md").write_text("how I trained it\n")
    before = (out / "model" / "model.safetensors").read_bytes()
    text = tmp_path / "text.txt"
    shutil.copy(lm_run.parent / "text.txt", text)
    args = lm_args(text, out, "--resume")
    args[args.index("--max-steps") + 1] = "3"
    assert run_cli(args, capsys)[0] == 0
    assert (out / "model" / "model.safetensors").read_bytes() != before  # the continued run's model
    assert (out / "model" / "README.md").read_text() == "how I trained it\n"
    assert attnlab.load_model(out / "model") is not None


def test_evaluate_vit_out_keeps_the_users_results(vit_model, tmp_path, capsys):
    folder = write_folder(tmp_path / "images", ("a", "b"))
    model = tmp_path / "model"
    shutil.copytree(vit_model, model)
    (model / "classes.json").write_text('{"classes": ["a", "b"]}')
    out = tmp_path / "evaluation"
    out.mkdir()
    (out / "results.json").write_text("my results\n")
    (out / "notes.txt").write_text("keep me\n")
    before = snapshot(out)
    args = ["evaluate-vit", "--model", str(model), "--data", str(folder), "--out", str(out), "--device", "cpu"]
    code, err = run_cli(args, capsys)
    assert code == 2 and "--out" in one_line(err) and "results.json" in err and "--force" in err
    assert snapshot(out) == before
    assert run_cli([*args, "--force"], capsys)[0] == 0
    # a folder the model was not trained on is scored whole (issue 39, 5), not its held-out tenth
    assert json.loads((out / "results.json").read_text())["images"] == 20
    assert (out / "notes.txt").read_text() == "keep me\n"
