"""The Twemoji loader on a tiny fake package directory (CI needs no 62 MB download)."""

import pytest

from attnlab.data.emoji import load_emoji, load_emoji_set, split_of
from attnlab.data.images import DataUnavailable
from reference.emoji_package import fake_package


def test_loads_images_names_categories_in_a_fixed_order(tmp_path):
    emoji = load_emoji(fake_package(tmp_path), size=32)
    assert len(emoji) == 14 and emoji.images.shape == (14, 32, 32, 3) and emoji.images.dtype.__str__() == "torch.uint8"
    assert emoji.categories == ["Animals", "Objects"]
    assert emoji.names[0] == "thing 11"  # sort_order, not file order
    assert emoji.names[-3:] == ["thing 0", "thing 0 (light skin tone)", "thing 0 (dark skin tone)"]
    assert emoji.labels.tolist()[:2] == [1 - 11 % 2, 1 - 10 % 2]
    # RGBA composited on white, box-downsampled: opaque red top, white bottom, pink where half transparent.
    assert emoji.images[0, :16].tolist() == [[[255, 0, 0]] * 32] * 16
    assert (emoji.images[0, 16:] == 255).all()
    assert abs(int(emoji.images[-1, 0, 0, 1]) - 127) <= 1


def test_the_split_is_deterministic_and_disjoint(tmp_path):
    root = fake_package(tmp_path, count=25)
    every = load_emoji(root).names
    parts = {split: load_emoji_set(split, root) for split in ("train", "valid", "test")}
    assert sum(len(part) for part in parts.values()) == len(every)
    assert [split_of(i) for i in range(10)].count("test") == 1
    assert parts["test"].images.shape[1:] == (3, 32, 32) and parts["test"].classes == ["Animals", "Objects"]
    assert load_emoji(root, split="test").names == [every[i] for i in range(len(every)) if i % 10 == 9]


def test_missing_package_and_missing_files_say_how_to_fix(tmp_path):
    with pytest.raises(DataUnavailable, match="npm pack emoji-datasource-twitter@16.0.0"):
        load_emoji(tmp_path / "nowhere")
    root = fake_package(tmp_path / "broken", count=3)
    (root / "img" / "twitter" / "64" / "0001.png").unlink()
    with pytest.raises(ValueError, match="0001.png: listed in emoji.json but missing"):
        load_emoji(root)
    with pytest.raises(ValueError, match="size=65"):
        load_emoji(root, size=65)
