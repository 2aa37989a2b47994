"""The sinusoidal encoding's rotation property and dot products, and ``attnlab positions``."""

import pytest
import torch

from attnlab import create_model
from attnlab.cli.main import main
from attnlab.layers.positional import sinusoidal_table
from attnlab.viz.positions import dot_products, rotation_error, rotation_matrix


@pytest.mark.parametrize("d_model, base", [(2, 10000.0), (64, 10000.0), (512, 10000.0), (30, 100.0)])
def test_rotation_property_to_1e_6(d_model, base):
    errors = rotation_error(200, d_model, [1, 2, 7, 50, 199], base=base)
    assert max(errors.values()) < 1e-6
    R = rotation_matrix(13, d_model, base)
    assert (R @ R.T - torch.eye(d_model, dtype=torch.float64)).abs().max() < 1e-12  # a rotation
    assert (rotation_matrix(5, d_model, base) @ rotation_matrix(8, d_model, base) - R).abs().max() < 1e-12


def test_rotation_matrix_is_not_trivially_true():
    table = sinusoidal_table(20, 16, dtype=torch.float64)
    wrong = rotation_matrix(3, 16)  # rotating by 3 does not give the position 4 steps on
    assert (table[4:14] - table[:10] @ wrong.T).abs().max() > 0.1
    with pytest.raises(ValueError, match="even"):
        rotation_matrix(1, 7)


def test_dot_products_depend_on_the_offset_only():
    table = sinusoidal_table(300, 64, dtype=torch.float64)
    products = dot_products(table, [0, 17, 100], 150)
    assert (products - products[0]).abs().max() < 1e-9
    omega = 10000.0 ** (-torch.arange(0, 64, 2, dtype=torch.float64) / 64)
    k = torch.arange(151, dtype=torch.float64)
    assert (products[0] - torch.cos(k[:, None] * omega).sum(-1)).abs().max() < 1e-9  # sum_i cos(w_i k)


def test_cli_writes_the_pngs_and_keeps_earlier_ones(tmp_path, capsys):
    model_dir = tmp_path / "bert"
    create_model("bert_tiny").save_pretrained(model_dir)
    out = tmp_path / "pos"
    assert main(["positions", "--out", str(out), "--length", "32", "--d-model", "16", "--model", str(model_dir)]) == 0
    printed = capsys.readouterr().out
    assert "-> OK" in printed
    for name in ("positions_sinusoidal.png", "positions_dot_products.png", "positions_rotation.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["positions", "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["positions", "--out", str(out), "--d-model", "15"]) == 2
    assert "even" in capsys.readouterr().err
    translation = tmp_path / "tr"
    create_model("transformer_tiny").save_pretrained(translation)
    assert main(["positions", "--out", str(tmp_path / "p2"), "--model", str(translation)]) == 2
    assert "no learned position table" in capsys.readouterr().err
    assert not (tmp_path / "p2").exists()
