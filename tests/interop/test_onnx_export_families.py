"""ONNX export of the other families (issue 30: export for every family it can represent):
the ViT, the captioner, text-to-image, the Image Transformer (local 1D, local 2D, class- and
low-resolution-conditioned), the Music Transformer and the BERT text classifier give onnxruntime outputs equal to
torch's (< 1e-4) at a batch size other than the export's; what is not exported says why."""

import pytest
import torch

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from attnlab import create_model  # noqa: E402
from attnlab.cli.main import main  # noqa: E402
from attnlab.interop.onnx_export import export_onnx, onnx_parity  # noqa: E402

FAMILIES = [
    ("vit_tiny_patch4_28", {"num_classes": 10}, ["images"]),
    ("captioner_tiny", {"vocab_size": 40}, ["images", "tgt_in_ids"]),
    ("text_to_image_tiny", {}, ["text_ids", "codes"]),
    ("imagetransformer_mnist_small", {"num_layers": 2}, ["images"]),
    ("imagetransformer_mnist_2d_small", {"num_layers": 2}, ["images"]),
    ("imagetransformer_mnist_small", {"num_layers": 2, "num_classes": 10}, ["images", "labels"]),
    ("imagetransformer_sr_mnist_small", {"num_layers": 2}, ["images", "low_res"]),
    ("music_tiny", {}, ["ids"]),
    ("bert_classifier_tiny", {}, ["ids", "attention_mask", "token_type_ids"]),
]


@pytest.mark.parametrize("preset, overrides, names", FAMILIES, ids=[f"{p}-{'-'.join(n)}" for p, _, n in FAMILIES])
def test_every_family_exports_with_a_dynamic_batch(preset, overrides, names, tmp_path):
    torch.manual_seed(0)
    model = create_model(preset, **overrides).eval()
    path = tmp_path / "model.onnx"
    assert export_onnx(model, path) == names
    graph = onnx.load(str(path)).graph
    assert [value.name for value in graph.input] == names
    assert all(value.type.tensor_type.shape.dim[0].dim_param for value in graph.input)  # batch symbolic
    for batch, seed in [(1, 1), (3, 2)]:
        assert onnx_parity(model, path, batch=batch, seed=seed) < 1e-4


def test_a_model_that_is_not_exported_says_why(tmp_path):
    model = create_model("vqvae_tiny")
    with pytest.raises(ValueError, match="VQVAE: the VQ-VAE is the text-to-image model's image tokenizer"):
        export_onnx(model, tmp_path / "vq.onnx")
    assert not (tmp_path / "vq.onnx").exists()


def test_cli_exports_a_vit_directory(tmp_path, capsys):
    torch.manual_seed(0)
    create_model("vit_tiny_patch4_28", num_classes=10).save_pretrained(tmp_path / "vit")
    out = tmp_path / "vit.onnx"
    assert main(["export-onnx", "--model", str(tmp_path / "vit"), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "-> OK" in printed and out.exists()
    # issue 39, point 21: a ViT takes images of patches, not a token length ("batch 3, length 11")
    assert "inputs images; batch dynamic (images of 1x28x28, 49 patches each)" in printed
    assert "other shapes (3 images of 49 patches each)" in printed and "length" not in printed


@pytest.mark.parametrize("preset, overrides, expected", [
    ("captioner_tiny", {"vocab_size": 40}, ("batch and token length dynamic (images of 3x32x32)",
                                            "3 images, 11 tokens")),
    ("imagetransformer_mnist_small", {"num_layers": 2}, ("batch dynamic (images of 1x28x28)", "3 images")),
    ("text_to_image_tiny", {}, ("batch dynamic", "batch 3")),
    ("music_tiny", {}, ("batch and token length dynamic", "batch 3, 11 tokens")),
])
def test_shapes_are_said_in_each_models_words(preset, overrides, expected):
    from attnlab.interop.onnx_export import describe_shapes

    model = create_model(preset, **overrides)
    assert (describe_shapes(model), describe_shapes(model, 3, 11)) == expected
