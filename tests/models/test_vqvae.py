"""The VQ-VAE image tokenizer: shapes, nearest codes, straight-through gradient, EMA
codebook, dead-code restarts, learning a few scenes."""

import math

import pytest
import torch

import attnlab
from attnlab.data.scenes import load_scenes
from attnlab.models.vqvae import psnr
from attnlab.data.images import normalize


def _model(**overrides):
    torch.manual_seed(0)
    return attnlab.create_model("vqvae_tiny", **overrides)


def test_shapes_and_round_trip():
    model = _model().eval()
    images = torch.rand(3, 3, 32, 32) * 2 - 1
    codes = model.encode(images)
    assert codes.shape == (3, 8, 8) and codes.dtype == torch.int64 and 0 <= int(codes.min()) <= int(codes.max()) < 32
    assert model.decode_codes(codes).shape == (3, 3, 32, 32)
    out = model(images)
    assert out.reconstruction.shape == images.shape and torch.equal(out.codes, codes)
    assert attnlab.create_model("vqvae_tiny", image_size=64, downsample=8).encode(torch.zeros(1, 3, 64, 64)).shape == (1, 8, 8)


def test_codes_are_the_nearest_codebook_vectors():
    model = _model().eval()
    z = torch.randn(2, 8, 3, 5, dtype=torch.float64)
    model.double()
    codes = model.nearest_codes(z)
    for b in range(2):
        for i in range(3):
            for j in range(5):
                distances = [float((z[b, :, i, j] - e).pow(2).sum()) for e in model.codebook]
                assert int(codes[b, i, j]) == min(range(32), key=distances.__getitem__)


def test_straight_through_gradient_reaches_the_encoder_unchanged():
    model = _model().eval()
    images = torch.rand(2, 3, 32, 32) * 2 - 1
    z = model.encoder(images).detach().requires_grad_(True)
    quantized = model.lookup(model.nearest_codes(z))
    straight = z + (quantized - z).detach()
    torch.testing.assert_close(straight, quantized)  # the forward value is the codebook vector
    target = torch.randn_like(straight)
    (straight * target).sum().backward()
    torch.testing.assert_close(z.grad, target)  # identity gradient through the quantizer
    out = model(images)
    out.loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.encoder.parameters())


def test_ema_updates_and_dead_code_restarts():
    model = _model(dead_threshold=0.5).train()
    before = model.codebook.clone()
    images = torch.rand(4, 3, 32, 32) * 2 - 1
    model(images)
    assert not torch.equal(before, model.codebook)
    # one batch uses few codes: the unused ones decay below the threshold and are restarted at encoder outputs
    for _ in range(80):
        model(images)
    assert float(model.restarts) > 0
    z = model.encoder(images).detach().permute(0, 2, 3, 1).reshape(-1, 8)
    assert float(torch.cdist(model.codebook, z).min(1).values.max()) < 10.0
    usage = model.codebook_usage(model.encode(images))
    assert 1 <= usage["codes_used"] <= 32 and 1.0 <= usage["perplexity"] <= usage["codes_used"] + 1e-9


def test_psnr():
    images = torch.rand(2, 3, 8, 8) * 2 - 1
    assert psnr(images, images) == math.inf
    noisy = images + 2 * 4 / 255  # 4 pixel values off everywhere (inside the range)
    assert psnr(noisy.clamp(-1, 1), images) <= 10 * math.log10(255 ** 2 / 9) + 1e-9


def test_learns_a_few_scenes_quickly():
    scenes = load_scenes("train", count=16)
    images = normalize(scenes.images)
    model = _model().train()
    before = psnr(model.eval().decode_codes(model.encode(images)), images)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    first = None
    for step in range(100):
        out = model(images)
        optimizer.zero_grad()
        (out.loss / len(images)).backward()
        optimizer.step()
        first = first or float(out.mse)
    model.eval()
    assert float(model(images).mse) < first / 4
    assert psnr(model.decode_codes(model.encode(images)), images) > before + 6  # 4x smaller error, through the codes


def test_bad_inputs_and_save_load(tmp_path):
    model = _model()
    with pytest.raises(ValueError, match="images must be"):
        model.encode(torch.zeros(1, 3, 28, 28))
    with pytest.raises(ValueError, match=r"codes must be in \[0, 32\)"):
        model.decode_codes(torch.full((1, 8, 8), 40))
    with pytest.raises(ValueError, match="power of two"):
        attnlab.create_model("vqvae_tiny", downsample=3)
    model(torch.zeros(1, 3, 32, 32))  # a training step moves the codebook
    model.save_pretrained(tmp_path / "vq")
    loaded = attnlab.load_model(tmp_path / "vq")
    assert torch.equal(loaded.codebook, model.codebook)
    images = torch.rand(2, 3, 32, 32) * 2 - 1
    assert torch.equal(loaded.encode(images), model.eval().encode(images))
