"""Table 1 measured: restricted attention against a full-matrix reference, operation-count
slopes against the paper's orders (FLOP counts, not timings: timings on a shared CI machine
are too noisy to assert on), path lengths from connectivity, and ``attnlab complexity``."""

import json
import math

import pytest
import torch

from attnlab.cli.main import main
from attnlab.viz.complexity import Measurement, crossover, fit_slopes, local_attention, max_path_length, measure


@pytest.mark.parametrize("n, window", [(1, 4), (7, 32), (33, 5), (50, 8), (64, 2)])
def test_local_attention_equals_a_band_masked_full_matrix(n, window):
    q, k, v = torch.randn(3, 2, 3, n, 8, dtype=torch.float64)
    i = torch.arange(n)
    band = (i[:, None] - i[None, :]).abs() <= max(window // 2, 1)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill(~band, float("-inf"))
    assert (local_attention(q, k, v, window) - torch.softmax(scores, -1) @ v).abs().max() < 1e-12


def test_operation_count_slopes_match_the_paper():
    counted = ("self-attention", "convolutional", "local attention")
    slopes = fit_slopes(measure([128, 256, 512], [32, 64, 128], layers=counted, timing=False), "flops")
    expected = {"self-attention": (2, 1), "convolutional": (1, 2), "local attention": (1, 1)}
    for kind, (a, b) in expected.items():
        assert abs(slopes[kind]["n"] - a) < 0.05 and abs(slopes[kind]["d"] - b) < 0.05, (kind, slopes[kind])
    lstm = fit_slopes(measure([16, 32], [8, 16], layers=("recurrent",), timing=False), "flops")
    assert math.isnan(lstm["recurrent"]["n"])  # torch's counter does not count LSTM operations


def test_max_path_lengths_from_connectivity():
    for n in (1, 2, 17, 64, 100):
        assert max_path_length("self-attention", n) == 1
        assert max_path_length("recurrent", n) == n  # n - 1 recurrent steps + one layer
        assert max_path_length("convolutional", n, kernel=3) == max(1, n - 1)
        assert max_path_length("convolutional", n, kernel=5) == max(1, math.ceil((n - 1) / 2))
        assert max_path_length("local attention", n, window=32) == max(1, math.ceil((n - 1) / 16))
    with pytest.raises(ValueError, match="unknown layer"):
        max_path_length("lstm", 4)


def test_crossover_reads_the_measurements():
    rows = [Measurement("self-attention", n, 8, n * n / 4, 0, 0) for n in (4, 8, 16)]
    rows += [Measurement("recurrent", n, 8, n, 0, 0) for n in (4, 8, 16)]
    assert crossover(rows) == {8: 8}  # 16 > 8 at n = 8; equal (not dearer) at n = 4


def test_cli_small_grid(tmp_path, capsys):
    out = tmp_path / "cx"
    assert main(["complexity", "--out", str(out), "--n", "16,32", "--d", "8,16", "--repeats", "1"]) == 0
    printed = capsys.readouterr().out
    assert "self-attention" in printed and "the paper: when n > d" in printed
    report = json.loads((out / "complexity.json").read_text())
    assert len(report["measurements"]) == 4 * 2 * 2 and report["max_path_length"]["recurrent"]["32"] == 32
    assert (out / "complexity.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["complexity", "--out", str(out), "--n", "16,32", "--d", "8,16"]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["complexity", "--out", str(out), "--d", "10,16", "--force"]) == 2
    assert "multiples of 4" in capsys.readouterr().err
