"""The inputs of the image families' explorer sources, and the picture the page draws
attention over.

An image source's ``text`` names its image in one of three ways (:func:`read_image_input`):

* ``example:N`` — the N-th image the repository ships in ``examples/digits`` (grey models)
  or ``examples/scenes`` (colour models); a fixed list, so a served page can offer them;
* ``data:image/png;base64,...`` — the image itself, e.g. one the served page's "choose
  image" button read in the browser and posted (within the server's body limit);
* a file path — only where the caller reads local files the user names (``files=True``:
  ``attnlab explore --html`` and :func:`attnlab.viz.explorer.explorer_html`). The server
  never passes it: a request cannot make it read a file of its choosing.

:class:`ImageView` is the picture and its grid of cells; a group whose keys are cells of
it carries ``key_cells`` (``(row, col)`` per key, None for a key that is no cell such as
ViT's class token), and the page draws the selected query's attention over the picture.
"""

from __future__ import annotations

import base64
import binascii
import io
from dataclasses import dataclass
from pathlib import Path

from torch import Tensor

__all__ = ["ImageView", "read_image_input", "example_images", "png_data_uri", "grid_cells", "cell_labels",
           "MAX_IMAGE_BYTES"]

MAX_IMAGE_BYTES = 48 * 1024  # a data URI's decoded image; the server's body limit is 64 KB
EXAMPLES = Path(__file__).resolve().parents[4] / "examples"  # the repository's examples/ (a checkout)


@dataclass
class ImageView:
    """The image a source read, uint8 ``(C, H, W)``, and the ``rows x cols`` grid its
    groups' ``key_cells`` index."""

    pixels: Tensor
    rows: int
    cols: int


def example_images(channels: int) -> list[Path]:
    """The repository's example images for a grey (1) or colour (3) model, sorted."""
    folder = EXAMPLES / ("digits" if channels == 1 else "scenes")
    return sorted(folder.glob("*.png")) if folder.is_dir() else []


MAX_PIXELS = 4096 * 4096  # an image's width x height, checked before its pixels are decoded


def _resized(image, channels: int, size: tuple[int, int]) -> Tensor:
    from attnlab.data.images import pil_to_tensor

    if image.width * image.height > MAX_PIXELS:
        raise ValueError(f"the image is {image.width}x{image.height} pixels; the explorer reads at most "
                         f"{MAX_PIXELS:,} (it is resized to {size[1]}x{size[0]} anyway)")
    height, width = size
    if height == width:
        return pil_to_tensor(image, image_size=height, channels=channels)
    return pil_to_tensor(image.resize((width, height)), channels=channels)


def _unreadable() -> tuple[type[BaseException], ...]:
    from PIL import Image

    # what Pillow raises for a file that is not a (whole) image: OSError (UnidentifiedImageError,
    # truncated data), SyntaxError (a broken PNG chunk), DecompressionBombError, EOFError
    return (binascii.Error, ValueError, OSError, SyntaxError, EOFError, Image.DecompressionBombError)


def read_image_input(text: str, *, channels: int, size: tuple[int, int], files: bool = False) -> Tensor:
    """The image ``text`` names (see the module docstring) as uint8 ``(1, C, H, W)``,
    converted to ``channels`` and resized (bicubic) to ``size``; ValueError saying what
    is wrong and what to give instead."""
    from PIL import Image

    if not isinstance(text, str) or not text.strip():
        raise ValueError("give an image: example:N, a data:image/...;base64 URI"
                         + (", or an image file" if files else ""))
    text = text.strip()
    unreadable = _unreadable()
    if text.startswith("example:"):
        examples = example_images(channels)
        if not examples:
            raise ValueError(f"{text}: this installation has no examples/ images; upload an image instead")
        index = text.split(":", 1)[1].strip()
        if not (index.isascii() and index.isdigit()) or int(index) >= len(examples):
            raise ValueError(f"{text}: give example:N with N in 0..{len(examples) - 1} "
                             f"({', '.join(p.name for p in examples)})")
        with Image.open(examples[int(index)]) as image:
            return _resized(image, channels, size)[None]
    if text.startswith("data:"):
        header, _, data = text.partition(",")
        if not header.startswith("data:image/") or not header.endswith(";base64"):
            raise ValueError("a data URI must be data:image/...;base64,...")
        if len(data) > MAX_IMAGE_BYTES * 4 // 3 + 4:
            raise ValueError(f"the image has more than {MAX_IMAGE_BYTES // 1024} KB; give a smaller one")
        try:
            raw = base64.b64decode(data, validate=True)
            with Image.open(io.BytesIO(raw)) as image:
                return _resized(image, channels, size)[None]
        except unreadable as error:
            raise ValueError(f"the uploaded image cannot be read ({error})") from None
    if not files:
        raise ValueError(f"{text[:80]!r}: the served explorer reads no files; give example:N or upload an image")
    path = Path(text)
    if not path.is_file():
        raise ValueError(f"{text}: no such image file (or give example:N)")
    try:
        with Image.open(path) as image:
            return _resized(image, channels, size)[None]
    except unreadable as error:
        raise ValueError(f"{text}: not an image Pillow can read ({error})") from None


def png_data_uri(pixels: Tensor) -> str:
    """uint8 ``(C, H, W)`` (C = 1 or 3) as a ``data:image/png;base64`` URI."""
    from PIL import Image

    array = pixels.permute(1, 2, 0).cpu().numpy()
    image = Image.fromarray(array[..., 0] if array.shape[-1] == 1 else array)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def grid_cells(rows: int, cols: int) -> list[tuple[int, int]]:
    """The cells of a ``rows x cols`` grid, row by row (how the models order patches)."""
    return [(r, c) for r in range(rows) for c in range(cols)]


def cell_labels(cells, word: str) -> list[str]:
    """``"patch (r,c)"`` labels of ``cells`` (``word`` = "patch", "cell"...)."""
    return [f"{word} ({r},{c})" for r, c in cells]


class ImageInput:
    """What the image families' sources share: ``channels`` and ``size`` (set by the
    source) say what the model reads; :meth:`read` turns ``analyse``'s text into pixels."""

    channels: int
    size: tuple[int, int]
    image_input = True  # the served page offers to upload an image

    def read_config(self, pipeline):
        """Keep ``pipeline``; take ``channels``, ``size`` and the patch grid (``rows``,
        ``cols``) from a model config with ``in_channels``, ``image_size`` and ``grid``
        (ViT, captioner); returns the config."""
        self.pipeline = pipeline
        c = pipeline.model.config
        self.channels, self.size = c.in_channels, (c.image_size, c.image_size)
        self.rows, self.cols = c.grid
        return c

    @property
    def hint(self) -> str:
        """What the served page's text box takes."""
        count = len(example_images(self.channels))
        examples = f"example:0 … example:{count - 1} (the repository's examples), " if count else ""
        return f"an image: {examples}a data:image/…;base64 URI, or choose an image of yours"

    def example_text(self) -> str:
        """``example:0`` where the repository's examples are at hand, else "" (upload one)."""
        return "example:0" if example_images(self.channels) else ""

    default_note = ""  # where the default image comes from (shown with the description, printed by explore)
    _default_name = ""

    def choose_default(self, held_out) -> None:
        """The default input (issue 39, point 4): the model's own first held-out image where
        ``held_out()`` gives one (uint8 ``(C, H, W)`` and what it is), as a data URI; else
        the shipped ``example:0``, with :attr:`default_note` saying that it comes from
        another data set and why the model's own is not at hand (``held_out``'s ValueError)."""
        from attnlab.viz.explorer.maps import note_default

        try:
            pixels, what = held_out()
        except (ValueError, OSError) as error:
            self.default_text = self.example_text()
            kind = "digit (MNIST-like)" if self.channels == 1 else "scene"
            note_default(self, f"default image: {self.default_text}, a {kind} shipped with attnlab, not from this "
                               f"model's data ({error}); choose an image of yours" if self.default_text else
                               f"no default image: this model's own data is not at hand ({error})")
        else:
            self.default_text, self._default_name = png_data_uri(pixels), what
            note_default(self, f"default image: {what}, from the model's own held-out data")

    def read(self, text: str, files: bool) -> tuple[Tensor, str]:
        """uint8 ``(1, C, H, W)`` and how to name the input on the page (a data URI is
        "an uploaded image", not its base64; the default, what it is)."""
        pixels = read_image_input(text, channels=self.channels, size=self.size, files=files)
        if self._default_name and text.strip() == self.default_text:
            return pixels, self._default_name
        return pixels, ("an uploaded image" if text.strip().startswith("data:") else text.strip())
