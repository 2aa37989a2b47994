"""attnlab train image / sample-images / complete-image / super-resolve / evaluate-image
on a tiny folder of 8×8 grey images, with tiny models."""

import json

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from attnlab.cli.main import main
from families.conftest import with_record

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Two classes of 8×8 grey images: a bright top half or a bright bottom half."""
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for label, name in enumerate(("top", "bottom")):
        (root / name).mkdir()
        for i in range(12):
            pixels = rng.integers(0, 40, (8, 8))
            pixels[4 * label:4 * label + 4] += 200
            Image.fromarray(pixels.astype(np.uint8)).save(root / name / f"{i}.png")
    return root


TINY = ["--set", "num_layers=1", "--set", "d_model=16", "--set", "num_heads=2", "--set", "d_ff=24",
        "--batch-size", "4", "--val-every", "2", "--save-every", "2", "--no-progress", "--device", "cpu",
        "--warmup", "1", "--max-steps", "3"]
LOCAL_2D = '{"name": "local_2d", "query_shape": [2, 4], "memory_flange": [1, 2]}'


@pytest.fixture(scope="module")
def trained(folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    assert main(["train", "image", "--data", str(folder), "--classes", "--attention", LOCAL_2D,
                 "--out", str(out), *TINY]) == 0
    return out


@pytest.fixture(scope="module")
def super_resolution(folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("sr")
    assert main(["train", "image", "--data", str(folder), "--preset", "imagetransformer_sr_mnist_small",
                 "--set", "low_resolution=4", "--set", "num_encoder_layers=1", "--out", str(out), *TINY]) == 0
    return out / "model"


def png_size(path):
    with Image.open(path) as image:
        return image.size, image.mode


def test_train_writes_the_model_and_test_bits_per_dim(trained):
    model = trained / "model"
    assert (model / "model.safetensors").is_file()
    info = json.loads((model / "image.json").read_text())
    assert info["classes"] == ["bottom", "top"] and info["class_conditional"]
    config = json.loads((model / "config.json").read_text())
    assert config["attention"]["name"] == "local_2d" and (config["height"], config["channels"]) == (8, 1)
    results = json.loads((trained / "evaluation" / "results.json").read_text())
    assert results["images"] == 2 and 4.0 < results["bits_per_dim"] < 12.0
    assert any("valid_loss" in line for line in (trained / "metrics.jsonl").read_text().splitlines())


def test_sample_images_writes_a_row_per_class(trained, tmp_path):
    out = tmp_path / "grid.png"
    assert main(["sample-images", "--model", str(trained / "model"), "--n", "3", "--out", str(out), "--scale", "1",
                 "--no-progress", "--device", "cpu"]) == 0
    assert png_size(out) == ((2 + 3 * 10, 2 + 2 * 10), "L")  # 3 columns, 2 classes, 8 px + 2 px padding
    one = tmp_path / "one.png"
    assert main(["sample-images", "--model", str(trained / "model"), "--n", "4", "--class", "top", "--out", str(one),
                 "--temperature", "0.9", "--scale", "2", "--no-progress", "--device", "cpu"]) == 0
    assert png_size(one)[0] == (2 * 22, 2 * 22)  # 2×2 grid, enlarged twice


def test_complete_image_keeps_the_given_rows(trained, folder, tmp_path, capsys):
    out = tmp_path / "completions.png"
    source = folder / "top" / "0.png"
    assert main(["complete-image", "--model", str(trained / "model"), str(source), "--keep-rows", "4", "--n", "2",
                 "--class", "top", "--out", str(out), "--scale", "1", "--no-progress", "--device", "cpu"]) == 0
    with Image.open(out) as grid:
        pixels = np.asarray(grid)
    original = np.asarray(Image.open(source))
    for column in range(4):  # given, 2 completions, original: the top 4 rows are the original's
        left = 2 + column * 10
        assert (pixels[2:6, left:left + 8] == original[:4]).all()
    assert (pixels[6:10, 2:10] == 255).all()  # the given image's hidden rows are blank
    assert (pixels[2:10, 32:40] == original).all()
    code = main(["complete-image", "--model", str(trained / "model"), str(source), "--keep-rows", "3",
                 "--class", "top", "--out", str(tmp_path / "x.png"), "--no-progress", "--device", "cpu"])
    assert code != 0 and "multiple of the query block height 2" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_complete_image_draws_a_row_per_image(trained, folder, tmp_path, capsys):
    out = tmp_path / "rows.png"
    sources = [folder / "top" / "0.png", folder / "bottom" / "1.png", folder / "top" / "2.png"]
    assert main(["complete-image", "--model", str(trained / "model"), *map(str, sources), "--keep-rows", "2",
                 "--n", "1", "--class", "top", "--class", "bottom", "--class", "top", "--out", str(out), "--scale",
                 "1", "--no-progress", "--device", "cpu"]) == 0
    with Image.open(out) as grid:
        pixels = np.asarray(grid)
    assert pixels.shape == (2 + 3 * 10, 2 + 3 * 10)  # given, one completion, original; a row per image
    for row, source in enumerate(sources):
        original = np.asarray(Image.open(source))
        top = 2 + row * 10
        assert (pixels[top:top + 8, 22:30] == original).all()  # the original closes its row
        assert (pixels[top:top + 2, 12:20] == original[:2]).all()  # the completion keeps its top rows
    code = main(["complete-image", "--model", str(trained / "model"), *map(str, sources), "--keep-rows", "2",
                 "--class", "top", "--class", "bottom", "--out", str(tmp_path / "x.png"), "--no-progress",
                 "--device", "cpu"])
    assert code != 0 and "--class is given 2 times for 3 images" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_evaluate_image_reports_bits_per_dim(trained, tmp_path, capsys):
    result = tmp_path / "result.json"
    assert main(["evaluate-image", "--model", str(trained / "model"), "--json", str(result), "--no-progress",
                 "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "test: " in printed and "bits/dim" in printed and "over 2 images" in printed
    saved = json.loads(result.read_text())
    expected = json.loads((trained / "evaluation" / "results.json").read_text())["bits_per_dim"]
    assert saved["bits_per_dim"] == pytest.approx(expected, rel=1e-6)


def test_evaluate_image_scores_another_folder_whole(trained, folder, tmp_path, capsys):
    # Issue 39, 5: a folder the model was not trained on is scored whole, and the line says so.
    import shutil

    shutil.copytree(folder, tmp_path / "mine")
    result = tmp_path / "result.json"
    assert main(["evaluate-image", "--model", str(trained / "model"), "--data", str(tmp_path / "mine"),
                 "--json", str(result), "--no-progress", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "scoring all 24 of 24 images of" in printed and "over 24 images" in printed
    assert json.loads(result.read_text())["images"] == 24


def test_super_resolve_writes_the_full_size_image(super_resolution, folder, tmp_path, capsys):
    small = tmp_path / "small.png"
    Image.fromarray(np.full((4, 4), 200, dtype=np.uint8)).save(small)
    out = tmp_path / "big.png"
    assert main(["super-resolve", "--model", str(super_resolution), str(small), "--out", str(out), "--scale", "1",
                 "--no-progress", "--device", "cpu"]) == 0
    assert png_size(out) == ((8, 8), "L")
    strip = tmp_path / "strip.png"
    assert main(["super-resolve", "--model", str(super_resolution), str(folder / "top" / "1.png"), "--downsample",
                 "--out", str(tmp_path / "big2.png"), "--comparison", str(strip), "--scale", "1", "--no-progress",
                 "--device", "cpu"]) == 0
    assert "PSNR against the original: bicubic" in capsys.readouterr().err
    assert png_size(strip)[0] == (2 + 4 * 10, 12)


def test_evaluate_image_scores_super_resolution_against_bicubic(super_resolution, tmp_path, capsys):
    result, figure = tmp_path / "result.json", tmp_path / "sr.png"
    assert main(["evaluate-image", "--model", str(super_resolution), "--super-resolve", "3", "--figure", str(figure),
                 "--figure-images", "2", "--scale", "1", "--json", str(result), "--no-progress",
                 "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "super-resolution 4×4 -> 8×8 of the first 2 images (greedy): PSNR" in printed  # the test split has 2
    saved = json.loads(result.read_text())["super_resolution"]
    assert saved["images"] == 2 and saved["temperature"] == 0 and 0 <= saved["model_better"] <= 1
    assert png_size(figure) == ((2 + 4 * 10, 2 + 2 * 10), "L")  # low-res, bicubic, output, original; 2 rows
    before = figure.read_bytes()
    code = main(["evaluate-image", "--model", str(super_resolution), "--super-resolve", "3", "--figure", str(figure),
                 "--no-progress", "--device", "cpu"])
    assert code != 0 and "exists; pass --force" in capsys.readouterr().err and figure.read_bytes() == before
    averaged = tmp_path / "averaged.json"
    assert main(["evaluate-image", "--model", str(super_resolution), "--super-resolve", "2", "--temperature", "1",
                 "--samples", "3", "--json", str(averaged), "--no-progress", "--device", "cpu"]) == 0
    assert "(temperature 1, the mean of 3 samples): PSNR" in capsys.readouterr().out
    assert json.loads(averaged.read_text())["super_resolution"]["samples"] == 3


def test_bad_inputs_are_refused_with_clear_errors(trained, super_resolution, folder, tmp_path, capsys):
    model = str(trained / "model")
    wrong = tmp_path / "wrong.png"
    Image.fromarray(np.zeros((9, 8), dtype=np.uint8)).save(wrong)
    mine = tmp_path / "mine.png"
    mine.write_bytes(b"not attnlab's")
    cases = [
        (["complete-image", "--model", model, str(wrong), "--keep-rows", "2", "--class", "top",
          "--out", str(tmp_path / "a.png")], "is 8×9 pixels, but the model takes 8×8"),
        (["sample-images", "--model", model, "--out", str(mine)], "exists; pass --force"),
        (["sample-images", "--model", model, "--out", str(tmp_path / "a.jpg")], "ending in .png"),
        (["sample-images", "--model", model, "--class", "sideways", "--out", str(tmp_path / "a.png")],
         "not one of the model's 2 classes"),
        (["sample-images", "--model", str(super_resolution), "--out", str(tmp_path / "a.png")],
         "use `attnlab super-resolve`"),
        (["super-resolve", "--model", model, str(wrong), "--out", str(tmp_path / "a.png")],
         "not a super-resolution model"),
        (["super-resolve", "--model", str(super_resolution), str(wrong), "--out", str(tmp_path / "a.png")],
         "but the model takes 4×4"),
        (["train", "image", "--data", str(folder), "--attention", '{"name": "local_2d", "query_shape": [3, 4]}',
          "--out", str(tmp_path / "run"), *TINY], "does not tile the 8×8 grid"),
        (["train", "image", "--data", str(folder), "--attention", "{nope", "--out", str(tmp_path / "run"), *TINY],
         "not a JSON object"),
        (["sample-images", "--model", model, "--temperature", "-1", "--out", str(tmp_path / "a.png")],
         "--temperature=-1.0 must be >= 0"),
        (["evaluate-image", "--model", model, "--super-resolve", "2"], "is not a super-resolution model"),
        (["evaluate-image", "--model", str(super_resolution), "--figure", str(tmp_path / "a.png")],
         "pass --super-resolve N too"),
        (["evaluate-image", "--model", str(super_resolution), "--super-resolve", "0"], "--super-resolve=0 must be"),
        (["evaluate-image", "--model", str(super_resolution), "--super-resolve", "2", "--figure",
          str(mine / "a.png")], f"--figure {mine / 'a.png'}: {mine} is a file, not a directory"),
        (["evaluate-image", "--model", str(super_resolution), "--super-resolve", "2", "--temperature", "-1"],
         "--temperature=-1.0 must be >= 0"),
        (["evaluate-image", "--model", str(super_resolution), "--super-resolve", "2", "--samples", "3"],
         "--samples 3: greedy outputs (--temperature 0) are all the same"),
        (["evaluate-image", "--model", str(super_resolution), "--super-resolve", "2", "--samples", "0",
          "--temperature", "1"], "--samples=0 must be at least 1"),
        (["evaluate-image", "--model", str(super_resolution), "--samples", "4", "--temperature", "1"],
         "--samples 4 averages super-resolution outputs: pass --super-resolve N too"),
        (["train", "image", "--data", "nowhere", "--out", str(tmp_path / "run"), *TINY],
         "neither a named image set (mnist, fashion-mnist, digits, emoji) nor a directory"),
        (["train", "image", "--data", str(folder), "--set", "low_res_input=nan", "--out", str(tmp_path / "run"),
          *TINY], "ImageTransformerConfig.low_res_input=nan is not true or false"),
    ]
    for argv, message in cases:
        assert main([*argv, "--no-progress", "--device", "cpu"]) != 0, argv
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, (argv, err)
    assert mine.read_bytes() == b"not attnlab's"
    assert not (tmp_path / "a.png").exists() and not (tmp_path / "run").exists()


def test_the_progress_bar_counts_sub_pixels_not_tokens(folder, tmp_path, monkeypatch):
    """train image's bar said tok/s; its loss counts sub-pixels."""
    from attnlab.training import trainer as module

    units, original = [], module._Progress.__init__

    def spy(self, config, **kwargs):
        units.append(config.progress_unit)
        original(self, config, **kwargs)

    monkeypatch.setattr(module._Progress, "__init__", spy)
    tiny = [flag for flag in TINY if flag not in ("--no-progress",)]
    assert main(["train", "image", "--data", str(folder), "--out", str(tmp_path / "run"), *tiny]) == 0
    assert units == ["sub-pixels"]


INIT_RUN = ["--batch-size", "4", "--val-every", "2", "--save-every", "2", "--no-progress", "--device", "cpu",
            "--warmup", "1", "--max-steps", "3"]


def test_fine_tune_an_image_transformer(folder, tmp_path, capsys):
    start = tmp_path / "start"
    assert main(["train", "image", "--data", str(folder), "--out", str(start), "--set", "num_layers=1", "--set",
                 "d_model=16", "--set", "num_heads=2", "--set", "d_ff=24", *INIT_RUN]) == 0
    out = tmp_path / "ft"
    capsys.readouterr()
    assert main(["train", "image", "--data", str(folder), "--init", str(start / "model"), "--out", str(out),
                 *INIT_RUN]) == 0
    err = capsys.readouterr().err
    assert "held-out before fine-tuning:" in err and "held-out: " in err and "nats per dimension" in err
    before, after = load_file(start / "model" / "model.safetensors"), load_file(out / "model" / "model.safetensors")
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert json.loads((out / "model" / "image.json").read_text())["data"] == str(folder)
    assert json.loads((out / "model" / "start.json").read_text())["init"] == str((start / "model").resolve())
    assert (out / "evaluation" / "results.json").is_file()
    # the architecture comes from DIR: another depth is refused naming the field, nothing written
    assert main(["train", "image", "--data", str(folder), "--init", str(start / "model"), "--out",
                 str(tmp_path / "o"), "--set", "num_layers=2", *INIT_RUN]) == 2
    assert "--set num_layers=2" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_evaluate_image_without_data_scores_its_own_held_out_images_and_says_so(trained, tmp_path, capsys):
    # Issue 39, 4: no --data scores the model's own held-out images, in one line that says so;
    # a recorded folder that is gone is refused naming image.json, the folder and --data
    model = trained / "model"
    assert main(["evaluate-image", "--model", str(model), "--no-progress", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert f"scoring {model}'s own held-out data: " in out and "(2 images)" in out, out
    moved = with_record(model, tmp_path, "image.json", data=str(tmp_path / "deleted-folder"))
    assert main(["evaluate-image", "--model", str(moved), "--no-progress", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "image.json" in err and "deleted-folder" in err and "--data" in err, err


def test_seed_and_top_k_are_bounded_where_they_are_read(trained, tmp_path, capsys):
    # --seed 99999999999999999999 failed inside torch ("Overflow when unpacking long long"), -1 was taken
    import argparse

    from attnlab.families.image.evaluate import add_arguments as evaluate_arguments
    from attnlab.families.image.train import add_sampling_arguments
    from attnlab.families.text_to_image.train import add_arguments as text_to_image_arguments

    for add, flag, values in ((add_sampling_arguments, "--seed", ("-1", "99999999999999999999")),
                              (add_sampling_arguments, "--top-k", ("0", "257", "99999999999999999999")),
                              (evaluate_arguments, "--seed", ("-1", "99999999999999999999")),
                              (evaluate_arguments, "--top-k", ("0", "99999999999999999999")),
                              (text_to_image_arguments, "--top-k", ("0", "99999999999999999999"))):
        parser = argparse.ArgumentParser(exit_on_error=False)
        add(parser)
        for value in values:
            required = ["--model", "m"] if add is evaluate_arguments else (
                ["--out", "o"] if add is text_to_image_arguments else [])
            with pytest.raises((argparse.ArgumentError, SystemExit)):
                parser.parse_args([*required, flag, value])
    with pytest.raises(SystemExit) as exited:  # argparse's one line, status 2
        main(["sample-images", "--model", str(trained / "model"), "--out", str(tmp_path / "s.png"),
              "--seed", "99999999999999999999"])
    assert exited.value.code == 2
    assert "argument --seed" in capsys.readouterr().err and not (tmp_path / "s.png").exists()


def test_image_json_is_read_size_capped_and_depth_safe(trained, tmp_path, capsys):
    # image.json was read with plain json.loads: nested 100k deep it raised RecursionError
    import shutil

    from attnlab.families.image.train import read_image_info

    moved = tmp_path / "deep"
    shutil.copytree(trained / "model", moved)
    (moved / "image.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="image.json"):
        read_image_info(moved / "image.json")
    assert main(["sample-images", "--model", str(moved), "--out", str(tmp_path / "s.png")]) == 2
    assert "image.json" in capsys.readouterr().err
