"""The learning-rate schedules: the paper's values, step counting, torch integration."""

import json
import math

import pytest
import torch

from attnlab.training.schedules import NoamSchedule, ScheduledLR, WarmupCosineSchedule


@pytest.mark.parametrize(
    ("step", "expected"),
    [(1, 1.7469e-7), (4000, 6.9877e-4), (100_000, 1.3975e-4)],
)
def test_noam_matches_the_paper_values(step, expected):
    schedule = NoamSchedule(d_model=512, warmup_steps=4000, scale=1.0)
    assert schedule(step) == pytest.approx(expected, rel=1e-4)


def test_noam_peaks_at_warmup_and_scales_linearly():
    schedule = NoamSchedule(d_model=512, warmup_steps=4000)
    assert schedule(3999) < schedule(4000) > schedule(4001)
    assert NoamSchedule(512, 4000, scale=2.0)(123) == pytest.approx(2 * schedule(123))


def test_noam_rejects_step_zero_and_bad_arguments():
    with pytest.raises(ValueError, match="step"):
        NoamSchedule(512)(0)
    with pytest.raises(ValueError, match="d_model"):
        NoamSchedule(0)
    with pytest.raises(ValueError, match="warmup_steps"):
        NoamSchedule(512, warmup_steps=0)
    with pytest.raises(ValueError, match="scale"):
        NoamSchedule(512, scale=-1.0)


def test_warmup_cosine_shape():
    schedule = WarmupCosineSchedule(peak_lr=1e-3, warmup_steps=10, total_steps=110, min_lr=1e-5)
    assert schedule(1) == pytest.approx(1e-4)
    assert schedule(10) == pytest.approx(1e-3)
    assert schedule(60) == pytest.approx(1e-5 + 0.5 * (1e-3 - 1e-5))  # half-way through the decay
    assert schedule(110) == pytest.approx(1e-5)
    assert schedule(500) == pytest.approx(1e-5)
    values = [schedule(s) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(values, values[1:]))


def test_warmup_cosine_rejects_bad_arguments():
    with pytest.raises(ValueError, match="warmup_steps"):
        WarmupCosineSchedule(1e-3, warmup_steps=20, total_steps=10)
    with pytest.raises(ValueError, match="min_lr"):
        WarmupCosineSchedule(1e-3, 1, 10, min_lr=1.0)


def _optimizer():
    return torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], lr=123.0)


def test_scheduled_lr_counts_the_first_update_as_step_one():
    schedule = NoamSchedule(512, 4000)
    optimizer = _optimizer()
    scheduler = ScheduledLR(optimizer, schedule)
    for step in range(1, 6):
        # The lr in the optimizer is the one the coming update (number `step`) uses.
        assert optimizer.param_groups[0]["lr"] == schedule(step)
        optimizer.step()
        scheduler.step()


def test_schedules_fit_lambda_lr_with_base_lr_one():
    schedule = WarmupCosineSchedule(1e-3, 3, 10)
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda index: schedule(index + 1))
    for step in range(1, 8):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(schedule(step))
        optimizer.step()
        scheduler.step()


def test_scheduled_lr_state_is_json_and_resumes():
    schedule = NoamSchedule(64, 10)
    optimizer = _optimizer()
    scheduler = ScheduledLR(optimizer, schedule)
    for _ in range(7):
        optimizer.step()
        scheduler.step()
    state = json.loads(json.dumps(scheduler.state_dict()))

    resumed_optimizer = _optimizer()
    resumed = ScheduledLR(resumed_optimizer, schedule)
    resumed_optimizer.load_state_dict(optimizer.state_dict())
    resumed.load_state_dict(state)
    resumed_optimizer.step()
    resumed.step()
    optimizer.step()
    scheduler.step()
    assert resumed_optimizer.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"] == schedule(9)
    assert math.isclose(resumed.get_last_lr()[0], schedule(9))


def test_scheduled_lr_rejects_incomplete_state():
    with pytest.raises(ValueError, match="last_epoch"):
        ScheduledLR(_optimizer(), NoamSchedule(8)).load_state_dict({"_step_count": 1, "_last_lr": [0.1]})
