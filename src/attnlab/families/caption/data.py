"""The user's own captioned images: the COCO captions and Flickr8k/30k formats.

* **COCO** (``coco:DIR``): ``DIR/annotations/captions_*.json`` or any ``DIR/*.json`` /
  a JSON file given directly, of the form ``{"images": [{"id": 1, "file_name": "a.jpg"},
  ...], "annotations": [{"image_id": 1, "caption": "..."}, ...]}``; images in ``DIR``,
  ``DIR/images`` or a folder next to the JSON named after it (``train2017`` for
  ``captions_train2017.json``).
* **Flickr** (``flickr:DIR``): ``DIR/captions.txt`` (``image,caption`` CSV with that header,
  the Kaggle layout), ``DIR/Flickr8k.token.txt`` / ``results_20130124.token``
  (``name.jpg#0<TAB>caption``) or ``DIR/results.csv`` (``image_name| comment_number|
  comment``, Flickr30k); images in ``DIR/Images``, ``DIR/images``,
  ``DIR/Flicker8k_Dataset``, ``DIR/flickr30k_images`` or ``DIR``.

Splits: images sorted by file name; every 20th (index % 20 == 18) goes to ``valid``, the
next (== 19) to ``test``, the rest to ``train`` -- fixed, whatever the order of the file.
Images are read with Pillow as RGB and resized to ``image_size`` squared (bicubic; the
aspect ratio is not kept). A missing captions file, an image that is not there or cannot
be read: ValueError naming the file.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from attnlab.data.images import read_image

__all__ = ["CaptionSet", "load_caption_data", "read_coco_captions", "read_flickr_captions"]

SPLIT_OF = {18: "valid", 19: "test"}
_MAX_JSON_BYTES = 1 << 30


@dataclass
class CaptionSet:
    """Images (uint8 ``(N, 3, S, S)``) with several captions each; ``files`` names them."""

    name: str
    split: str
    images: Tensor
    captions: list[list[str]]
    files: list[str]

    def __len__(self) -> int:
        return len(self.images)


def read_coco_captions(path: str | Path) -> dict[str, list[str]]:
    """``file_name -> captions`` from a COCO captions JSON file."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such captions file")
    if path.stat().st_size > _MAX_JSON_BYTES:
        raise ValueError(f"{path}: too large for a captions file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        names = {image["id"]: str(image["file_name"]) for image in data["images"]}
        captions: dict[str, list[str]] = {name: [] for name in names.values()}
        for note in data["annotations"]:
            if note["image_id"] not in names:
                raise ValueError(f"annotation for image_id {note['image_id']!r}, which 'images' does not list")
            captions[names[note["image_id"]]].append(str(note["caption"]).strip())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not a valid JSON file ({error})") from None
    except RecursionError:
        raise ValueError(f"{path}: not a valid JSON file (nested too deeply)") from None
    except (KeyError, TypeError) as error:
        raise ValueError(f"{path}: not a COCO captions file (expected 'images' with id/file_name and "
                         f"'annotations' with image_id/caption; missing {error})") from None
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    return {name: texts for name, texts in captions.items() if texts}


def read_flickr_captions(path: str | Path) -> dict[str, list[str]]:
    """``file_name -> captions`` from a Flickr8k/30k captions file (see the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such captions file")
    captions: dict[str, list[str]] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not a UTF-8 text file ({error})") from None
    header = lines[0].replace(" ", "").lower() if lines else ""
    rows: list[tuple[int, tuple[str, str] | None]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip() or (number == 1 and header.startswith(("image_name|", "image,caption"))):
            continue
        if header.startswith("image_name|"):  # Flickr30k results.csv
            parts = [part.strip() for part in line.split("|", 2)]
            rows.append((number, (parts[0], parts[2]) if len(parts) == 3 else None))
        elif header.startswith("image,caption"):  # the Kaggle captions.txt (the caption may hold commas)
            parts = next(csv.reader([line]))
            rows.append((number, (parts[0].strip(), ",".join(parts[1:]).strip()) if len(parts) >= 2 else None))
        else:  # name.jpg#0<TAB>caption
            key, tab, text = line.partition("\t")
            rows.append((number, (key.split("#")[0].strip(), text.strip()) if tab else None))
    for number, pair in rows:
        if pair is None or not pair[0] or not pair[1]:
            raise ValueError(f"{path}: line {number} is not an image/caption pair in a Flickr captions format")
        captions.setdefault(pair[0], []).append(pair[1])
    if not captions:
        raise ValueError(f"{path}: no captions")
    return captions


def _find(directory: Path, candidates: list[str], what: str) -> Path:
    for name in candidates:
        if (directory / name).exists():
            return directory / name
    raise ValueError(f"{directory}: no {what} (looked for {', '.join(candidates)})")


def _coco_files(source: Path) -> tuple[Path, Path]:
    if source.is_file():
        json_path = source
        root = source.parent
    else:
        if not source.is_dir():
            raise ValueError(f"{source}: no such directory or captions file")
        found = sorted(source.glob("annotations/captions_*.json")) + sorted(source.glob("*.json"))
        if not found:
            raise ValueError(f"{source}: no captions file (looked for annotations/captions_*.json and *.json)")
        json_path, root = found[0], source
    stem = json_path.stem.removeprefix("captions_")
    for folder in (root / stem, root / "images", root.parent / stem, root):
        if folder.is_dir():
            return json_path, folder
    return json_path, root


def load_caption_data(spec: str, split: str = "train", *, image_size: int = 32) -> CaptionSet:
    """``coco:DIR`` or ``flickr:DIR`` (DIR may be a captions file) -> the ``split`` as a :class:`CaptionSet`."""
    kind, _, location = spec.partition(":")
    if kind not in ("coco", "flickr") or not location:
        raise ValueError(f"--data {spec!r}: expected coco:DIR or flickr:DIR")
    if split not in ("train", "valid", "test"):
        raise ValueError(f"unknown split {split!r}; splits are train, valid, test")
    source = Path(location)
    if kind == "coco":
        json_path, folder = _coco_files(source)
        captions = read_coco_captions(json_path)
    else:
        if source.is_file():
            text_path, root = source, source.parent
        else:
            if not source.is_dir():
                raise ValueError(f"{source}: no such directory or captions file")
            text_path, root = _find(source, ["captions.txt", "Flickr8k.token.txt", "results_20130124.token",
                                             "results.csv"], "Flickr captions file"), source
        captions = read_flickr_captions(text_path)
        folder = next((root / name for name in ("Images", "images", "Flicker8k_Dataset", "flickr30k_images")
                       if (root / name).is_dir()), root)
    names = sorted(captions)
    chosen = [name for i, name in enumerate(names) if SPLIT_OF.get(i % 20, "train") == split]
    if not chosen:
        raise ValueError(f"{spec}: no images in the {split} split ({len(names)} captioned images; valid and test "
                         "take every 20th)")
    images = []
    for name in chosen:
        path = folder / name
        if not path.is_file():
            raise ValueError(f"{path}: no such image file (named in the captions file)")
        images.append(read_image(path, image_size=image_size, channels=3))
    return CaptionSet(spec, split, torch.stack(images), [captions[name] for name in chosen], chosen)
