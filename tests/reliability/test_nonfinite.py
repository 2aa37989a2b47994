"""A run that diverges to NaN: updates skipped with a warning, a clear stop after N in a
row, finite checkpoints kept, metrics.jsonl strict JSON."""

from __future__ import annotations

import json

import pytest
import torch

from attnlab.training import TrainConfig, Trainer, list_checkpoints, load_training_state
from attnlab.training.checkpoint import MODEL_FILE

from training._toys import loss_fn, make_model, make_source


def _strict_json(line: str):
    def refuse(constant):
        raise AssertionError(f"non-standard JSON constant {constant} in metrics.jsonl")
    return json.loads(line, parse_constant=refuse)


def _poisoned_loss(bad_steps: set[int], counter: list[int]):
    """The toy loss, times NaN on the listed (1-based) updates."""
    def poisoned(model, batch):
        counter[0] += 1
        loss, tokens, logs = loss_fn(model, batch)
        if counter[0] in bad_steps:
            loss = loss * float("nan")
        return loss, tokens, logs
    return poisoned


def _config(tmp_path, **overrides):
    values = dict(out_dir=str(tmp_path / "run"), max_steps=6, schedule="cosine", peak_lr=1e-2, warmup_steps=1,
                  log_every=1, checkpoint_every=1, keep_last=2, progress_bar=False, tensorboard=False,
                  tune_malloc=False)
    return TrainConfig(**{**values, **overrides})


def test_a_nan_update_is_skipped_and_the_weights_stay_finite(tmp_path):
    model = make_model()
    trainer = Trainer(model, _poisoned_loss({3}, [0]), make_source(), _config(tmp_path))
    with pytest.warns(RuntimeWarning, match="step 3: loss nan is not finite; this update is skipped"):
        trainer.train()
    assert trainer.step == 6
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
    records = [_strict_json(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in records if r["step"] == 3] == [None]  # null, not a bare NaN
    assert all(r["loss"] is not None for r in records if r["step"] != 3)


def test_too_many_in_a_row_stop_with_a_clear_error_keeping_the_finite_checkpoints(tmp_path):
    trainer = Trainer(make_model(), _poisoned_loss(set(range(3, 100)), [0]), make_source(),
                      _config(tmp_path, max_nonfinite_updates=3, max_steps=20))
    with pytest.warns(RuntimeWarning), pytest.raises(ValueError, match="3 updates in a row had a NaN"):
        trainer.train()
    checkpoints = list_checkpoints(tmp_path / "run" / "checkpoints")
    assert [c.name for c in checkpoints] == ["step_00000003", "step_00000004"]
    from safetensors.torch import load_file
    for checkpoint in checkpoints:
        assert all(bool(torch.isfinite(t).all()) for t in load_file(str(checkpoint / MODEL_FILE)).values())
        load_training_state(checkpoint)
    for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines():
        _strict_json(line)


def test_a_checkpoint_of_non_finite_weights_is_refused_and_rotates_nothing_out(tmp_path):
    model = make_model()
    trainer = Trainer(model, loss_fn, make_source(), _config(tmp_path, max_steps=2))
    trainer.train()
    before = [c.name for c in list_checkpoints(tmp_path / "run" / "checkpoints")]
    with torch.no_grad():
        next(model.parameters())[0, 0] = float("inf")
    trainer.step = 3
    with pytest.raises(ValueError, match="holds NaN or infinity; not saving"):
        trainer.save_checkpoint()
    assert [c.name for c in list_checkpoints(tmp_path / "run" / "checkpoints")] == before


def test_resume_warns_naming_changed_settings(tmp_path):
    Trainer(make_model(), loss_fn, make_source(), _config(tmp_path, max_steps=2)).train()
    trainer = Trainer(make_model(), loss_fn, make_source(), _config(tmp_path, max_steps=3, peak_lr=5e-2))
    with pytest.warns(UserWarning, match=r"different training settings or data: peak_lr 0\.01 -> 0\.05"):
        trainer.train(resume=True)


def test_a_partial_last_log_line_is_cut_before_appending(tmp_path):
    run = tmp_path / "run"
    Trainer(make_model(), loss_fn, make_source(), _config(tmp_path, max_steps=1)).train()
    first = (run / "metrics.jsonl").read_text().splitlines()[0]
    with (run / "metrics.jsonl").open("a") as log:  # a kill cut this line short
        log.write('{"step": 1, "lo')
    Trainer(make_model(), loss_fn, make_source(), _config(tmp_path, max_steps=2)).train(resume=True)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert lines[0] == first and all(_strict_json(line) for line in lines)
    assert [json.loads(line)["step"] for line in lines] == [1, 2]


def test_resume_warns_naming_changed_data(tmp_path):
    Trainer(make_model(), loss_fn, make_source(), _config(tmp_path, max_steps=2), run_info={"data": "a.txt"}).train()
    trainer = Trainer(make_model(), loss_fn, make_source(), _config(tmp_path, max_steps=3), run_info={"data": "b.txt"})
    with pytest.warns(UserWarning, match="data 'a.txt' -> 'b.txt'"):
        trainer.train(resume=True)
