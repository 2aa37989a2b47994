"""Small fixtures shared by the issue-31 tests: a tiny JSB archive, tiny model directories
of the music, ViT and Image Transformer families, and tiny image folders."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import attnlab
from attnlab.data.music import JSB_FILE

TINY_MUSIC = ["--preset", "music_tiny", "--set", "num_layers=1", "--set", "d_model=16", "--set", "num_heads=2",
              "--set", "d_ff=32", "--context", "16", "--batch-size", "2", "--max-steps", "1", "--warmup", "1",
              "--val-every", "0", "--save-every", "0", "--val-batches", "1", "--no-progress", "--device", "cpu"]


def write_jsb(root: Path, *, train: int = 6, valid: int = 3, steps: int = 12) -> Path:
    """A JSB-format archive under ``root`` (``root/jsb_chorales/...npz``) of random
    chorales: ``train`` and ``valid`` of ``steps`` time steps each."""
    rng = np.random.default_rng(0)
    arrays = {}
    for split, count in (("train", train), ("valid", valid)):
        grid = rng.integers(48, 72, (count * steps, 4)).astype(np.float64)
        grid[rng.random(grid.shape) < 0.1] = np.nan
        arrays[f"{split}_steps"] = grid
        arrays[f"{split}_lengths"] = np.full(count, steps)
    path = root / JSB_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays)
    return root


@pytest.fixture(scope="session")
def jsb_root(tmp_path_factory) -> Path:
    return write_jsb(tmp_path_factory.mktemp("jsb"))


@pytest.fixture(scope="session")
def music_model(tmp_path_factory) -> Path:
    """An untrained tiny JSB Music Transformer directory without music.json (as models
    written before it existed)."""
    torch.manual_seed(0)
    model = attnlab.create_model("music_tiny", num_layers=1, d_model=16, num_heads=2, d_ff=32)
    return model.save_pretrained(tmp_path_factory.mktemp("music") / "model")


def write_folder(root: Path, classes: tuple[str, ...], *, size: int = 8, mode: str = "L", per_class: int = 10) -> Path:
    rng = np.random.default_rng(1)
    for name in classes:
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            shape = (size, size) if mode == "L" else (size, size, 3)
            Image.fromarray(rng.integers(0, 255, shape).astype(np.uint8), mode=mode).save(root / name / f"{i}.png")
    return root


@pytest.fixture(scope="session")
def vit_model(tmp_path_factory) -> Path:
    """A tiny untrained ViT on 8×8 grey images, 2 classes, without classes.json."""
    torch.manual_seed(0)
    model = attnlab.create_model("vit_tiny_patch4_28", image_size=8, in_channels=1, num_classes=2, num_layers=1,
                                 d_model=16, num_heads=2, d_ff=32)
    return model.save_pretrained(tmp_path_factory.mktemp("vit") / "model")


@pytest.fixture(scope="session")
def image_model(tmp_path_factory) -> Path:
    """A tiny untrained class-conditional Image Transformer on 8×8 grey images (2 classes),
    with the image.json `train image` writes."""
    import json

    torch.manual_seed(0)
    model = attnlab.create_model("imagetransformer_mnist_small", height=8, width=8, channels=1, num_classes=2,
                                 num_layers=1, d_model=16, num_heads=2, d_ff=24,
                                 attention={"name": "local_1d", "block_length": 16})
    info = json.dumps({"data": "somewhere", "classes": ["a", "b"], "class_conditional": True}).encode()
    return model.save_pretrained(tmp_path_factory.mktemp("image") / "model", extra_files={"image.json": info})
