"""attnlab train image --init DIR: a saved tiny Image Transformer fine-tuned on images of its
size (weights moved, image.json kept, held-out before and after); its architecture fixed."""

import json

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from attnlab.cli.main import main

pytestmark = pytest.mark.usefixtures("single_thread")

RUN = ["--batch-size", "4", "--val-every", "2", "--save-every", "2", "--no-progress", "--device", "cpu",
       "--warmup", "1", "--max-steps", "3"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(1)
    for label, name in enumerate(("top", "bottom")):
        (root / name).mkdir()
        for i in range(12):
            pixels = rng.integers(0, 40, (8, 8))
            pixels[4 * label:4 * label + 4] += 200
            Image.fromarray(pixels.astype(np.uint8)).save(root / name / f"{i}.png")
    return root


def test_fine_tune_an_image_transformer(folder, tmp_path, capsys):
    start = tmp_path / "start"
    assert main(["train", "image", "--data", str(folder), "--out", str(start), "--set", "num_layers=1", "--set",
                 "d_model=16", "--set", "num_heads=2", "--set", "d_ff=24", *RUN]) == 0
    out = tmp_path / "ft"
    capsys.readouterr()
    assert main(["train", "image", "--data", str(folder), "--init", str(start / "model"), "--out", str(out),
                 *RUN]) == 0
    err = capsys.readouterr().err
    assert "held-out before fine-tuning:" in err and "held-out: " in err and "nats per dimension" in err
    before, after = load_file(start / "model" / "model.safetensors"), load_file(out / "model" / "model.safetensors")
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert json.loads((out / "model" / "image.json").read_text())["data"] == str(folder)
    assert json.loads((out / "model" / "start.json").read_text())["init"] == str((start / "model").resolve())
    assert (out / "evaluation" / "results.json").is_file()
    # the architecture comes from DIR: another depth is refused naming the field, nothing written
    assert main(["train", "image", "--data", str(folder), "--init", str(start / "model"), "--out",
                 str(tmp_path / "o"), "--set", "num_layers=2", *RUN]) == 2
    assert "--set num_layers=2" in capsys.readouterr().err and not (tmp_path / "o").exists()
