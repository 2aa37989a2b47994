"""ViT interpretability: the quantities against their definitions, and the figures' files."""

import itertools
import math

import numpy as np
import torch

from attnlab.models.vit import VisionTransformer, VisionTransformerConfig
from attnlab.families.vit.plots import (FIGURE_NAMES, attention_rollout, filter_components, mean_attention_distance,
                             position_similarity, write_vit_figures)


def test_self_only_attention_has_distance_zero():
    grid, prefix = (3, 4), 1
    length = prefix + 12
    weights = torch.eye(length).expand(2, 3, length, length)
    assert torch.equal(mean_attention_distance(weights, grid, 8, prefix), torch.zeros(3, dtype=torch.float64))


def test_uniform_attention_gives_the_mean_pairwise_patch_distance():
    grid, patch = (3, 4), 5
    length = 1 + 12
    weights = torch.full((1, 2, length, length), 1.0 / length)  # the class token's share is dropped
    points = list(itertools.product(range(3), range(4)))
    expected = sum(patch * math.dist(a, b) for a in points for b in points) / len(points) ** 2
    torch.testing.assert_close(mean_attention_distance(weights, grid, patch, 1),
                               torch.full((2,), expected, dtype=torch.float64))


def test_attention_to_the_right_neighbour_is_one_patch_away():
    grid, patch = (2, 3), 4
    weights = torch.zeros(1, 1, 6, 6)
    for index in range(6):
        weights[0, 0, index, index - 1 if index % 3 == 2 else index + 1] = 1.0  # same row, next column
    torch.testing.assert_close(mean_attention_distance(weights, grid, patch, 0),
                               torch.tensor([4.0], dtype=torch.float64))


def test_rollout_of_identity_attention_is_the_identity_and_of_uniform_is_uniform():
    eye = torch.eye(5).expand(2, 3, 5, 5)
    torch.testing.assert_close(attention_rollout([eye, eye, eye]), torch.eye(5, dtype=torch.float64).expand(2, 5, 5))
    uniform = torch.full((1, 2, 4, 4), 0.25)
    one = attention_rollout([uniform])[0]
    torch.testing.assert_close(one, 0.5 * torch.eye(4, dtype=torch.float64) + 0.125)
    torch.testing.assert_close(attention_rollout([uniform, uniform])[0], one @ one)
    torch.testing.assert_close(one.sum(-1), torch.ones(4, dtype=torch.float64))


def test_filter_components_are_the_principal_axes():
    torch.manual_seed(0)
    weight = torch.randn(40, 2, 3, 3) * torch.linspace(0.1, 2.0, 18).reshape(1, 2, 3, 3)
    components, explained = filter_components(weight, count=5)
    flat = weight.double().reshape(40, -1)
    covariance = np.cov(flat.numpy(), rowvar=False)
    values, vectors = np.linalg.eigh(covariance)
    top = vectors[:, ::-1][:, :5].T
    got = components.reshape(5, -1).numpy()
    assert np.allclose(np.abs((got * top).sum(1)), 1.0, atol=1e-8)  # the same axes, up to sign
    assert np.allclose(explained.numpy(), values[::-1][:5] / values.sum(), atol=1e-10)


def test_position_similarity_is_cosine():
    table = torch.randn(6, 4)
    similarity = position_similarity(table, (2, 3))
    assert similarity.shape == (2, 3, 2, 3)
    torch.testing.assert_close(similarity[0, 1, 1, 2],
                               torch.cosine_similarity(table[1], table[5], dim=0).double())
    torch.testing.assert_close(similarity.reshape(6, 6).diagonal(), torch.ones(6, dtype=torch.float64))


def _tiny_trained():
    torch.manual_seed(0)
    model = VisionTransformer(VisionTransformerConfig(image_size=8, patch_size=4, in_channels=1, num_classes=2,
                                                      d_model=16, num_layers=2, num_heads=2, d_ff=32))
    images = torch.randn(8, 1, 8, 8)
    labels = (images.mean((1, 2, 3)) > 0).long()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(5):
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model, images


# (width, height) in pixels at dpi 100 for this model: 16 filter components in 7 columns,
# a 2x2 patch grid, 2 layers x 2 heads; see the figure functions' layouts.
EXPECTED_SIZES = {"embedding_filters.png": (1030, 470), "position_similarity.png": (360, 300),
                  "attention_distance.png": (640, 480), "attention_maps.png": (1020, 290)}


def test_each_figure_is_written_with_its_size(tmp_path):
    from PIL import Image

    model, images = _tiny_trained()
    paths = write_vit_figures(model, images, tmp_path / "figures")
    assert [p.name for p in paths] == list(FIGURE_NAMES)
    for path in paths:
        with Image.open(path) as image:
            assert image.format == "PNG" and image.size == EXPECTED_SIZES[path.name], path.name
    assert not list((tmp_path / "figures").glob(".*"))  # no temporary files left


def test_a_hybrid_shows_its_stem_filters_and_measures_distance_in_pixels(tmp_path, monkeypatch):
    from PIL import Image

    import attnlab.families.vit.plots as vit_figures

    torch.manual_seed(0)
    # 16x16 images, one stride-2 stem convolution (5 channels), 4x4 patches of its 8x8 map:
    # a 2x2 grid of tokens that stand for 8x8 pixels each.
    model = VisionTransformer(VisionTransformerConfig(image_size=16, patch_size=4, in_channels=1, num_classes=2,
                                                      d_model=16, num_layers=2, num_heads=2, d_ff=32,
                                                      stem_channels=(5,))).eval()
    seen = {}
    original = vit_figures.mean_attention_distance

    def spy(weights, grid, patch_size, num_prefix):
        seen["pixels"] = patch_size
        return original(weights, grid, patch_size, num_prefix)

    monkeypatch.setattr(vit_figures, "mean_attention_distance", spy)
    paths = write_vit_figures(model, torch.randn(3, 1, 16, 16), tmp_path / "figures")
    assert seen["pixels"] == 8 and model.config.patch_pixels == 8
    # The filters figure shows the stem's 5 first-layer 3x3 filters: 5 components in one row
    # of 5 (the patch projection's 5·4·4 inputs are feature maps, not pixels).
    components, _ = filter_components(model.patch_embed.stem.first_conv.weight)
    assert components.shape == (5, 1, 3, 3)
    with Image.open(paths[0]) as image:
        assert image.size == (int(100 * (1.3 * 5 + 1.2)), int(100 * (1.3 * 1 + 0.8)))
