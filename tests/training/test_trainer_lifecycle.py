"""A training run a user can trust: interrupts keep the work, the schedule fits the run, the
last line is honest, a resume continues the log, a diverged run says so."""

from __future__ import annotations

import json
import math
import os
import signal

import pytest
import torch

from attnlab.training import NoamSchedule, TrainConfig, Trainer, list_checkpoints
from attnlab.training.budget import Budget
from attnlab.training.checkpoint import RESUME_FREE
from attnlab.training.trainer import TrainConfigError, TrainingInterrupted

from ._toys import loss_fn, make_batches, make_model, make_source


def _config(tmp_path, **overrides):
    settings = dict(out_dir=str(tmp_path / "run"), max_steps=8, d_model=8, warmup_steps=2, log_every=1,
                    progress_bar=False, tensorboard=False, tune_malloc=False)
    settings.update(overrides)
    return TrainConfig(**settings)


def _records(tmp_path):
    return [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]


def _signal_at(update: int, *numbers: int):
    """The toy loss; the ``update``-th call sends this process each signal in ``numbers``."""
    calls = [0]

    def loss(model, batch):
        calls[0] += 1
        if calls[0] == update:
            for number in numbers:
                os.kill(os.getpid(), number)
        return loss_fn(model, batch)
    return loss


class _FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _ticking(clock: _FakeClock, seconds: float):
    """The toy loss; each micro-batch takes ``seconds`` on the fake clock."""
    def loss(model, batch):
        clock.now += seconds
        return loss_fn(model, batch)
    return loss


# -- interrupts ------------------------------------------------------------------------------
@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_finishes_the_update_checkpoints_and_raises(tmp_path, capsys, number):
    before = signal.getsignal(number)
    trainer = Trainer(make_model(), _signal_at(3, number), make_source(), _config(tmp_path, max_steps=50))
    with pytest.raises(TrainingInterrupted) as caught:
        trainer.train()
    error = caught.value
    assert error.step == trainer.step == 3 and error.exit_code == 128 + number and not error.immediate
    assert error.checkpoint == tmp_path / "run" / "checkpoints" / "step_00000003"
    assert [c.name for c in list_checkpoints(tmp_path / "run" / "checkpoints")] == ["step_00000003"]
    assert _records(tmp_path)[-1] == {**_records(tmp_path)[-1], "step": 3, "stopped": signal.Signals(number).name}
    assert f"{signal.Signals(number).name} received: stopping after this update" in capsys.readouterr().err
    assert signal.getsignal(number) is before  # the previous handler is back
    resumed = Trainer(make_model(seed=5), loss_fn, make_source(), _config(tmp_path, max_steps=5))
    resumed.train(resume=True)
    assert resumed.step == 5
    assert "at step 3 (of 5)" in capsys.readouterr().err


def test_a_second_signal_stops_at_once_leaving_complete_checkpoints(tmp_path):
    trainer = Trainer(make_model(), _signal_at(4, signal.SIGINT, signal.SIGINT), make_source(),
                      _config(tmp_path, max_steps=50, checkpoint_every=2))
    with pytest.raises(TrainingInterrupted) as caught:
        trainer.train()
    assert caught.value.immediate and caught.value.exit_code == 130
    assert trainer.step == 3  # the fourth update never finished
    assert [c.name for c in list_checkpoints(tmp_path / "run" / "checkpoints")] == ["step_00000002"]
    assert caught.value.checkpoint.name == "step_00000002"
    assert not [p for p in (tmp_path / "run" / "checkpoints").iterdir() if p.name.startswith(".")]


def test_checkpoints_also_come_by_the_clock(tmp_path, monkeypatch):
    from attnlab.training import trainer as trainer_module

    clock = [0.0]
    monkeypatch.setattr(trainer_module.time, "perf_counter", lambda: clock[0])

    def loss(model, batch):
        clock[0] += 20.0  # each update takes 20 s: one minute is three updates
        return loss_fn(model, batch)

    Trainer(make_model(), loss, make_source(), _config(tmp_path, max_steps=7, checkpoint_every_minutes=1.0,
                                                       keep_last=None)).train()
    assert [c.name for c in list_checkpoints(tmp_path / "run" / "checkpoints")] == \
        ["step_00000003", "step_00000006", "step_00000007"]


def test_the_time_cadence_is_validated_and_free_to_change_on_resume():
    with pytest.raises(TrainConfigError) as caught:
        TrainConfig(out_dir="x", max_steps=2, d_model=8, checkpoint_every_minutes=0)
    assert caught.value.field == "checkpoint_every_minutes"
    assert "checkpoint_every_minutes" in RESUME_FREE
    assert TrainConfig.__dataclass_fields__["checkpoint_every_minutes"].default is None  # old configs still load


# -- schedules that fit the run ---------------------------------------------------------------
def test_a_warmup_longer_than_max_steps_is_shortened_keeping_the_noam_peak(tmp_path, capsys):
    trainer = Trainer(make_model(), loss_fn, make_source(), _config(tmp_path, max_steps=20, warmup_steps=4000))
    trainer.train()
    fit = trainer.schedule_fit
    assert fit["warmup_steps"] == 2
    err = capsys.readouterr().err
    assert "the 4,000-update warm-up does not fit a 20-update run: warming up over 2 updates instead" in err
    peak = NoamSchedule(8, 4000)(4000)
    lrs = [r["lr"] for r in _records(tmp_path) if "lr" in r]
    assert math.isclose(max(lrs), peak, rel_tol=1e-9) and math.isclose(lrs[1], peak, rel_tol=1e-9)
    assert lrs[0] < lrs[1] > lrs[-1]  # warm-up, peak, decay: all inside the run


def test_a_cosine_warmup_longer_than_max_steps_is_shortened(tmp_path, capsys):
    config = _config(tmp_path, schedule="cosine", d_model=None, peak_lr=1e-2, warmup_steps=500, max_steps=10)
    trainer = Trainer(make_model(), loss_fn, make_source(), config)
    trainer.train()
    assert trainer.schedule_fit["warmup_steps"] == 1 and trainer.schedule_fit["total_steps"] == 10
    lrs = [r["lr"] for r in _records(tmp_path) if "lr" in r]
    assert lrs[0] == pytest.approx(1e-2) and lrs[-1] < 1e-3
    assert "cosine decay to step 10" in capsys.readouterr().err


def test_the_chosen_schedule_is_stored_and_a_resume_continues_it(tmp_path):
    first = Trainer(make_model(), loss_fn, make_source(), _config(tmp_path, max_steps=20, warmup_steps=4000))
    first.train()
    # A longer run from the start would warm up over 4 updates; the resumed one keeps its 2.
    resumed = Trainer(make_model(), loss_fn, make_source(), _config(tmp_path, max_steps=40, warmup_steps=4000))
    resumed.train(resume=True)
    assert resumed.schedule_fit == first.schedule_fit
    expected = NoamSchedule(8, 2, first.schedule_fit["lr_scale"])
    lrs = {r["step"]: r["lr"] for r in _records(tmp_path) if "lr" in r}
    assert all(math.isclose(lrs[step], expected(step), rel_tol=1e-9) for step in range(1, 41))


def test_a_warmup_the_budget_cannot_reach_is_fitted_to_the_updates_it_buys(tmp_path, capsys):
    clock = _FakeClock()
    budget = Budget(1.0, clock=clock)  # 60 s at 1 s an update: about 60 updates
    trainer = Trainer(make_model(), _ticking(clock, 1.0), make_source(),
                      _config(tmp_path, max_steps=10_000, warmup_steps=4000), budget=budget)
    trainer.train()
    assert 55 <= trainer.step <= 62
    assert trainer.schedule_fit["warmup_steps"] == 6 and trainer.schedule_fit["at_step"] == 3
    assert "the 1-minute budget (about 60 updates at 1 s each)" in capsys.readouterr().err
    assert _records(tmp_path)[-1]["stopped"] == "max_minutes"


def test_a_schedule_that_fits_is_left_alone(tmp_path, capsys):
    clock = _FakeClock()
    trainer = Trainer(make_model(), _ticking(clock, 1.0), make_source(),
                      _config(tmp_path, max_steps=30, warmup_steps=4), budget=Budget(1.0, clock=clock))
    trainer.train()
    assert trainer.schedule_fit is None and "schedule:" not in capsys.readouterr().err
    lrs = {r["step"]: r["lr"] for r in _records(tmp_path) if "lr" in r}
    assert all(math.isclose(lrs[step], NoamSchedule(8, 4)(step), rel_tol=1e-12) for step in lrs)


def test_the_budget_object_decides_when_training_stops(tmp_path):
    clock = _FakeClock()
    trainer = Trainer(make_model(), _ticking(clock, 6.0), make_source(),
                      _config(tmp_path, max_steps=1000, max_minutes=500.0), budget=Budget(0.5, clock=clock))
    trainer.train()
    assert trainer.step == 5  # 30 s of a 30-second budget, whatever max_minutes says


# -- an honest last line ----------------------------------------------------------------------
def test_the_summary_is_the_mean_of_the_last_updates_and_a_short_run_validates_at_the_end(tmp_path):
    each = Trainer(make_model(), loss_fn, make_source(), _config(tmp_path / "each", max_steps=10, log_every=1))
    each.train()
    per_update = [r for r in _records(tmp_path / "each") if "loss" in r]
    tail = per_update[-4:]
    expected = sum(r["loss"] * r["tokens"] for r in tail) / sum(r["tokens"] for r in tail)

    trainer = Trainer(make_model(), loss_fn, make_source(), _config(tmp_path, max_steps=10, log_every=4,
                                                                     validate_every=100),
                      valid_batches=make_batches(2, seed=9))
    trainer.train()
    metrics = trainer.final_metrics()
    assert metrics["updates"] == 4 and math.isclose(metrics["loss"], expected, rel_tol=1e-9)
    assert metrics["valid_step"] == 10  # no validation was due in a 10-update run: one at the end
    records = _records(tmp_path)
    assert [r["step"] for r in records if "valid_loss" in r] == [10]
    line = trainer.summary(("loss", "valid_loss"), "nats per token")
    assert line.startswith("10 updates in ")
    assert f"loss {expected:.4f} (mean of the last 4 updates)" in line
    assert f"valid_loss {metrics['valid_loss']:.4f} (held-out, step 10) (nats per token)" in line


def test_a_budget_stop_logs_the_updates_since_the_last_log_line(tmp_path):
    clock = _FakeClock()
    trainer = Trainer(make_model(), _ticking(clock, 10.0), make_source(),
                      _config(tmp_path, max_steps=100, warmup_steps=2, log_every=5), budget=Budget(1.15, clock=clock))
    trainer.train()
    assert trainer.step == 7
    records = _records(tmp_path)
    assert [r["step"] for r in records if "loss" in r] == [5, 7]
    assert records[-1] == {**records[-1], "step": 7, "stopped": "max_minutes"}


# -- resume messages and the log --------------------------------------------------------------
def test_a_resume_says_so_and_a_finished_run_says_there_is_nothing_to_do(tmp_path, capsys):
    Trainer(make_model(), loss_fn, make_source(), _config(tmp_path, max_steps=4)).train()
    capsys.readouterr()
    trainer = Trainer(make_model(), loss_fn, make_source(), _config(tmp_path, max_steps=2))
    assert trainer.train(resume=True) == {"step": 4}
    err = capsys.readouterr().err
    assert "nothing to do" in err and "already at step 4" in err and "stops at 2 updates" in err


def test_a_resume_drops_the_log_lines_past_its_checkpoint(tmp_path):
    Trainer(make_model(), loss_fn, make_source(), _config(tmp_path, max_steps=4, checkpoint_every=2,
                                                          keep_last=None)).train()
    import shutil

    shutil.rmtree(tmp_path / "run" / "checkpoints" / "step_00000004")  # killed after logging 3 and 4
    with (tmp_path / "run" / "metrics.jsonl").open("a") as log:
        log.write("not a record of ours\n")
    Trainer(make_model(), loss_fn, make_source(), _config(tmp_path, max_steps=6)).train(resume=True)
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    steps = [json.loads(line)["step"] for line in lines if line.startswith("{")]
    assert steps == [1, 2, 3, 4, 5, 6]
    assert "not a record of ours" in lines


# -- a diverged run -----------------------------------------------------------------------------
def test_a_run_whose_last_update_diverged_is_an_error_not_a_result(tmp_path):
    calls = [0]

    def poisoned(model, batch):
        calls[0] += 1
        loss, tokens, logs = loss_fn(model, batch)
        return (loss * float("nan") if calls[0] >= 3 else loss), tokens, logs

    trainer = Trainer(make_model(), poisoned, make_source(), _config(tmp_path, max_steps=3))
    with pytest.warns(RuntimeWarning), pytest.raises(ValueError, match="diverged: the last update"):
        trainer.train()
    assert all(bool(torch.isfinite(p).all()) for p in trainer.model.parameters())


def test_a_non_finite_held_out_loss_is_a_diverged_run(tmp_path):
    class Exploding(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = make_model()

        def forward(self, tokens):  # infinite on the held-out batches only (2 rows; training has 3)
            logits = self.inner(tokens)
            return logits * float("inf") if tokens.shape[0] == 2 else logits

    with pytest.raises(ValueError, match="the held-out loss at step 3 is not finite"):
        Trainer(Exploding(), loss_fn, make_source(), _config(tmp_path, max_steps=3, validate_every=10),
                valid_batches=make_batches(1, batch_size=2)).train()


@pytest.mark.parametrize("lr, problem", [(1e30, "a NaN or infinite loss"), (1e5, "a loss of .* per token")])
def test_a_blow_up_in_the_last_update_is_caught_before_any_model_is_saved(tmp_path, lr, problem):
    # The first (and last) update's own loss is finite; the weights it leaves are not usable:
    # at lr 1e30 they give NaN, at 1e5 a finite loss over 10,000 times the starting one.
    config = _config(tmp_path, schedule="cosine", d_model=None, peak_lr=lr, warmup_steps=1, max_steps=1)
    with pytest.raises(ValueError, match=r"diverged: the weights after the last update \(step 1\) give " + problem):
        Trainer(make_model(), loss_fn, make_source(), config).train()
    assert not list_checkpoints(tmp_path / "run" / "checkpoints")


def test_the_progress_bar_counts_down_to_the_given_budget():
    from attnlab.training.progress import Progress

    clock = _FakeClock()
    budget = Budget(6.0, clock=clock)
    config = TrainConfig(out_dir="unused", max_steps=2000, d_model=8, warmup_steps=2, max_minutes=600)
    progress = Progress(config, initial=0, main=True, budget=budget)
    progress.bar.disable = False
    clock.now += 60.0  # a minute of the command went before training (data, vocabulary)
    started = 0.0
    progress.update({"loss": 2.0}, 1e-3, started, force=True)
    assert progress.bar.postfix.endswith("left=05:00") and "budget=6 min" in progress.bar.postfix
    progress.close()
