"""The Twemoji colour images of npm's ``emoji-datasource-twitter`` (CC-BY 4.0 graphics).

3,786 emoji as 64×64 RGBA PNGs (1,911 emoji and 1,875 skin-tone variations), with names
and 10 categories in the package's ``emoji.json``. Get them once (a 62 MB tarball from
npm's registry; unpacking runs no Node code)::

    npm pack emoji-datasource-twitter@16.0.0
    mkdir -p "$ATTNLAB_DATA/emoji-datasource-twitter"
    tar -xzf emoji-datasource-twitter-16.0.0.tgz --strip-components=1 \\
        -C "$ATTNLAB_DATA/emoji-datasource-twitter" --exclude='package/img/twitter/sheets*'

The function API (used for image generation here, and by captioning):

* :func:`load_emoji` -> :class:`Emoji`: ``images`` uint8 ``(N, H, W, 3)`` (composited on
  white, downsampled with a box filter to ``size``), ``labels`` (category index),
  ``names``, ``categories`` (the category names), ``files``; in ``emoji.json``'s
  ``sort_order`` (skin tones after their emoji), so the same on every machine;
* :func:`split_of` / ``load_emoji(split=...)``: a deterministic split — every tenth
  emoji (position 9 mod 10) is test, position 4 mod 10 is valid, the rest train;
* :func:`load_emoji_set`: a split as an :class:`~attnlab.data.images.ImageSet`
  ``(N, 3, H, W)`` with the categories as classes (``attnlab train image --data emoji``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from attnlab.data.images import SPLITS, DataUnavailable, ImageSet

PACKAGE = "emoji-datasource-twitter"
VERSION = "16.0.0"
IMAGE_DIR = Path("img") / "twitter" / "64"
SKIN_TONES = {"1F3FB": "light skin tone", "1F3FC": "medium-light skin tone", "1F3FD": "medium skin tone",
              "1F3FE": "medium-dark skin tone", "1F3FF": "dark skin tone"}
HOW_TO_GET = (f"npm pack {PACKAGE}@{VERSION} && mkdir -p DIR && tar -xzf {PACKAGE}-{VERSION}.tgz "
              "--strip-components=1 -C DIR --exclude='package/img/twitter/sheets*' (DIR = "
              f"$ATTNLAB_DATA/{PACKAGE}; a 62 MB tarball from npm's registry, no Node code runs)")


@dataclass
class Emoji:
    """``images`` (N, H, W, 3) uint8 on white; ``labels`` (N,) int64 indices into ``categories``."""

    images: Tensor
    labels: Tensor
    names: list[str]
    categories: list[str]
    files: list[str]

    def __len__(self) -> int:
        return len(self.names)


def emoji_root(root: str | Path | None = None) -> Path:
    """The unpacked package: ``root``, else ``$ATTNLAB_DATA/emoji-datasource-twitter``."""
    if root is None:
        from attnlab.data.registry import data_root

        root = data_root() / PACKAGE
    root = Path(root)
    if not (root / "emoji.json").is_file() or not (root / IMAGE_DIR).is_dir():
        raise DataUnavailable(f"{root}: the Twemoji images are not there (need emoji.json and {IMAGE_DIR}/); "
                              f"get them: {HOW_TO_GET}")
    return root


def _entries(root: Path) -> list[tuple[str, str, str]]:
    """``(image file name, emoji name, category)`` in sort order, skin tones after their emoji."""
    path = root / "emoji.json"
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(table, list):
        raise ValueError(f"{path}: expected a list of emoji")
    entries = []
    for emoji in sorted((e for e in table if isinstance(e, dict)), key=lambda e: (e.get("sort_order", 1 << 30),
                                                                                 str(e.get("unified")))):
        name = str(emoji.get("name") or emoji.get("short_name") or emoji.get("unified")).lower()
        category = str(emoji.get("category", "unknown"))
        if emoji.get("has_img_twitter") and isinstance(emoji.get("image"), str):
            entries.append((emoji["image"], name, category))
        variations = emoji.get("skin_variations") or {}
        for key in sorted(variations):
            variation = variations[key]
            if isinstance(variation, dict) and variation.get("has_img_twitter") and isinstance(variation.get("image"), str):
                tones = ", ".join(SKIN_TONES.get(part, part) for part in key.split("-"))
                entries.append((variation["image"], f"{name} ({tones})", category))
    return entries


def split_of(index: int) -> str:
    """The split of the emoji at position ``index`` (in :func:`load_emoji`'s order)."""
    return "test" if index % 10 == 9 else "valid" if index % 10 == 4 else "train"


def read_emoji_png(path: Path, size: int) -> np.ndarray:
    """An RGBA PNG composited on white, box-downsampled to ``size``², as ``(size, size, 3)`` uint8."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            rgba = image.convert("RGBA")
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as error:
        raise ValueError(f"{path}: not a readable image ({error})") from None
    white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    rgb = Image.alpha_composite(white, rgba).convert("RGB")
    if rgb.size != (size, size):
        rgb = rgb.resize((size, size), Image.Resampling.BOX)
    return np.asarray(rgb, dtype=np.uint8)


def load_emoji(root: str | Path | None = None, *, size: int = 32, split: str | None = None) -> Emoji:
    """Every emoji (or one ``split``) as :class:`Emoji`; see the module docstring."""
    if split is not None and split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 64:
        raise ValueError(f"size={size!r} must be an integer in 1..64 (the images are 64×64)")
    root = emoji_root(root)
    entries = _entries(root)
    categories = sorted({category for _, _, category in entries})
    chosen = [(i, entry) for i, entry in enumerate(entries) if split is None or split_of(i) == split]
    images, labels, names, files = [], [], [], []
    for _, (file, name, category) in chosen:
        path = root / IMAGE_DIR / file
        if not path.is_file():
            raise ValueError(f"{path}: listed in emoji.json but missing; unpack the package again ({HOW_TO_GET})")
        images.append(read_emoji_png(path, size))
        labels.append(categories.index(category))
        names.append(name)
        files.append(file)
    stacked = torch.from_numpy(np.stack(images)) if images else torch.zeros(0, size, size, 3, dtype=torch.uint8)
    return Emoji(stacked, torch.tensor(labels, dtype=torch.int64), names, categories, files)


def load_emoji_set(split: str, root: str | Path | None = None, *, size: int = 32) -> ImageSet:
    """A split as an :class:`ImageSet` ``(N, 3, size, size)``, the categories as classes."""
    emoji = load_emoji(root, size=size, split=split)
    return ImageSet("emoji", split, emoji.images.permute(0, 3, 1, 2).contiguous(), emoji.labels, emoji.categories)


__all__ = ["Emoji", "emoji_root", "load_emoji", "load_emoji_set", "read_emoji_png", "split_of", "HOW_TO_GET"]
