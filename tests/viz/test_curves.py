"""``attnlab curves``: the training and held-out curves of runs from their metrics.jsonl, and
its refusals (a run without a log, a malformed line, a metric a run lacks, the output rule)."""

from __future__ import annotations

import json

import pytest
import torch
from matplotlib.colors import to_rgba

import attnlab
from attnlab.cli.main import main
from attnlab.training import ListBatchSource, TrainConfig, Trainer
from attnlab.training.losses import lm_loss
from attnlab.viz.curves import curves_figure, read_run_curves


def _batches(count, seed):
    generator = torch.Generator().manual_seed(seed)
    return [{"ids": torch.randint(0, 64, (2, 9), generator=generator)} for _ in range(count)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two tiny real runs (lm_tiny, a few updates, held-out loss every 2): their metrics.jsonl
    is what the Trainer writes."""
    torch.set_num_threads(1)
    directories = []
    for name, lr in (("scratch", 1e-3), ("finetuned", 3e-3)):
        out = tmp_path_factory.mktemp("runs") / name
        torch.manual_seed(0)
        model = attnlab.create_model("lm_tiny")
        config = TrainConfig(out_dir=str(out), max_steps=6, schedule="cosine", peak_lr=lr, warmup_steps=1,
                             log_every=1, validate_every=2, progress_bar=False, tensorboard=False, tune_malloc=False)
        Trainer(model, lm_loss, ListBatchSource(_batches(4, 0), shuffle=True, seed=0), config,
                valid_batches=_batches(2, 9), model_config=model.config.to_dict()).train()
        directories.append(out)
    return directories


def _records(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_curves_draws_each_run_training_and_held_out(runs, tmp_path, capsys):
    out = tmp_path / "curves.png"
    assert main(["curves", str(runs[0]), str(runs[1]), "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert f"{runs[0]}: 6 updates, last training loss" in printed and "last held-out" in printed

    curves = [read_run_curves(run) for run in runs]
    figure = curves_figure(curves, metrics=["loss", "ppl"], x="updates")
    assert len(figure.axes) == 2
    lines = figure.axes[0].lines
    assert [line.get_label() for line in lines] == [f"{runs[0]} (training)", f"{runs[0]} (held-out)",
                                                    f"{runs[1]} (training)", f"{runs[1]} (held-out)"]
    # one colour per run, solid training, dashed held-out
    assert to_rgba(lines[0].get_color()) == to_rgba(lines[1].get_color()) != to_rgba(lines[2].get_color())
    assert lines[0].get_linestyle() == "-" and lines[1].get_linestyle() == "--"
    for run, (train, valid) in zip(runs, (lines[0:2], lines[2:4])):
        records = _records(run)
        assert list(train.get_xdata()) == [r["step"] for r in records if "loss" in r] == [1, 2, 3, 4, 5, 6]
        assert list(train.get_ydata()) == [r["loss"] for r in records if "loss" in r]
        assert list(valid.get_xdata()) == [2, 4, 6]
        assert list(valid.get_ydata()) == [r["valid_loss"] for r in records if "valid_loss" in r]


def test_minutes_are_the_measured_update_time(runs):
    curves = read_run_curves(runs[0])
    train, valid = curves.series("loss", "minutes")
    records = [r for r in _records(runs[0]) if "loss" in r]
    expected, total = [], 0.0
    for record in records:
        total += record["tokens"] / record["tokens_per_s"] / 60
        expected.append(total)
    assert [x for x, _ in train] == pytest.approx(expected, rel=1e-12)
    assert [x for x, _ in valid] == pytest.approx(expected[1::2], rel=1e-12)  # held-out at steps 2, 4, 6


def test_a_written_log_with_nulls_a_killed_last_line_and_foreign_lines(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    lines = [json.dumps({"note": "a line of another tool"}),
             json.dumps({"time": 1.0, "step": 10, "lr": 1e-3, "loss": 3.0, "tokens": 600, "tokens_per_s": 100.0}),
             json.dumps({"time": 2.0, "step": 10, "valid_loss": 2.9}),
             json.dumps({"time": 3.0, "step": 20, "lr": 1e-3, "loss": None, "tokens": 600, "tokens_per_s": 60.0}),
             json.dumps({"time": 4.0, "step": 30, "lr": 1e-3, "loss": 2.0, "tokens": 1200, "tokens_per_s": 120.0}),
             json.dumps({"time": 5.0, "step": 30, "stopped": "SIGINT"})]
    (run / "metrics.jsonl").write_text("\n".join(lines) + '\n{"time": 6.0, "step": 40, "lo')
    curves = read_run_curves(run)
    train, valid = curves.series("loss", "minutes")
    assert train == [(0.1, 3.0), (pytest.approx(26 / 60), 2.0)]  # 6 s, then 6 + 10 + 10 s; the null left out
    assert valid == [(0.1, 2.9)]
    out = tmp_path / "c.png"
    assert main(["curves", str(run / "metrics.jsonl"), "-o", str(out), "--x", "minutes"]) == 0
    assert "line 7: cut short" in capsys.readouterr().err and out.is_file()


@pytest.mark.parametrize("content, message", [
    ('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5,\n{"step": 3, "loss": 1.0}\n',
     r"metrics\.jsonl, line 2: not valid JSON"),
    ('{"step": 1, "loss": 2.0}\n[1, 2]\n', r"metrics\.jsonl, line 2: expected a JSON object, found a list"),
    ('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": "low"}\n', r"metrics\.jsonl, line 2: 'loss' is 'low', not a number"),
    ('{"step": 1, "loss": 2.0}\n', r"metrics\.jsonl: no 'accuracy' to draw \(--metric\); it has loss"),
    ("", r"metrics\.jsonl: no training or held-out records"),
    ('{"step": 1, "loss": 2.0}\n', r"tokens_per_s, so the minutes of updates are not known; use --x updates"),
])
def test_bad_logs_are_refused_naming_file_and_line_and_nothing_is_written(tmp_path, capsys, content, message):
    import re

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(content)
    out = tmp_path / "c.png"
    extra = ["--metric", "accuracy"] if "accuracy" in message else ["--x", "minutes"] if "minutes" in message else []
    assert main(["curves", str(run), "-o", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_missing_runs_and_the_output_rule(runs, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "c.png"
    assert main(["curves", str(runs[0]), str(empty), "-o", str(out)]) == 2
    assert f"{empty}: no metrics.jsonl there" in capsys.readouterr().err and not out.exists()
    out.write_text("mine")
    assert main(["curves", str(runs[0]), "-o", str(out)]) == 2
    assert "pass --force" in capsys.readouterr().err and out.read_text() == "mine"
    assert main(["curves", str(runs[0]), "-o", str(out), "--force"]) == 0 and out.read_bytes()[:4] == b"\x89PNG"
    assert main(["curves", str(runs[0]), "-o", str(tmp_path / "c.jpg")]) == 2
    assert "ending in .png" in capsys.readouterr().err
