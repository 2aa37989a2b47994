"""attnlab.viz.plot_attention_grid writes a valid PNG and checks its input."""

import struct

import pytest
import torch

from attnlab.viz import plot_attention_grid


def test_writes_png_with_a_panel_per_layer_and_head(tmp_path):
    weights = torch.softmax(torch.randn(2, 3, 4, 5), dim=-1)  # (layers, heads, queries, keys)
    path = plot_attention_grid(weights, list("abcde"), ["w", "x", "y", "</s>"], tmp_path / "sub" / "a.png",
                               title="test", dpi=30)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width > height > 0  # 3 heads across, 2 layers down


def test_label_counts_must_match(tmp_path):
    with pytest.raises(ValueError, match="4 queries x 5 keys"):
        plot_attention_grid(torch.rand(1, 1, 4, 5), list("abcd"), list("wxyz"), tmp_path / "a.png")
    with pytest.raises(ValueError, match="layers, heads, queries, keys"):
        plot_attention_grid(torch.rand(4, 5), list("abcde"), list("wxyz"), tmp_path / "a.png")
