"""The image generation task: downsampling, the loss the trainer sees, bits/dim, PSNR."""

import math

import pytest
import torch

import attnlab
from attnlab.data.images import ImageSet
from attnlab.families.image.task import bicubic_upsample, downsample, evaluate_bits_per_dim, image_loss, psnr


def test_downsample_averages_blocks_and_rounds():
    images = torch.tensor([[[[0, 10, 255, 255], [1, 0, 255, 254], [7, 7, 7, 7], [7, 7, 7, 8]]]], dtype=torch.uint8)
    assert downsample(images, 2).tolist() == [[[[3, 255], [7, 7]]]]  # 11/4 = 2.75 -> 3; 1019/4 -> 255; 29/4 -> 7
    with pytest.raises(ValueError, match="cannot be averaged down to 3×3"):
        downsample(images, 3)


def uniform_model(**overrides):
    model = attnlab.create_model("imagetransformer_mnist_small", height=4, width=4, d_model=16, num_heads=2, d_ff=16,
                                 num_layers=1, attention={"name": "local_1d", "block_length": 4}, **overrides)
    with torch.no_grad():
        model.head.weight.zero_()
        model.head.bias.zero_()
    return model.eval()


@pytest.mark.parametrize("overrides", [{}, {"num_classes": 3}, {"low_resolution": 2, "num_encoder_layers": 1}],
                         ids=["plain", "classes", "super-resolution"])
def test_a_uniform_model_scores_exactly_8_bits_per_dim(overrides):
    data = ImageSet("toy", "test", torch.randint(0, 256, (5, 1, 4, 4), dtype=torch.uint8),
                    torch.tensor([0, 1, 2, 0, 1]), ["a", "b", "c"])
    result = evaluate_bits_per_dim(uniform_model(**overrides), data, batch_size=2)
    assert result["images"] == 5
    # float32 log-softmax of 256 equal logits: ln 256 to within a few ulp.
    assert result["bits_per_dim"] == pytest.approx(8.0, abs=1e-5)
    nll, count, logs = image_loss(uniform_model(**overrides), {"images": data.images[:2], "labels": data.labels[:2]})
    assert count == 32 and float(nll.detach()) == pytest.approx(32 * math.log(256), rel=1e-6)


def test_psnr_and_bicubic():
    a = torch.zeros(1, 1, 4, 4, dtype=torch.uint8)
    b = a.clone()
    b[0, 0, 0, 0] = 16  # MSE 16²/16 = 16
    assert psnr(a, b) == pytest.approx(10 * math.log10(255 ** 2 / 16))
    assert psnr(a, a) == math.inf
    flat = torch.full((1, 3, 2, 2), 77, dtype=torch.uint8)
    assert (bicubic_upsample(flat, 8) == 77).all() and bicubic_upsample(flat, 8).shape == (1, 3, 8, 8)


def test_super_resolution_scores_the_outputs_against_the_originals_and_bicubic():
    from attnlab.families.image.task import evaluate_super_resolution

    model = uniform_model(low_resolution=2, num_encoder_layers=1)  # equal logits: greedy picks 0 everywhere
    images = torch.randint(1, 256, (5, 1, 4, 4), dtype=torch.uint8)
    images[3] = 0  # reproduced exactly by an all-black output
    data = ImageSet("toy", "test", images, torch.zeros(5, dtype=torch.long), ["a"])
    results, out = evaluate_super_resolution(model, data, 9, batch_size=2)
    assert results["images"] == 5 and (out["output"] == 0).all() and out["output"].shape == (5, 1, 4, 4)
    assert torch.equal(out["original"], images) and torch.equal(out["low"], downsample(images, 2))
    assert torch.equal(out["bicubic"], bicubic_upsample(downsample(images, 2), 4))
    model_mse = [float((image.double() ** 2).mean()) for image in images]
    assert results["exact_model"] == 1
    expected = [10 * math.log10(255 ** 2 / mse) for mse in model_mse if mse > 0]
    assert results["psnr_model"] == pytest.approx(sum(expected) / len(expected), rel=1e-12)
    assert results["psnr_model_pooled"] == pytest.approx(10 * math.log10(255 ** 2 / (sum(model_mse) / 5)), rel=1e-12)
    bicubic_mse = [float(((b.double() - a.double()) ** 2).mean()) for a, b in zip(images, out["bicubic"])]
    finite = [10 * math.log10(255 ** 2 / mse) for mse in bicubic_mse if mse > 0]
    assert results["exact_bicubic"] == 5 - len(finite)
    assert results["psnr_bicubic"] == pytest.approx(sum(finite) / len(finite), rel=1e-12)
    assert results["model_better"] == pytest.approx(sum(m < b for m, b in zip(model_mse, bicubic_mse)) / 5)
    with pytest.raises(ValueError, match="not a super-resolution model"):
        evaluate_super_resolution(uniform_model(), data, 2)
    with pytest.raises(ValueError, match="count=0 must be a positive integer"):
        evaluate_super_resolution(model, data, 0)


def test_super_resolution_can_average_several_samples_per_image():
    from attnlab.generation.images import sample_images
    from attnlab.families.image.task import evaluate_super_resolution

    model = uniform_model(low_resolution=2, num_encoder_layers=1)  # every intensity equally likely
    images = torch.randint(0, 256, (3, 1, 4, 4), dtype=torch.uint8, generator=torch.Generator().manual_seed(2))
    data = ImageSet("toy", "test", images, torch.zeros(3, dtype=torch.long), ["a"])
    results, out = evaluate_super_resolution(model, data, 3, batch_size=2, temperature=1.0, samples=4,
                                             generator=torch.Generator().manual_seed(5))
    assert results["samples"] == 4 and out["output"].shape == (3, 1, 4, 4)
    # The same draws made by hand, batch by batch (2 images, then 1), four consecutive samples per image.
    generator, raw = torch.Generator().manual_seed(5), []
    for start, stop in ((0, 2), (2, 3)):
        low = downsample(images[start:stop], 2).repeat_interleave(4, dim=0)
        raw.append(sample_images(model, 4 * (stop - start), low_res=low, temperature=1.0, generator=generator))
    raw = torch.cat(raw).view(3, 4, 1, 4, 4)
    assert (raw[:, 0] != raw[:, 1]).any()  # the samples differ, so the mean is not any one of them
    expected = raw.double().mean(1).round().to(torch.uint8)
    assert torch.equal(out["output"], expected)
    assert results["psnr_model_pooled"] == pytest.approx(psnr(expected, images), rel=1e-12)
    with pytest.raises(ValueError, match="greedy outputs .temperature 0. are all the same"):
        evaluate_super_resolution(model, data, 3, samples=2)
    with pytest.raises(ValueError, match="samples=0 must be a positive integer"):
        evaluate_super_resolution(model, data, 3, temperature=1.0, samples=0)
