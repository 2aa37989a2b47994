"""from_timm_vit: timm's VisionTransformer (random weights; nothing can be downloaded here)
converted to attnlab's gives the same logits."""

import os

import pytest
import torch
from reference.timm_loader import import_timm

from attnlab.interop import from_timm_vit

timm = import_timm()
if timm is None:
    message = "timm is not installed (scripts/setup.sh test installs it into .venv/timm-site)"
    if os.environ.get("CI"):  # part of the CI set-up: a silent skip would hide a broken installation
        pytest.fail(message, pytrace=False)
    pytest.skip(message, allow_module_level=True)

CONFIGS = [
    # name, image size, patch, channels, classes, extra timm arguments
    ("class token, 4x4 patches, grey", dict(img_size=28, patch_size=4, in_chans=1, num_classes=10)),
    ("no class token, mean pool, 7x7 patches",
     dict(img_size=28, patch_size=7, in_chans=1, num_classes=7, class_token=False, global_pool="avg")),
    ("class token + mean pool, RGB, 8x8 patches", dict(img_size=32, patch_size=8, in_chans=3, num_classes=5,
                                                       global_pool="avg", fc_norm=True)),
    ("LayerScale, 5 channels, no head", dict(img_size=20, patch_size=5, in_chans=5, num_classes=0, init_values=0.1)),
]


@pytest.mark.parametrize("name, kwargs", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_same_logits_as_timm(name, kwargs):
    torch.manual_seed(0)
    theirs = timm.models.vision_transformer.VisionTransformer(embed_dim=48, depth=3, num_heads=4, mlp_ratio=2.5,
                                                               **kwargs).eval()
    with torch.no_grad():  # timm zero-initialises some of these; random values test the mapping
        for parameter in theirs.parameters():
            parameter.normal_(0.0, 0.2)
    ours = from_timm_vit(theirs)
    assert ours.num_parameters() == sum(p.numel() for p in theirs.parameters())
    images = torch.randn(3, kwargs["in_chans"], kwargs["img_size"], kwargs["img_size"])
    with torch.no_grad():
        expected, got = theirs(images), ours(images)
        features = ours.forward_features(images)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    # The trunk's tokens are timm's forward_features (final norm included with pool='token').
    if kwargs.get("global_pool", "token") == "token":
        torch.testing.assert_close(features, theirs.forward_features(images), rtol=0, atol=1e-5)


def test_unsupported_timm_features_are_refused():
    theirs = timm.models.vision_transformer.VisionTransformer(img_size=16, patch_size=4, embed_dim=16, depth=1,
                                                               num_heads=2, reg_tokens=2)
    with pytest.raises(ValueError, match="register tokens"):
        from_timm_vit(theirs)
    theirs = timm.models.vision_transformer.VisionTransformer(img_size=16, patch_size=4, embed_dim=16, depth=1,
                                                               num_heads=2, qk_norm=True)
    with pytest.raises(ValueError, match="QK"):
        from_timm_vit(theirs)
    from functools import partial

    from timm.layers import HybridEmbed

    backbone = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2, padding=1), torch.nn.ReLU())
    theirs = timm.models.vision_transformer.VisionTransformer(
        img_size=16, patch_size=2, embed_dim=16, depth=1, num_heads=2,
        embed_layer=partial(HybridEmbed, backbone=backbone))
    with pytest.raises(ValueError, match="hybrid patch embedding"):
        from_timm_vit(theirs)


def test_vit_base_parameter_count_matches_timm():
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        theirs = timm.models.vision_transformer.VisionTransformer()  # ViT-B/16, 1000 classes
    assert sum(p.numel() for p in theirs.parameters()) == 86_567_656
