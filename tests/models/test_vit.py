"""The Vision Transformer: presets, patch embedding, position embeddings, pooling, errors."""

import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab.layers.patch import PatchEmbedding, resize_position_embedding, sincos_position_embedding_2d
from attnlab.models.vit import VisionTransformer, VisionTransformerConfig


def _tiny(**overrides):
    settings = dict(image_size=12, patch_size=4, in_channels=2, num_classes=5, d_model=16, num_layers=2,
                    num_heads=4, d_ff=24)
    settings.update(overrides)
    torch.manual_seed(0)
    model = VisionTransformer(VisionTransformerConfig(**settings))
    with torch.no_grad():  # the head starts at zero: give it values so logits depend on the input
        model.head.weight.normal_()
    return model.eval()


@pytest.mark.parametrize("name, count", [
    ("vit_base_patch16_224", 86_567_656),
    ("vit_large_patch16_224", 304_326_632),
    ("vit_huge_patch14_224", 632_045_800),
])
def test_paper_preset_parameter_counts(name, count):
    with torch.device("meta"):  # shapes only
        model = attnlab.create_model(name, num_classes=1000)
    assert model.num_parameters() == count


def test_small_presets_run_on_28x28_grey_images():
    for name in ("vit_tiny_patch4_28", "vit_tiny_patch7_28", "vit_hybrid_tiny_28"):
        model = attnlab.create_model(name).eval()
        assert model(torch.rand(2, 1, 28, 28)).shape == (2, 10)


def test_patch_embedding_is_unfold_then_linear():
    torch.manual_seed(1)
    embed = PatchEmbedding(patch_size=3, in_channels=2, d_model=5).double()
    torch.nn.init.normal_(embed.proj.bias)
    images = torch.randn(2, 2, 9, 6, dtype=torch.float64)
    # unfold: (B, C·P·P, patches) with the channel-major (C, P, P) flattening of the conv weight
    patches = F.unfold(images, kernel_size=3, stride=3).transpose(1, 2)  # (B, 6, 18)
    expected = patches @ embed.proj.weight.reshape(5, -1).T + embed.proj.bias
    torch.testing.assert_close(embed(images), expected)


def test_resizing_to_the_same_grid_is_the_identity_and_keeps_the_class_token():
    table = torch.randn(1, 1 + 4 * 5, 8)
    torch.testing.assert_close(resize_position_embedding(table, (4, 5), (4, 5), 1), table, rtol=0, atol=1e-6)
    bigger = resize_position_embedding(table, (4, 5), (8, 10), 1)
    assert bigger.shape == (1, 81, 8) and torch.equal(bigger[:, 0], table[:, 0])


def test_resizing_keeps_a_constant_table_constant():
    # The bicubic kernel's weights sum to one (borders clamp): a constant stays that constant.
    table = torch.full((1, 1 + 36, 3), 0.75)
    bigger = resize_position_embedding(table, (6, 6), (9, 11), 1)
    torch.testing.assert_close(bigger, torch.full((1, 1 + 99, 3), 0.75), rtol=0, atol=1e-6)


def test_other_resolutions_run_and_weights_load_across_grids(tmp_path):
    model = _tiny()
    model.save_pretrained(tmp_path / "m")
    big = VisionTransformer(model.config.replace(image_size=20)).eval()
    big.load_state_dict(dict(model.state_dict()))  # the position embedding is resized on load
    images = torch.randn(2, 2, 20, 20)
    with torch.no_grad():  # loading resized == resizing on the fly
        torch.testing.assert_close(big(images), model(images), rtol=0, atol=1e-6)
    loaded = attnlab.load_model(tmp_path / "m")
    with torch.no_grad():
        torch.testing.assert_close(loaded(images[..., :12, :12]), model(images[..., :12, :12]), rtol=0, atol=0)


def test_sincos_positions_mean_pool_and_no_class_token():
    model = _tiny(class_token=False, pool="mean", position_embedding="sincos")
    assert model.class_token is None and "position_embedding" not in dict(model.named_parameters())
    assert model.no_weight_decay() == set()
    features = model.forward_features(torch.randn(3, 2, 12, 12))
    assert features.shape == (3, 9, 16)
    table = sincos_position_embedding_2d((3, 3), 16)
    torch.testing.assert_close(model.position_embedding[0], table)
    # Rows of the same image row share the first half; equal columns the second half.
    assert torch.equal(table[0, :8], table[1, :8]) and torch.equal(table[0, 8:], table[3, 8:])


def test_forward_is_features_then_head_and_mean_pool_ignores_token_order():
    model = _tiny(pool="mean")
    images = torch.randn(2, 2, 12, 12)
    with torch.no_grad():
        features = model.forward_features(images)
        torch.testing.assert_close(model.forward_head(features), model(images))
        shuffled = torch.cat([features[:, :1], features[:, 1:].flip(1)], dim=1)
        torch.testing.assert_close(model.forward_head(shuffled), model(images), rtol=1e-5, atol=1e-6)
    assert model.no_weight_decay() == {"position_embedding", "class_token"}


def test_each_image_is_classified_alone():
    # No attention across the batch: an image's logits do not depend on its batch mates.
    model = _tiny()
    images = torch.randn(4, 2, 12, 12)
    with torch.no_grad():
        torch.testing.assert_close(model(images)[1:2], model(images[1:2]), rtol=1e-5, atol=1e-6)


def test_drop_path_and_layer_scale():
    model = _tiny(drop_path=0.5, layer_scale_init=1e-3)
    layers = model.encoder.layers
    assert [layer.drop_path for layer in layers] == [0.0, 0.5]
    assert torch.equal(layers[0].ffn_scale, torch.full((16,), 1e-3))
    images = torch.randn(64, 2, 12, 12)
    with torch.no_grad():
        evaluation = model(images)
        torch.testing.assert_close(model(images), evaluation)  # deterministic in eval
        model.train()
        torch.manual_seed(0)
        train = model(images)
    assert not torch.allclose(train, evaluation)  # some samples skipped the last layer's branches


def _fit(model, images, labels, steps: int = 40) -> torch.Tensor:
    """AdamW at 1e-2 on one batch; the last loss."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(steps):
        loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss


def test_tiny_model_overfits_a_small_batch():
    torch.manual_seed(0)
    model = VisionTransformer(VisionTransformerConfig(image_size=8, patch_size=4, in_channels=1, num_classes=4,
                                                      d_model=32, num_layers=2, num_heads=4, d_ff=64))
    images, labels = torch.randn(16, 1, 8, 8), torch.arange(16) % 4
    loss = _fit(model, images, labels)
    assert loss.item() < 0.05
    assert (model(images).argmax(1) == labels).all()


@pytest.mark.parametrize("shape, message", [
    ((2, 2, 13, 12), "not divisible by the patch size 4"),
    ((2, 3, 12, 12), "3 channel"),
    ((2, 12, 12), "batch, channels, height, width"),
])
def test_bad_images_are_refused_clearly(shape, message):
    with pytest.raises(ValueError, match=message):
        _tiny()(torch.randn(*shape))


@pytest.mark.parametrize("overrides, message", [
    (dict(image_size=30), "not divisible by patch_size"),
    (dict(class_token=False), "pool='token' needs class_token"),
    (dict(pool="max"), "pool="),
    (dict(position_embedding="sincos", d_model=18, num_heads=3), "divisible by 4"),
])
def test_bad_configs_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        _tiny(**overrides)


def _reference_hybrid_tokens(model, images):
    """The hybrid's tokens written out: per stem layer conv2d (stride 2, padding 1), batch
    norm with the running statistics (evaluation), ReLU; then unfold + linear."""
    x = images
    stem = model.patch_embed.stem
    for i in range(0, len(stem), 3):
        conv, norm = stem[i], stem[i + 1]
        x = F.conv2d(x, conv.weight, stride=2, padding=1)
        scale = norm.weight / torch.sqrt(norm.running_var + norm.eps)
        x = torch.relu((x - norm.running_mean[:, None, None]) * scale[:, None, None] + norm.bias[:, None, None])
    p = model.config.patch_size
    patches = F.unfold(x, kernel_size=p, stride=p).transpose(1, 2)
    proj = model.patch_embed.proj
    return patches @ proj.weight.reshape(proj.out_channels, -1).T + proj.bias


def test_hybrid_stem_equals_conv_batchnorm_relu_then_patches():
    model = _tiny(image_size=24, patch_size=3, stem_channels=(6, 7)).double()
    with torch.no_grad():  # statistics and affine parameters that are not the identity
        for module in model.patch_embed.stem:
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.normal_()
                module.running_var.uniform_(0.5, 2.0)
                module.weight.normal_()
                module.bias.normal_()
    images = torch.randn(2, 2, 24, 24, dtype=torch.float64)
    assert model.config.patch_pixels == 12 and model.config.grid == (2, 2) and model.patch_embed.grid(images) == (2, 2)
    torch.testing.assert_close(model.patch_embed(images), _reference_hybrid_tokens(model, images),
                               rtol=0, atol=1e-12)
    assert {"patch_embed.stem.0.weight", "patch_embed.stem.4.running_var"} <= set(model.state_dict())
    assert model(images).shape == (2, 5)


def test_hybrid_config_round_trips_through_json_and_other_resolutions_run(tmp_path):
    model = _tiny(image_size=16, patch_size=2, stem_channels=[4])  # a list, as JSON gives it
    assert model.config.stem_channels == (4,) and model.config.grid == (4, 4)
    model.save_pretrained(tmp_path / "m")
    loaded = attnlab.load_model(tmp_path / "m")
    images = torch.randn(2, 2, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(loaded(images), model(images), rtol=0, atol=0)
        assert loaded(torch.randn(2, 2, 24, 24)).shape == (2, 5)  # a 6x6 grid: positions resized


def test_tiny_hybrid_overfits_a_small_batch():
    torch.manual_seed(0)
    model = VisionTransformer(VisionTransformerConfig(image_size=8, patch_size=1, in_channels=1, num_classes=4,
                                                      d_model=32, num_layers=2, num_heads=4, d_ff=64,
                                                      stem_channels=(8, 16)))
    images, labels = torch.randn(16, 1, 8, 8), torch.arange(16) % 4
    loss = _fit(model, images, labels)
    model.eval()  # BatchNorm's running statistics, not the batch's
    assert loss.item() < 0.05
    assert (model(images).argmax(1) == labels).all()


@pytest.mark.parametrize("overrides, message", [
    (dict(stem_channels=(4,), image_size=12, patch_size=4), r"not divisible by patch_size=4 times 2\^1"),
    (dict(stem_channels=(0,)), "stem_channels"),
    (dict(stem_channels=("32",)), "stem_channels"),
    (dict(stem_channels=(True,)), "stem_channels"),
    (dict(stem_channels=(4,) * 9), "at most 8"),
])
def test_bad_hybrid_configs_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        _tiny(**overrides)


def test_hybrid_refuses_images_its_stem_and_patches_do_not_tile():
    model = _tiny(image_size=16, patch_size=2, stem_channels=(4,))
    with pytest.raises(ValueError, match=r"not divisible by 4 \(2\^1 for the stem's stride-2 convolution times the patch size 2\)"):
        model(torch.randn(1, 2, 18, 18))
