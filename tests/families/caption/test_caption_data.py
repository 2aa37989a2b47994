"""COCO and Flickr caption formats, read from small files the tests write."""

import json

import pytest
import torch

from attnlab.families.caption.data import load_caption_data, read_coco_captions, read_flickr_captions
from attnlab.data.images import to_bytes_png


def _image(value: int, size: int = 8) -> bytes:
    return to_bytes_png(torch.full((3, size, size), value, dtype=torch.uint8))


def _write_images(folder, count):
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (folder / f"img{i:02d}.png").write_bytes(_image(10 * i))


def test_coco_format(tmp_path):
    _write_images(tmp_path / "train2017", 25)
    data = {"images": [{"id": 100 + i, "file_name": f"img{i:02d}.png"} for i in range(25)],
            "annotations": [{"image_id": 100 + i, "caption": f"caption {i} {k}"} for i in range(25) for k in range(2)]}
    (tmp_path / "annotations").mkdir()
    (tmp_path / "annotations" / "captions_train2017.json").write_text(json.dumps(data))
    train = load_caption_data(f"coco:{tmp_path}", "train", image_size=16)
    valid = load_caption_data(f"coco:{tmp_path}", "valid", image_size=16)
    test = load_caption_data(f"coco:{tmp_path}", "test", image_size=16)
    assert (len(train), len(valid), len(test)) == (23, 1, 1)
    assert valid.files == ["img18.png"] and test.files == ["img19.png"]
    assert not set(train.files) & set(valid.files + test.files)
    assert train.images.shape == (23, 3, 16, 16) and train.images.dtype == torch.uint8
    index = train.files.index("img03.png")
    assert train.captions[index] == ["caption 3 0", "caption 3 1"]
    assert int(train.images[index].float().mean().round()) == 30  # the right picture


def test_flickr_formats(tmp_path):
    _write_images(tmp_path / "Images", 3)
    kaggle = tmp_path / "captions.txt"
    kaggle.write_text("image,caption\nimg00.png,a dog runs\nimg00.png,\"a dog, running\"\nimg01.png,two cats\n")
    assert read_flickr_captions(kaggle) == {"img00.png": ["a dog runs", "a dog, running"], "img01.png": ["two cats"]}
    token = tmp_path / "Flickr8k.token.txt"
    token.write_text("img00.png#0\ta dog runs\nimg00.png#1\ta brown dog\n\nimg02.png#0\ta bird\n")
    assert read_flickr_captions(token) == {"img00.png": ["a dog runs", "a brown dog"], "img02.png": ["a bird"]}
    results = tmp_path / "results.csv"
    results.write_text("image_name| comment_number| comment\nimg01.png| 0| a cat sleeps\n")
    assert read_flickr_captions(results) == {"img01.png": ["a cat sleeps"]}
    data = load_caption_data(f"flickr:{tmp_path}", "train", image_size=8)  # captions.txt comes first
    assert data.files == ["img00.png", "img01.png"] and data.images.shape == (2, 3, 8, 8)


def test_bad_inputs_name_the_file(tmp_path):
    with pytest.raises(ValueError, match="no such captions file"):
        read_coco_captions(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="Flickr captions file"):
        load_caption_data(f"flickr:{tmp_path}")
    with pytest.raises(ValueError, match="coco:DIR or flickr:DIR"):
        load_caption_data("cocoa:x")
    bad = tmp_path / "bad.json"
    bad.write_text('{"images": [{"id": 1}]}')
    with pytest.raises(ValueError, match=f"{bad}.*file_name"):
        read_coco_captions(bad)
    broken = tmp_path / "broken.txt"
    broken.write_text("img00.png#0\ta dog\nno tab here\n")
    with pytest.raises(ValueError, match=f"{broken}: line 2"):
        read_flickr_captions(broken)
    # a listed image that is missing, and one that is not an image
    (tmp_path / "captions.txt").write_text("image,caption\nimg00.png,a dog\n")
    with pytest.raises(ValueError, match="img00.png: no such image file"):
        load_caption_data(f"flickr:{tmp_path}")
    (tmp_path / "img00.png").write_bytes(b"not a png")
    with pytest.raises(ValueError, match="img00.png: not a readable image"):
        load_caption_data(f"flickr:{tmp_path}")
