"""`attnlab export --format timm` (and `--format hf` for the ViT): a timm checkpoint directory
that `timm.create_model("local-dir:...")` opens with attnlab's logits (float64) on the same
uint8 pixels through timm's own data config; `attnlab.load` gives the weights back; a timm
directory attnlab read goes back unchanged (its mean/std unfolded from the patch embedding);
HuggingFace's ViTForImageClassification where that layout is exact; refusals."""

from __future__ import annotations

import json
import os

import pytest
import torch
from reference.timm_loader import import_timm

import attnlab
from attnlab.cli.main import main
from attnlab.models.vit import VisionTransformer, VisionTransformerConfig

timm = import_timm()
if timm is None:
    message = "timm is not installed (scripts/setup.sh test installs it into .venv/timm-site)"
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message, allow_module_level=True)

IMAGENET = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
CONFIGS = {
    "grey, class token": dict(image_size=28, patch_size=7, in_channels=1, num_classes=4, d_model=32, num_layers=2,
                              num_heads=4, d_ff=64),
    "rgb, mean pool, LayerScale": dict(image_size=16, patch_size=4, in_channels=3, num_classes=3, d_model=24,
                                       num_layers=2, num_heads=3, d_ff=96, pool="mean", class_token=False,
                                       layer_scale_init=0.1),
}


def _export(model_dir, out, fmt="timm", *extra):
    return main(["export", "--model", str(model_dir), "--format", fmt, "-o", str(out), *extra])


def snapshot(root):
    return {str(path.relative_to(root)): path.read_bytes() if path.is_file() else None
            for path in sorted(root.rglob("*"))}


def _vit_dir(path, **fields):
    torch.manual_seed(0)
    model = VisionTransformer(VisionTransformerConfig(**fields)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.2)
    classes = [f"kind {i}" for i in range(model.config.num_classes)]
    model.save_pretrained(path, extra_files={"classes.json": json.dumps({"classes": classes}).encode()})
    return model, classes


def _timm_pixels(model, pixels):
    """What timm's data config for ``model`` makes of uint8 pixels: (x/255 - mean)/std."""
    data = timm.data.resolve_data_config({}, model=model)
    mean, std = (torch.tensor(data[k], dtype=torch.float64).view(1, -1, 1, 1) for k in ("mean", "std"))
    assert data["crop_pct"] == 1.0 or data["input_size"][1] == pixels.shape[-1]
    return (pixels.double() / 255 - mean) / std


@pytest.mark.parametrize("fields", CONFIGS.values(), ids=CONFIGS.keys())
def test_timm_opens_it_with_attnlabs_logits(tmp_path, fields):
    model, classes = _vit_dir(tmp_path / "vit", **fields)
    assert _export(tmp_path / "vit", tmp_path / "timm") == 0
    theirs = timm.create_model(f"local-dir:{tmp_path / 'timm'}", pretrained=True).eval().double()
    size, channels = fields["image_size"], fields["in_channels"]
    pixels = torch.randint(0, 256, (3, channels, size, size), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = theirs(_timm_pixels(theirs, pixels))
        got = model.double()(pixels.double() / 127.5 - 1)  # attnlab.data.images.normalize, in float64
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    # timm's own eval transform on an image file's PIL image (another size, not square) gives the
    # pixels attnlab's reader gives (resized to the square, bicubic), normalised as above
    import numpy as np
    from PIL import Image

    from attnlab.data.images import pil_to_tensor

    transform = timm.data.create_transform(**timm.data.resolve_data_config({}, model=theirs))
    array = np.random.default_rng(0).integers(0, 256, (3 * size, 2 * size, 3), dtype=np.uint8)
    image = Image.fromarray(array if channels == 3 else array[..., 0])
    ours = pil_to_tensor(image, image_size=size, channels=channels)[None]
    torch.testing.assert_close(transform(image)[None].double(), _timm_pixels(theirs, ours), rtol=0, atol=1e-6)
    back = attnlab.load(tmp_path / "timm")
    assert back.classes == classes
    ours, again = model.float().state_dict(), back.model.state_dict()
    assert set(ours) == set(again) and all(torch.equal(ours[n], again[n]) for n in ours)


def test_a_timm_directory_goes_back_unchanged(tmp_path):
    from safetensors.torch import load_file

    torch.manual_seed(0)
    original = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, depth=2,
                                 num_classes=5).eval()
    with torch.no_grad():
        for parameter in original.parameters():
            parameter.normal_(0.0, 0.2)
    source = tmp_path / "source"
    timm.models.save_for_hf(original, str(source), safe_serialization=True, data_config=dict(IMAGENET))
    assert _export(source, tmp_path / "timm") == 0
    before, after = load_file(str(source / "model.safetensors")), load_file(str(tmp_path / "timm" / "model.safetensors"))
    assert set(before) == set(after) and all(torch.equal(before[n], after[n]) for n in before)
    cfg = json.loads((tmp_path / "timm" / "config.json").read_text())["pretrained_cfg"]
    assert cfg == json.loads((source / "config.json").read_text())["pretrained_cfg"]
    theirs = timm.create_model(f"local-dir:{tmp_path / 'timm'}", pretrained=True).eval().double()
    pixels = torch.randint(0, 256, (2, 3, 32, 32), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(theirs(_timm_pixels(theirs, pixels)),
                                   original.double()(_timm_pixels(theirs, pixels)), rtol=1e-10, atol=1e-10)


def test_huggingface_vit_for_image_classification(tmp_path):
    transformers = pytest.importorskip("transformers")
    model, classes = _vit_dir(tmp_path / "vit", **CONFIGS["grey, class token"])
    assert _export(tmp_path / "vit", tmp_path / "hf", "hf") == 0
    theirs = transformers.ViTForImageClassification.from_pretrained(str(tmp_path / "hf")).eval().double()
    assert [theirs.config.id2label[i] for i in range(len(classes))] == classes
    processor = json.loads((tmp_path / "hf" / "preprocessor_config.json").read_text())
    assert processor["image_mean"] == [0.5] and processor["image_std"] == [0.5]
    pixels = torch.randint(0, 256, (3, 1, 28, 28), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = theirs(pixel_values=(pixels.double() / 255 - 0.5) / 0.5).logits
        got = model.double()(pixels.double() / 127.5 - 1)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    # ViTImageProcessor gives attnlab's reader's pixels, normalised: exactly for an image of the
    # model's size; resizing another size, its own bicubic path lands within one grey level
    import numpy as np
    from PIL import Image

    from attnlab.data.images import pil_to_tensor

    processor = transformers.ViTImageProcessor.from_pretrained(str(tmp_path / "hf"))
    rng = np.random.default_rng(0)
    for shape, tolerance in (((28, 28), 1e-6), ((60, 45), 1 / 127.5 + 1e-6)):
        image = Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8))
        ours = pil_to_tensor(image, image_size=28, channels=1)[None].double() / 127.5 - 1
        theirs = processor(image, return_tensors="pt")["pixel_values"].double()
        torch.testing.assert_close(theirs, ours, rtol=0, atol=tolerance)


@pytest.mark.parametrize("fmt, fields, named", [
    ("timm", dict(position_embedding="sincos"), "position_embedding='sincos'"),
    ("timm", dict(stem_channels=(8,), patch_size=1, image_size=8), "stem_channels"),
    ("timm", dict(layer_norm_eps=1e-5), "layer_norm_eps"),
    ("hf", dict(pool="mean", class_token=False), "pool='mean'"),
    ("hf", dict(layer_scale_init=0.1), "LayerScale"),
])
def test_what_the_format_cannot_express_is_refused(tmp_path, capsys, fmt, fields, named):
    _vit_dir(tmp_path / "vit", **{**CONFIGS["grey, class token"], **fields})
    before = snapshot(tmp_path)
    capsys.readouterr()
    assert _export(tmp_path / "vit", tmp_path / "out", fmt) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err
    assert snapshot(tmp_path) == before
