"""attnlab train vit --init DIR: fine-tuning a saved tiny ViT, at its resolution and at a new
one (position embeddings resized in 2D), with a new head; and the bad --init inputs of
issue 37 (one line naming the flag, exit 2, nothing written)."""

import json
import shutil

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from attnlab.cli.main import main

pytestmark = pytest.mark.usefixtures("single_thread")

TINY = ["--set", "num_layers=2", "--set", "d_model=16", "--set", "num_heads=2", "--set", "d_ff=32"]
RUN = ["--batch-size", "8", "--val-every", "3", "--save-every", "3", "--no-progress", "--device", "cpu"]


def _folder(root, names):
    rng = np.random.default_rng(0)
    for label, name in enumerate(names):
        for i in range(24):
            pixels = rng.integers(0, 60, (8, 8))
            pixels[:, 4 * (label % 2):4 * (label % 2) + 4] += 180
            (root / name).mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels.astype(np.uint8)).save(root / name / f"{i}.png")
    return root


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Two classes of 8x8 grey images: bright left half or bright right half."""
    return _folder(tmp_path_factory.mktemp("images"), ("left", "right"))


@pytest.fixture(scope="module")
def start(folder, tmp_path_factory):
    """A saved tiny ViT (8x8 images, 4x4 patches: a 2x2 grid) to start from."""
    out = tmp_path_factory.mktemp("start")
    assert main(["train", "vit", "--data", str(folder), "--max-steps", "6", "--out", str(out), *TINY, *RUN,
                 "--lr", "3e-3", "--warmup", "2"]) == 0
    return out / "model"


def _tree(directory):
    return sorted((str(p.relative_to(directory)), p.stat().st_size) for p in directory.rglob("*")) \
        if directory.exists() else None


def test_fine_tune_at_the_same_resolution_keeps_classes_and_moves_weights(folder, start, tmp_path, capsys):
    out = tmp_path / "ft"
    assert main(["train", "vit", "--data", str(folder), "--init", str(start), "--max-steps", "6", "--out", str(out),
                 *RUN]) == 0
    err = capsys.readouterr().err
    assert "fine-tuning: a fresh optimizer and schedule" in err and "peak --lr 0.0001 (a tenth" in err
    assert "held-out before fine-tuning:" in err and "held-out: " in err and " -> " in err
    before, after = load_file(start / "model.safetensors"), load_file(out / "model" / "model.safetensors")
    assert before.keys() == after.keys()
    assert any(not torch.equal(before[k], after[k]) for k in before)  # the weights moved
    assert json.loads((out / "model" / "classes.json").read_text())["classes"] == ["left", "right"]
    record = json.loads((out / "model" / "start.json").read_text())
    assert record["init"] == str(start.resolve()) and record["format"] == "attnlab" and len(record["weights_sha256"]) == 64
    first = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert first["step"] == 0 and "start_valid_correct" in first and first["start"] == str(start.resolve())
    import attnlab

    assert attnlab.load(out / "model").classify(np.zeros((8, 8, 1), np.uint8), top=1)[0][0] in ("left", "right")
    # --resume continues the fine-tuning run: the same command plus --resume (the checkpoint wins)
    assert main(["train", "vit", "--data", str(folder), "--init", str(start), "--max-steps", "8", "--out", str(out),
                 *RUN, "--resume"]) == 0
    assert "the checkpoint's weights win" in capsys.readouterr().err
    # --resume without the --init it started from is refused, naming it
    assert main(["train", "vit", "--data", str(folder), "--max-steps", "9", "--out", str(out), *RUN, "--resume"]) == 2
    assert "give the same --init" in capsys.readouterr().err


def test_fine_tune_at_a_new_resolution_resizes_the_position_embeddings(folder, start, tmp_path, capsys):
    from attnlab.layers.patch import resize_position_embedding

    out = tmp_path / "ft16"
    assert main(["train", "vit", "--data", str(folder), "--init", str(start), "--image-size", "16",
                 "--max-steps", "1", "--lr", "1e-12", "--out", str(out), *RUN]) == 0
    err = capsys.readouterr().err
    assert "image_size 8 -> 16 (position embeddings resized in 2D" in err
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["image_size"] == 16 and config["patch_size"] == 4
    before, after = load_file(start / "model.safetensors"), load_file(out / "model" / "model.safetensors")
    expected = resize_position_embedding(before["position_embedding"].double(), (2, 2), (4, 4), 1)
    assert after["position_embedding"].shape == (1, 17, 16)
    torch.testing.assert_close(after["position_embedding"].double(), expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(after["head.weight"], before["head.weight"], atol=1e-5, rtol=0)  # same classes


def test_other_classes_get_a_new_head(tmp_path, start, capsys):
    three = _folder(tmp_path / "three", ("a", "b", "c"))
    out = tmp_path / "ft3"
    assert main(["train", "vit", "--data", str(three), "--init", str(start), "--max-steps", "2", "--out", str(out),
                 *RUN]) == 0
    err = capsys.readouterr().err
    assert "num_classes 2 -> 3 (a new head)" in err and "new parameters: head." in err
    assert json.loads((out / "model" / "config.json").read_text())["num_classes"] == 3


def test_bad_init_inputs_are_one_line_exit_2_and_write_nothing(folder, start, tmp_path, capsys):
    import attnlab

    lm = attnlab.create_model("lm_char_small", vocab_size=20, num_layers=1, d_model=16, num_heads=2, d_ff=32)
    lm_dir = lm.save_pretrained(tmp_path / "lm")
    half = tmp_path / "half"
    half.mkdir()
    shutil.copy(start / "config.json", half / "config.json")  # config without weights
    truncated = tmp_path / "truncated"
    shutil.copytree(start, truncated)
    data = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    pickle_only = tmp_path / "pickle"
    pickle_only.mkdir()
    (pickle_only / "pytorch_model.bin").write_bytes(b"\x80\x04not to be unpickled")
    inside = tmp_path / "inside"
    shutil.copytree(start, inside / "model")
    cases = [
        (["--init", str(tmp_path / "missing")], "--init", tmp_path / "o1"),
        (["--init", str(lm_dir)], "language model", tmp_path / "o2"),
        (["--init", str(half)], "model.safetensors", tmp_path / "o3"),
        (["--init", str(truncated)], "model.safetensors", tmp_path / "o4"),
        (["--init", str(pickle_only)], "pytorch_model.bin", tmp_path / "o5"),
        (["--init", str(inside / "model")], "inside --out", inside),
        (["--init", str(start), "--set", "num_layers=3"], "--set num_layers=3", tmp_path / "o7"),
        (["--init", str(start), "--image-size", "10"], "not divisible by patch_size", tmp_path / "o8"),
        (["--init", str(start), "--preset", "vit_tiny_patch7_28"], "--preset vit_tiny_patch7_28", tmp_path / "o9"),
    ]
    for extra, named, out in cases:
        was = _tree(out)
        assert main(["train", "vit", "--data", str(folder), "--max-steps", "2", "--out", str(out), *RUN,
                     *extra]) == 2, extra
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and named in err, (extra, err)
        assert _tree(out) == was, extra  # nothing written
    # --init with --resume on a run that did not start from it: refused, pointing at the choice
    run = tmp_path / "run"
    assert main(["train", "vit", "--data", str(folder), "--max-steps", "3", "--out", str(run), *TINY, *RUN]) == 0
    capsys.readouterr()
    was = _tree(run)
    assert main(["train", "vit", "--data", str(folder), "--max-steps", "6", "--out", str(run), *TINY, *RUN,
                 "--init", str(start), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "did not start from it" in err and "--init" in err
    assert _tree(run) == was


def test_fine_tune_a_timm_vit_at_a_new_resolution_with_a_new_head(tmp_path, capsys):
    """--init on a timm ViT directory (the foreign format attnlab.load reads): RGB images at 48x48
    (its 32x32 grid of 16-pixel patches grows from 2x2 to 3x3), two classes instead of five."""
    try:
        from tests.interop.test_timm_vit_directory import CASES, _saved
    except BaseException as error:  # the module skips itself when timm is not installed
        pytest.skip(f"timm's test fixtures are unavailable: {error}")
    _, directory = _saved(tmp_path, *CASES[0][1:])
    root = tmp_path / "rgb"
    rng = np.random.default_rng(0)
    for label, name in enumerate(("red", "blue")):
        (root / name).mkdir(parents=True)
        for i in range(12):
            pixels = rng.integers(0, 60, (20, 20, 3))
            pixels[..., 2 * label] += 180
            Image.fromarray(pixels.astype(np.uint8)).save(root / name / f"{i}.png")
    out = tmp_path / "ft"
    capsys.readouterr()
    assert main(["train", "vit", "--data", str(root), "--init", str(directory), "--image-size", "48",
                 "--max-steps", "2", "--out", str(out), *RUN]) == 0
    err = capsys.readouterr().err
    assert "timm vit_tiny_patch16_224" in err and "image_size 32 -> 48" in err and "num_classes 5 -> 2" in err
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["image_size"] == 48 and config["num_classes"] == 2
    assert json.loads((out / "model" / "classes.json").read_text())["classes"] == ["blue", "red"]
