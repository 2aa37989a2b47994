"""The training loop: the update rule, accumulation, logging, checkpoints and exact resume."""

import copy
import json
import time

import pytest
import torch

from attnlab.training import ListBatchSource, NoamSchedule, TrainConfig, Trainer, list_checkpoints
from attnlab.training.checkpoint import load_model_weights

from ._toys import PAD, loss_fn, make_batches, make_model, make_source


def _config(tmp_path, **overrides):
    settings = dict(out_dir=str(tmp_path), max_steps=4, d_model=8, warmup_steps=2, log_every=1, progress_bar=False)
    settings.update(overrides)
    return TrainConfig(**settings)


def _parameters(model):
    return [p.detach().clone() for p in model.parameters()]


def test_one_update_is_adam_on_the_token_normalised_loss(tmp_path):
    batches = make_batches(2, seed=4)
    model = make_model(seed=1)
    reference = copy.deepcopy(model).double()
    source = ListBatchSource(batches, shuffle=False)
    # (warm-up 1: a longer one would not fit this one-update run and be shortened to it)
    Trainer(model, loss_fn, source, _config(tmp_path, max_steps=1, warmup_steps=1, grad_accum_steps=2)).train()

    # By hand, in float64: the mean over all target tokens of both micro-batches, then one
    # Adam step at lr(1) written out (bias-corrected moments, eps outside the square root).
    lr, (beta1, beta2), eps = NoamSchedule(8, 1)(1), (0.9, 0.98), 1e-9
    sums = [loss_fn(reference, batch) for batch in batches]
    (sum(s[0] for s in sums) / sum(s[1] for s in sums)).backward()
    for trained, start in zip(model.parameters(), reference.parameters()):
        grad = start.grad
        m_hat = (1 - beta1) * grad / (1 - beta1)
        v_hat = (1 - beta2) * grad * grad / (1 - beta2)
        expected = start.detach() - lr * m_hat / (v_hat.sqrt() + eps)
        # The trainer works in float32: allow a few float32 rounding steps of the values
        # involved (the parameter and the step), which no machine's summation order exceeds
        # and which is far below any change of rule (a wrong lr or moment is >1e-3 off here).
        tolerance = 8 * torch.finfo(torch.float32).eps * (expected.abs() + lr)
        assert ((trained.double() - expected).abs() <= tolerance).all()


def test_accumulated_micro_batches_equal_one_big_batch(tmp_path):
    first, second = make_batches(2, seed=6)
    merged = {key: torch.cat([first[key], second[key]]) for key in first}
    accumulated, whole = make_model(seed=3), make_model(seed=3)
    Trainer(accumulated, loss_fn, ListBatchSource([first, second], shuffle=False),
            _config(tmp_path / "a", max_steps=3, grad_accum_steps=2)).train()
    Trainer(whole, loss_fn, ListBatchSource([merged], shuffle=False),
            _config(tmp_path / "b", max_steps=3, grad_accum_steps=1)).train()
    for a, b in zip(accumulated.parameters(), whole.parameters()):
        assert torch.allclose(a, b, atol=1e-6, rtol=0)


def _run(out_dir, max_steps, *, resume=False, seed=0, model_seed=0):
    """A run with everything that carries state: dropout, shuffling across epochs,
    accumulation, clipping, validation and periodic checkpoints."""
    model = make_model(seed=model_seed, dropout=0.2)
    config = TrainConfig(
        out_dir=str(out_dir), max_steps=max_steps, d_model=8, warmup_steps=3, grad_accum_steps=2,
        clip_grad_norm=0.5, log_every=2, validate_every=2, checkpoint_every=3, keep_last=2,
        seed=seed, progress_bar=False,
    )
    trainer = Trainer(model, loss_fn, make_source(count=5), config, valid_batches=make_batches(2, seed=9))
    trainer.train(resume=resume)
    return model, trainer


def test_resume_is_bit_identical(tmp_path):
    straight, straight_trainer = _run(tmp_path / "straight", 6)
    _run(tmp_path / "split", 3)
    # A differently initialised model proves the weights come from the checkpoint.
    resumed, resumed_trainer = _run(tmp_path / "split", 6, resume=True, model_seed=123)
    for a, b in zip(straight.parameters(), resumed.parameters()):
        assert torch.equal(a, b)
    assert resumed_trainer.step == 6
    assert straight_trainer.train_batches.state_dict() == resumed_trainer.train_batches.state_dict()
    straight_adam = straight_trainer.optimizer.state_dict()["state"]
    for index, state in resumed_trainer.optimizer.state_dict()["state"].items():
        assert torch.equal(state["exp_avg_sq"], straight_adam[index]["exp_avg_sq"])
    # The comparison is sensitive to the random state: another seed gives other dropout masks.
    other_seed, _ = _run(tmp_path / "other", 6, seed=1)
    assert not all(torch.equal(a, b) for a, b in zip(straight.parameters(), other_seed.parameters()))


def test_resume_without_a_checkpoint_starts_fresh_and_a_finished_run_stays_finished(tmp_path):
    fresh, _ = _run(tmp_path / "a", 3, resume=True)
    again, trainer = _run(tmp_path / "a", 3, resume=True, model_seed=7)
    assert trainer.step == 3
    for a, b in zip(fresh.parameters(), again.parameters()):
        assert torch.equal(a, b)


def test_metrics_log_and_checkpoints(tmp_path):
    model = make_model()
    config = _config(tmp_path, max_steps=5, log_every=2, validate_every=4, checkpoint_every=2, keep_last=2)
    result = Trainer(model, loss_fn, make_source(), config, valid_batches=make_batches(2),
                     model_config={"family": "toy"}).train()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train_steps = [r["step"] for r in records if "loss" in r]
    valid_steps = [r["step"] for r in records if "valid_loss" in r]
    assert train_steps == [2, 4, 5] and valid_steps == [4]
    assert {"loss", "nll", "ppl", "lr", "tokens", "tokens_per_s"} <= set(records[0])
    assert {"valid_loss", "valid_nll", "valid_ppl"} <= set(records[2])
    assert result["step"] == 5 and result["loss"] == records[-1]["loss"]
    # Every 2 steps plus the final step, pruned to the last two; each is a model directory.
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")] == ["step_00000004", "step_00000005"]
    final = tmp_path / "checkpoints" / "step_00000005"
    assert json.loads((final / "config.json").read_text()) == {"family": "toy"}
    reloaded = make_model(seed=8)
    load_model_weights(final, reloaded)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), reloaded.parameters()))


def test_perplexity_is_exp_of_the_token_mean_nll(tmp_path):
    trainer = Trainer(make_model(), loss_fn, make_source(), _config(tmp_path), valid_batches=make_batches(3))
    valid = trainer.validate()
    assert valid["valid_ppl"] == pytest.approx(torch.tensor(valid["valid_nll"]).exp().item())


def test_cosine_schedule_bf16_and_clipping(tmp_path):
    config = _config(tmp_path, schedule="cosine", d_model=None, peak_lr=1e-2, warmup_steps=2, max_steps=4,
                     bf16=True, clip_grad_norm=1.0)
    result = Trainer(make_model(), loss_fn, make_source(), config).train()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["lr"] for r in records] == pytest.approx([5e-3, 1e-2, 5e-3, 0.0], abs=1e-12)
    assert "grad_norm" in result and torch.isfinite(torch.tensor(result["loss"]))


@pytest.mark.parametrize(
    ("overrides", "name"),
    [
        ({"max_steps": 0}, "max_steps"),
        ({"grad_accum_steps": 0}, "grad_accum_steps"),
        ({"checkpoint_every": 0}, "checkpoint_every"),
        ({"schedule": "linear"}, "schedule"),
        ({"d_model": None}, "d_model"),
        ({"schedule": "cosine"}, "peak_lr"),
        ({"betas": (0.9, 1.0)}, "betas"),
        ({"clip_grad_norm": 0.0}, "clip_grad_norm"),
        ({"warmup_steps": 0}, "warmup_steps"),
        ({"max_minutes": 0.0}, "max_minutes"),
    ],
)
def test_config_errors_name_the_field(tmp_path, overrides, name):
    with pytest.raises(ValueError, match=name):
        _config(tmp_path, **overrides)


def test_trainer_errors(tmp_path):
    with pytest.raises(ValueError, match="train_batches"):
        Trainer(make_model(), loss_fn, make_batches(2), _config(tmp_path))
    with pytest.raises(ValueError, match="valid_batches"):
        Trainer(make_model(), loss_fn, make_source(), _config(tmp_path, validate_every=1))
    empty = make_batches(1)
    empty[0]["target"].fill_(PAD)
    with pytest.raises(ValueError, match="no target tokens"):
        Trainer(make_model(), loss_fn, ListBatchSource(empty), _config(tmp_path)).train()


def test_a_model_config_is_taken_from_the_model_when_it_has_one(tmp_path):
    class Config:
        def to_dict(self):
            return {"family": "toy", "dim": 8}

    model = make_model()
    model.config = Config()
    Trainer(model, loss_fn, make_source(), _config(tmp_path, max_steps=1)).train()
    saved = tmp_path / "checkpoints" / "step_00000001" / "config.json"
    assert json.loads(saved.read_text()) == {"family": "toy", "dim": 8}


def test_a_fresh_run_refuses_an_out_dir_with_checkpoints(tmp_path):
    _run(tmp_path, 3)
    with pytest.raises(ValueError, match="resume=True"):
        _run(tmp_path, 6)


def test_max_minutes_stops_early_with_a_checkpoint_and_resume_gets_a_new_budget(tmp_path):
    def slow_loss(model, batch):
        time.sleep(0.05)
        return loss_fn(model, batch)

    config = _config(tmp_path, max_steps=1000, max_minutes=0.15 / 60, checkpoint_every=500)
    trainer = Trainer(make_model(seed=2), slow_loss, make_source(), config)
    trainer.train()
    assert 1 <= trainer.step < 20
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")] == [f"step_{trainer.step:08d}"]
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["stopped"] == "max_minutes" and records[-1]["step"] == trainer.step
    first = trainer.step
    resumed = Trainer(make_model(seed=2), slow_loss, make_source(), config)
    resumed.train(resume=True)
    assert first < resumed.step < first + 20


def test_tune_allocator_is_applied_once_and_can_be_switched_off(monkeypatch):
    import platform
    import sys

    from attnlab.training import allocator

    monkeypatch.setattr(allocator, "_tuned", None)
    monkeypatch.setenv("ATTNLAB_NO_MALLOC_TUNING", "1")
    assert allocator.tune_allocator() is False
    monkeypatch.setattr(allocator, "_tuned", None)
    monkeypatch.delenv("ATTNLAB_NO_MALLOC_TUNING")
    applied = allocator.tune_allocator()
    assert applied is (sys.platform.startswith("linux") and allocator._tuned)
    if sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc":
        assert applied is True  # this is where it must work
    assert allocator.tune_allocator() is applied  # idempotent


def test_progress_time_left_is_the_sooner_of_the_budget_and_the_steps(monkeypatch):
    from attnlab.training import progress as progress_module
    from attnlab.training.progress import Progress

    clock = [1000.0]
    monkeypatch.setattr(progress_module.time, "perf_counter", lambda: clock[0])
    config = TrainConfig(out_dir="unused", max_steps=2000, d_model=8, warmup_steps=2, max_minutes=6)
    progress = Progress(config, initial=0, main=True)
    progress.bar.disable = False  # measure the figures even where stderr is not a terminal
    started = clock[0]
    for _ in range(100):  # 100 steps in 60 s: 1,900 more would take 19 minutes; the budget has 5 left
        clock[0] += 0.6
        progress.update({"loss": 2.0, "tokens_per_s": 100.0}, 1e-3, started)
    assert progress.bar.postfix.endswith("left=05:00") and "budget=6 min" in progress.bar.postfix
    config = TrainConfig(out_dir="unused", max_steps=150, d_model=8, warmup_steps=2, max_minutes=60)
    progress = Progress(config, initial=0, main=True)
    progress.bar.disable = False
    started = clock[0]
    for _ in range(100):  # 50 steps left at 0.6 s each: 30 s, well inside the hour
        clock[0] += 0.6
        progress.update({"loss": 2.0}, 1e-3, started)
    assert progress.bar.postfix.endswith("left=00:30")
    progress.close()
