"""Images into the pipelines: files and PIL images as the verbs read them, arrays checked."""

import numpy as np
import pytest
import torch
from PIL import Image

from attnlab.data.images import read_image
from attnlab.pipelines.images import ImageSpec, to_arrays, to_pil, to_pixels

GREY = ImageSpec(1, (6, 6))
RGB = ImageSpec(3, (6, 6))


def _rgb(seed=0):
    return np.random.default_rng(seed).integers(0, 256, size=(6, 6, 3), dtype=np.uint8)


def test_uint8_float_and_integer_arrays_give_the_same_pixels():
    image = _rgb()
    pixels, single = to_pixels(image, RGB)
    assert single and pixels.dtype == torch.uint8 and pixels.shape == (1, 3, 6, 6)
    assert torch.equal(pixels[0], torch.from_numpy(image).permute(2, 0, 1))
    for same in (image / 255.0, (image / 255.0).astype(np.float32), torch.from_numpy(image),
                 torch.from_numpy(image).double() / 255, image.astype(np.int64)):
        assert torch.equal(to_pixels(same, RGB)[0], pixels)


def test_grey_images_may_drop_the_channel_axis_and_batches_are_lists_or_4d():
    grey = _rgb()[:, :, 0]
    one, _ = to_pixels(grey, GREY)
    assert torch.equal(one, to_pixels(grey[:, :, None], GREY)[0])
    batch, single = to_pixels([grey, grey[::-1]], GREY)
    assert not single and batch.shape == (2, 1, 6, 6) and torch.equal(batch[0], one[0])
    stacked, single = to_pixels(np.stack([grey, grey[::-1]])[..., None], GREY)
    assert not single and torch.equal(stacked, batch)


def test_files_and_pil_images_are_read_as_the_verbs_read_files(tmp_path):
    big = np.random.default_rng(1).integers(0, 256, size=(9, 9, 3), dtype=np.uint8)
    path = tmp_path / "big.png"
    Image.fromarray(big).save(path)
    from_file, _ = to_pixels(str(path), GREY)
    assert torch.equal(from_file[0], read_image(path, image_size=6, channels=1))  # converted to grey, resized
    assert torch.equal(to_pixels(Image.fromarray(big), GREY)[0], from_file)
    assert torch.equal(to_pixels([path], GREY)[0], from_file)
    with pytest.raises(ValueError, match="9x9 .* 6x6"):
        to_pixels(path, ImageSpec(1, (6, 6), resize=False))  # where the verb refuses other sizes, so do we


def _error(images, spec, *fragments, kind=ValueError):
    with pytest.raises(kind) as error:
        to_pixels(images, spec)
    message = str(error.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


def test_floats_outside_0_1_are_refused_never_read_wrongly():
    image = _rgb().astype(np.float32)  # 0..255 as floats: the silent-wrong-answer case
    _error(image, RGB, "images", "[0, 1]", "uint8", "divide by 255")
    _error([image / 255, image], RGB, "images[1]", "[0, 1]")
    _error(image / 255 - 0.5, RGB, "images", "[0, 1]")
    bad = image / 255
    bad[0, 0, 0] = np.nan
    _error(bad, RGB, "NaN")
    _error(np.full((6, 6, 3), 300), RGB, "0..255", "300")
    _error(np.zeros((6, 6, 3), bool), RGB, "bool", kind=TypeError)


def test_shapes_channels_and_types_are_checked_against_the_model():
    _error(_rgb(), GREY, "3 channels", "takes 1")
    _error(_rgb()[:, :, 0], RGB, "1 channels", "takes 3")
    _error(_rgb()[:5], RGB, "6x5", "takes 6x6", "resize")
    _error(np.zeros((1, 1, 6, 6, 3), np.uint8), RGB, "(H, W) or (H, W, C)")
    _error([], RGB, "empty")
    _error(42, RGB, "got int", kind=TypeError)
    _error("no/such/image.png", RGB, "no such image file")


def test_outputs_are_channels_last_uint8_and_convert_to_pil():
    pixels, _ = to_pixels([_rgb(), _rgb(1)], RGB)
    arrays = to_arrays(pixels)
    assert arrays.dtype == np.uint8 and arrays.shape == (2, 6, 6, 3) and np.array_equal(arrays[0], _rgb())
    assert np.array_equal(np.asarray(to_pil(arrays[1])), _rgb(1))
    assert to_pil(to_arrays(to_pixels(_rgb()[:, :, 0], GREY)[0])[0]).mode == "L"
    with pytest.raises(ValueError, match="uint8"):
        to_pil(arrays[0].astype(np.float32))
