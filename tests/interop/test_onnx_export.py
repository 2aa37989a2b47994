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


def test_translation_encoder_and_decoder_parts_decode_like_attnlab(tmp_path):
    """The two-part export (encoder once, decoder per token) gives the torch halves' outputs
    on other shapes, and greedy decoding in onnxruntime gives attnlab's greedy tokens."""
    import numpy as np

    from attnlab.generation.search import greedy_search
    from attnlab.interop.onnx_export import example_inputs
    from attnlab.translation import onnx_greedy_translate

    torch.manual_seed(0)
    model = create_model("transformer_tiny").eval()
    encoder, decoder = tmp_path / "m.encoder.onnx", tmp_path / "m.decoder.onnx"
    assert export_onnx(model, encoder, part="encoder") == ["src_ids"]  # the parts its family's graph names
    assert export_onnx(model, decoder, part="decoder") == ["tgt_in_ids", "memory", "memory_mask"]
    import onnxruntime

    enc = onnxruntime.InferenceSession(str(encoder), providers=["CPUExecutionProvider"])
    dec = onnxruntime.InferenceSession(str(decoder), providers=["CPUExecutionProvider"])
    inputs = example_inputs(model, batch=3, length=9, seed=4)  # other shapes than the export's, padded
    with torch.no_grad():
        memory, mask = model.encode(inputs["src_ids"])
        logits = model.decode(inputs["tgt_in_ids"], memory, mask)
    got_memory, got_mask = enc.run(None, {"src_ids": inputs["src_ids"].numpy()})
    assert np.array_equal(got_mask, mask.reshape(3, 9).numpy())
    assert float(np.abs(got_memory - memory.numpy()).max()) < 1e-4
    got_logits = dec.run(None, {"tgt_in_ids": inputs["tgt_in_ids"].numpy(), "memory": got_memory,
                                "memory_mask": got_mask})[0]
    assert float(np.abs(got_logits - logits.numpy()).max()) < 1e-4

    source = inputs["src_ids"]
    expected = [h.tokens for h in greedy_search(model, source, max_len_a=0.0, max_len_b=12)]
    # the comparison is only meaningful where attnlab's choices are not near-ties
    with torch.no_grad():
        for row, tokens in zip(source, expected):
            prefix = torch.tensor([[model.config.bos_id] + tokens[:-1]])
            top2 = model(row[None], prefix)[0].topk(2, dim=-1).values
            assert float((top2[:, 0] - top2[:, 1]).min()) > 1e-3
    got = onnx_greedy_translate(encoder, decoder, source.numpy(), bos_id=model.config.bos_id,
                                eos_id=model.config.eos_id, max_length=12)
    assert got == expected


def test_cli_translation_writes_the_parts(tmp_path, capsys):
    torch.manual_seed(0)
    create_model("transformer_tiny").save_pretrained(tmp_path / "tr")
    out = tmp_path / "tr.onnx"
    assert main(["export-onnx", "--model", str(tmp_path / "tr"), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.count("-> OK") == 3
    assert (tmp_path / "tr.encoder.onnx").is_file() and (tmp_path / "tr.decoder.onnx").is_file()
    (tmp_path / "lm").mkdir()
    create_model("lm_tiny").save_pretrained(tmp_path / "lm")
    assert main(["export-onnx", "--model", str(tmp_path / "lm"), "-o", str(tmp_path / "lm.onnx")]) == 0
    assert not (tmp_path / "lm.encoder.onnx").exists()
