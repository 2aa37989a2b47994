"""``attnlab embed`` on the real all-MiniLM-L6-v2: similarities, vectors, clear errors."""

import pytest

from attnlab.cli.main import main


def test_similarities(minilm_dir, capsys):
    assert main(["embed", "--model", str(minilm_dir), "--device", "cpu", "A man is playing a guitar.",
                 "Someone plays an instrument.", "The cat sleeps."]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "384 dimensions" in lines[0]
    rows = [[float(v) for v in line.split()[1:4]] for line in lines[2:5]]
    assert all(abs(rows[i][i] - 1) < 1e-4 for i in range(3))
    assert rows[0][1] > 0.5 > rows[0][2]  # the two music sentences are the similar pair


def test_vectors_are_unit_length(minilm_dir, capsys):
    assert main(["embed", "--model", str(minilm_dir), "--vectors", "--decimals", "6", "one", "two"]) == 0
    vectors = [[float(v) for v in line.split()] for line in capsys.readouterr().out.splitlines()]
    assert [len(v) for v in vectors] == [384, 384]
    assert all(abs(sum(x * x for x in v) - 1) < 1e-4 for v in vectors)


def test_bad_model_directory(tmp_path, capsys):
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    assert main(["embed", "--model", str(tmp_path), "hello"]) == 2
    err = capsys.readouterr().err
    assert "model.safetensors: no such file" in err and "Traceback" not in err
