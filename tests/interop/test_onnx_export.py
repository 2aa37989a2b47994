"""ONNX export of BERT, the LM and the translation Transformer: onnxruntime gives the same
outputs (< 1e-4) on batch sizes and lengths other than the export's, padding included."""

import pytest
import torch

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from attnlab import create_model  # noqa: E402
from attnlab.cli.main import main  # noqa: E402
from attnlab.interop.onnx_export import export_onnx, onnx_parity  # noqa: E402


@pytest.mark.parametrize("preset", ["bert_tiny", "lm_tiny", "transformer_tiny"])
def test_onnxruntime_parity_with_dynamic_axes(preset, tmp_path):
    torch.manual_seed(0)
    model = create_model(preset).eval()
    path = tmp_path / "model.onnx"
    names = export_onnx(model, path)
    graph = onnx.load(str(path)).graph
    assert [i.name for i in graph.input] == names
    for value in graph.input:
        batch, length = value.type.tensor_type.shape.dim
        assert batch.dim_param and length.dim_param  # symbolic, not frozen at the example's sizes
    for batch, length, seed in [(1, 5, 1), (3, 11, 2), (4, 30, 3)]:
        assert onnx_parity(model, path, batch=batch, length=length, seed=seed) < 1e-4


def test_cli(tmp_path, capsys):
    torch.manual_seed(0)
    create_model("lm_tiny").save_pretrained(tmp_path / "lm")
    out = tmp_path / "lm.onnx"
    assert main(["export-onnx", "--model", str(tmp_path / "lm"), "-o", str(out)]) == 0
    assert "-> OK" in capsys.readouterr().out
    before = out.read_bytes()
    assert main(["export-onnx", "--model", str(tmp_path / "lm"), "-o", str(out)]) == 2
    assert "--force" in capsys.readouterr().err and out.read_bytes() == before
    assert main(["export-onnx", "--model", str(tmp_path / "lm"), "-o", str(tmp_path / "x.pt")]) == 2
    assert main(["export-onnx", "--model", str(tmp_path / "nope"), "-o", str(tmp_path / "y.onnx")]) == 2
    assert "no such file" in capsys.readouterr().err and not (tmp_path / "y.onnx").exists()
