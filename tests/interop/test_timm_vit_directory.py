"""A timm ViT checkpoint directory (what timm's save_for_hf writes and the hub serves:
config.json + model.safetensors) loads without timm: the same logits as timm on timm's
normalised pixels, with attnlab's pixels (the mean/std folded into the patch embedding)."""

import json
import os

import pytest
import torch
from reference.timm_loader import import_timm

from attnlab.interop.timm_vit import is_timm_vit_directory, load_timm_vit

timm = import_timm()
if timm is None:
    message = "timm is not installed (scripts/setup.sh test installs it into .venv/timm-site)"
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message, allow_module_level=True)
pytest.importorskip("huggingface_hub")  # timm's save_for_hf

IMAGENET = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
CASES = [
    ("tiny, class token, ImageNet mean/std", "vit_tiny_patch16_224", dict(img_size=32, depth=2, num_classes=5),
     IMAGENET),
    ("small, mean pool, LayerScale, 0.5/0.5", "vit_small_patch8_224",
     dict(img_size=24, depth=2, num_classes=3, global_pool="avg", fc_norm=True, init_values=0.1),
     dict(mean=(0.5,) * 3, std=(0.5,) * 3)),
]


def _saved(tmp_path, architecture, kwargs, data):
    torch.manual_seed(0)
    model = timm.create_model(architecture, pretrained=False, **kwargs).eval()
    with torch.no_grad():  # timm zero-initialises some of these; random values test the mapping
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.2)
    directory = tmp_path / architecture
    timm.models.save_for_hf(model, str(directory), safe_serialization=True, data_config=dict(data))
    return model, directory


@pytest.mark.parametrize("name, architecture, kwargs, data", CASES, ids=[c[0] for c in CASES])
def test_same_logits_as_timm_on_its_own_normalisation(tmp_path, name, architecture, kwargs, data):
    theirs, directory = _saved(tmp_path, architecture, kwargs, data)
    assert is_timm_vit_directory(directory)
    ours, classes = load_timm_vit(directory)
    assert classes == [str(i) for i in range(kwargs["num_classes"])]
    pixels = torch.randint(0, 256, (3, 3, kwargs["img_size"], kwargs["img_size"]), generator=torch.Generator().manual_seed(1))
    mean, std = (torch.tensor(data[k]).view(1, 3, 1, 1) for k in ("mean", "std"))
    with torch.no_grad():
        expected = theirs((pixels.float() / 255 - mean) / std)
        got = ours(pixels.float() / 127.5 - 1)  # attnlab's ViT pixels (attnlab.data.images.normalize)
    torch.testing.assert_close(got, expected, atol=2e-4, rtol=1e-4)


def test_what_it_refuses_is_named(tmp_path):
    _, directory = _saved(tmp_path, *CASES[0][1:])
    values = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**values, "architecture": "deit_tiny_patch16_224"}))
    assert not is_timm_vit_directory(directory)
    with pytest.raises(ValueError, match="not a timm ViT directory"):
        load_timm_vit(directory)
    (directory / "config.json").write_text(json.dumps({**values, "architecture": "vit_tiny_patch16_siglip_224"}))
    with pytest.raises(ValueError, match="converts timm's plain ViTs"):
        load_timm_vit(directory)
    (directory / "config.json").write_text(json.dumps({**values, "model_args": {"reg_tokens": 4}}))
    with pytest.raises(ValueError, match=r"model_args \['reg_tokens'\]"):
        load_timm_vit(directory)
    (directory / "config.json").write_text(json.dumps(values))
    (directory / "model.safetensors").rename(directory / "elsewhere.safetensors")
    (directory / "pytorch_model.bin").write_bytes(b"never read")
    with pytest.raises(ValueError, match="pytorch_model.bin is a pickle"):
        load_timm_vit(directory)


def test_attnlab_load_and_classify_open_it(tmp_path, capsys):
    import attnlab
    from attnlab.cli.main import main
    from PIL import Image

    theirs, directory = _saved(tmp_path, *CASES[0][1:])
    classifier = attnlab.load(directory)
    assert classifier.family == "vit" and classifier.classes == ["0", "1", "2", "3", "4"]
    pixels = torch.randint(0, 256, (32, 32, 3), generator=torch.Generator().manual_seed(2)).to(torch.uint8)
    image = tmp_path / "image.png"
    Image.fromarray(pixels.numpy()).save(image)
    mean, std = (torch.tensor(IMAGENET[k]).view(1, 3, 1, 1) for k in ("mean", "std"))
    with torch.no_grad():
        expected = theirs((pixels.permute(2, 0, 1)[None].float() / 255 - mean) / std).softmax(-1)[0]
    best = classifier.classify(image, top=1)[0]
    assert best[0] == str(int(expected.argmax())) and best[1] == pytest.approx(float(expected.max()), abs=1e-4)
    assert main(["classify", "--model", str(directory), str(image), "--top-k", "1"]) == 0
    assert f"{best[0]}" in capsys.readouterr().out


@pytest.mark.parametrize("kind, message", [("int", "has dtype int64; weights must be floating point"),
                                           ("nan", "holds NaN or infinity")])
def test_integer_or_non_finite_weights_are_refused(tmp_path, capsys, kind, message):
    """classify answered ('2', nan) on a NaN in model.safetensors; now refused, naming the tensor."""
    import attnlab
    from attnlab.cli.main import main
    from PIL import Image
    from reference.damaged import damage_weights

    _, directory = _saved(tmp_path, *CASES[0][1:])
    name = damage_weights(directory, kind)
    pattern = rf"model\.safetensors: tensor '{name}' {message}"
    with pytest.raises(ValueError, match=pattern):
        load_timm_vit(directory)
    with pytest.raises(ValueError, match=pattern):
        attnlab.load(directory)
    image = tmp_path / "x.png"
    Image.new("RGB", (32, 32), (10, 200, 30)).save(image)
    assert main(["classify", "--model", str(directory), str(image)]) == 2
    assert name in capsys.readouterr().err


def test_non_finite_normalisation_is_refused(tmp_path):
    _, directory = _saved(tmp_path, *CASES[0][1:])
    values = json.loads((directory / "config.json").read_text())
    values["pretrained_cfg"]["mean"] = [float("nan"), 0.5, 0.5]
    (directory / "config.json").write_text(json.dumps(values))
    with pytest.raises(ValueError, match=r"config\.json: pretrained_cfg mean/std need 3 finite values"):
        load_timm_vit(directory)


@pytest.mark.parametrize("field, value, message", [
    ("pretrained_cfg", [0.5], "pretrained_cfg must be an object"),
    ("model_args", {"num_heads": True}, "model_args num_heads=True must be a whole number"),
    ("model_args", {"num_heads": 7}, "model_args num_heads=7 must be a whole number that divides the width 192"),
])
def test_config_values_of_the_wrong_type_are_named(tmp_path, field, value, message):
    _, directory = _saved(tmp_path, *CASES[0][1:])
    values = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**values, field: value}))
    with pytest.raises(ValueError, match=rf"config\.json: .*{message}"):
        load_timm_vit(directory)
