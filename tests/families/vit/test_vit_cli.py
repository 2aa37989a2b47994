"""attnlab train vit / classify / evaluate-vit / vit-figures on a tiny image folder."""

import json

import numpy as np
import pytest
from PIL import Image

from attnlab.cli.main import main
from families.conftest import with_record

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Two classes of 8x8 grey images: bright left half or bright right half."""
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for label, name in enumerate(("left", "right")):
        for i in range(24):
            pixels = rng.integers(0, 60, (8, 8))
            pixels[:, 4 * label:4 * label + 4] += 180
            (root / name).mkdir(exist_ok=True)
            Image.fromarray(pixels.astype(np.uint8)).save(root / name / f"{i}.png")
    return root


TINY = ["--preset", "vit_tiny_patch4_28", "--set", "num_layers=2", "--set", "d_model=16", "--set", "num_heads=2",
        "--set", "d_ff=32", "--batch-size", "8", "--val-every", "3", "--save-every", "3", "--no-progress",
        "--device", "cpu", "--lr", "3e-3", "--warmup", "2"]


@pytest.fixture(scope="module")
def trained(folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    assert main(["train", "vit", "--data", str(folder), "--max-steps", "6", "--out", str(out), *TINY]) == 0
    return out


def test_train_writes_model_checkpoints_and_evaluation(trained):
    assert (trained / "model" / "model.safetensors").is_file()
    assert json.loads((trained / "model" / "classes.json").read_text())["classes"] == ["left", "right"]
    results = json.loads((trained / "evaluation" / "results.json").read_text())
    assert results["images"] == 4 and sum(map(sum, results["confusion_matrix"])) == 4
    assert (trained / "evaluation" / "confusion_matrix.png").stat().st_size > 1000
    assert (trained / "checkpoints").is_dir()
    assert any("valid_correct" in line for line in (trained / "metrics.jsonl").read_text().splitlines())


def test_resume_continues_to_more_steps(folder, trained, tmp_path):
    assert main(["train", "vit", "--data", str(folder), "--max-steps", "8", "--out", str(trained), "--resume",
                 *TINY]) == 0
    steps = [json.loads(line).get("step") for line in (trained / "metrics.jsonl").read_text().splitlines()]
    assert max(steps) == 8


def test_classify_prints_top_k(folder, trained, capsys):
    image = folder / "left" / "0.png"
    assert main(["classify", "--model", str(trained / "model"), str(image), "--top-k", "2", "--device", "cpu"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"{image}: ") and line.count("%") == 2
    assert {"left", "right"} == {part.split()[0] for part in line.split(": ", 1)[1].split(", ")}


def test_evaluate_and_figures(folder, trained, tmp_path, capsys):
    assert main(["evaluate-vit", "--model", str(trained / "model"), "--data", str(folder), "--out",
                 str(tmp_path / "eval"), "--device", "cpu"]) == 0
    assert "accuracy" in capsys.readouterr().out
    assert (tmp_path / "eval" / "confusion_matrix.png").is_file()
    assert main(["vit-figures", "--model", str(trained / "model"), "--out", str(tmp_path / "figs"),
                 "--device", "cpu"]) == 0
    assert sorted(p.name for p in (tmp_path / "figs").glob("*.png")) == sorted(
        ["embedding_filters.png", "position_similarity.png", "attention_distance.png", "attention_maps.png"])


def test_evaluate_limit_scores_the_first_images(folder, trained, tmp_path, capsys):
    args = ["evaluate-vit", "--model", str(trained / "model"), "--data", str(folder), "--device", "cpu"]
    assert main([*args, "--out", str(tmp_path / "all")]) == 0
    everything = json.loads((tmp_path / "all" / "results.json").read_text())["images"]
    assert main([*args, "--limit", "3", "--out", str(tmp_path / "three")]) == 0
    assert f"scoring the first 3 of the {everything} images" in capsys.readouterr().out
    assert json.loads((tmp_path / "three" / "results.json").read_text())["images"] == 3


def test_evaluate_scores_a_folder_whole_and_says_what_it_scored(folder, trained, tmp_path, capsys):
    # Issue 39, 5: a folder the model was not trained on is scored whole (or its test/ part),
    # never silently its held-out tenth; the model's own folder, on the tenth, saying so.
    import shutil

    other, only = tmp_path / "mine", tmp_path / "only"
    shutil.copytree(folder, other)
    shutil.copytree(folder / "left", only / "test" / "left")
    model = str(trained / "model")
    for data, count, said in ((other, 48, "all 48 of 48 images of"), (only, 24, "all 24 images of"),
                              (folder, 4, "4 of 48 images of")):
        assert main(["evaluate", "--model", model, "--data", str(data), "--device", "cpu",
                     "--out", str(tmp_path / data.name / "eval")]) == 0
        out = capsys.readouterr().out
        assert f"scoring {said}" in out and f"of {count})" in out, out
        assert json.loads((tmp_path / data.name / "eval" / "results.json").read_text())["images"] == count


def test_evaluate_routes_a_vit_model_to_its_evaluator(folder, trained, tmp_path, capsys):
    # `attnlab evaluate` reads the model's family and runs evaluate-vit with the same arguments
    assert main(["evaluate", "--model", str(trained / "model"), "--data", str(folder), "--split", "test",
                 "--device", "cpu", "--out", str(tmp_path / "eval")]) == 0
    assert "accuracy" in capsys.readouterr().out
    assert (tmp_path / "eval" / "results.json").is_file()


def test_bf16_autocast_is_used_and_reported(folder, tmp_path, capsys):
    out = tmp_path / "bf16"
    assert main(["train", "vit", "--data", str(folder), "--max-steps", "2", "--out", str(out), *TINY,
                 "--precision", "bf16"]) == 0
    assert "bf16 autocast" in capsys.readouterr().err
    assert json.loads((out / "model" / "config.json").read_text())["family"] == "vit"


def test_mean_pool_model_without_class_token(folder, tmp_path):
    out = tmp_path / "gap"
    assert main(["train", "vit", "--data", str(folder), "--max-steps", "2", "--out", str(out), *TINY,
                 "--set", "class_token=false", "--set", "pool=mean"]) == 0
    assert main(["vit-figures", "--model", str(out / "model"), "--out", str(tmp_path / "figs"), "--device", "cpu"]) == 0
    assert (tmp_path / "figs" / "attention_maps.png").is_file()


def test_bad_inputs_are_clear_errors(folder, trained, tmp_path, capsys):
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not an image")
    assert main(["classify", "--model", str(trained / "model"), str(broken), "--device", "cpu"]) == 2
    assert "broken.png: not a readable image" in capsys.readouterr().err
    assert main(["train", "vit", "--data", str(folder), "--image-size", "9", "--max-steps", "1",
                 "--out", str(tmp_path / "x"), *TINY]) == 2
    assert "not divisible by patch_size" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()  # nothing written before the options are checked
    assert main(["train", "vit", "--data", "nowhere", "--max-steps", "1", "--out", str(tmp_path / "y"), *TINY]) == 2
    assert "neither a named image set" in capsys.readouterr().err
    assert main(["classify", "--model", str(tmp_path), str(broken)]) == 2
    assert "config.json" in capsys.readouterr().err
    classes = (trained / "classes.json").read_bytes()
    assert main(["train", "vit", "--data", str(folder), "--max-steps", "9", "--out", str(trained), *TINY]) == 2
    assert "--resume" in capsys.readouterr().err and (trained / "classes.json").read_bytes() == classes


def test_resume_into_another_kind_of_run_writes_nothing_there(folder, trained, tmp_path, capsys):
    import shutil

    other = tmp_path / "other"  # a run of another verb: checkpoints, but no classes.json
    shutil.copytree(trained / "checkpoints", other / "checkpoints")
    before = sorted(p.relative_to(other) for p in other.rglob("*"))
    assert main(["train", "vit", "--data", str(folder), "--max-steps", "9", "--out", str(other), "--resume",
                 *TINY]) == 2
    assert "not a Vision Transformer run" in capsys.readouterr().err
    assert sorted(p.relative_to(other) for p in other.rglob("*")) == before


def test_the_progress_bar_counts_images_not_tokens(folder, tmp_path, monkeypatch):
    """train vit's bar said tok/s; its loss counts one target per image."""
    from attnlab.training import trainer as module

    units, original = [], module._Progress.__init__

    def spy(self, config, **kwargs):
        units.append(config.progress_unit)
        original(self, config, **kwargs)

    monkeypatch.setattr(module._Progress, "__init__", spy)
    tiny = [flag for flag in TINY if flag != "--no-progress"]
    assert main(["train", "vit", "--data", str(folder), "--max-steps", "1", "--out", str(tmp_path / "run"), *tiny]) == 0
    assert units == ["images"]


def test_evaluate_without_data_scores_the_models_own_held_out_images_and_says_so(trained, tmp_path, capsys):
    # Issue 39, 4: no --data scores the model's own held-out images, in one line that says so
    model = trained / "model"
    assert main(["evaluate", "--model", str(model), "--device", "cpu", "--out", str(tmp_path / "eval")]) == 0
    out = capsys.readouterr().out
    assert f"scoring {model}'s own held-out data: 4 of 48 images of" in out and "(4 images)" in out, out
    # the folder classes.json names is gone: refused, naming the file, the folder and --data
    moved = with_record(model, tmp_path, "classes.json", data=str(tmp_path / "deleted-folder"))
    for argv in (["evaluate", "--model", str(moved)], ["vit-figures", "--model", str(moved), "--out",
                                                          str(tmp_path / "figs")]):
        assert main([*argv, "--device", "cpu"]) == 2
        err = capsys.readouterr().err
        assert "classes.json" in err and "deleted-folder" in err and "--data" in err, err
    assert not (tmp_path / "figs").exists()


def test_a_folder_is_recorded_by_its_absolute_path(folder, tmp_path, monkeypatch):
    # trained with a relative --data, evaluated from elsewhere: the record still finds the folder
    monkeypatch.chdir(folder.parent)
    out = tmp_path / "run"
    assert main(["train", "vit", "--data", folder.name, "--max-steps", "1", "--out", str(out), *TINY]) == 0
    assert json.loads((out / "model" / "classes.json").read_text())["data"] == str(folder.resolve())
