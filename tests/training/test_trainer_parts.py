"""The Trainer's parts on their own (issue 37: the trainer split into named parts): the metrics
log's repair, the run clock, schedule fitting, stop signals, the recent updates' means and the
settings a resume compares. The Trainer's own tests (test_trainer*.py) cover them composed."""

from __future__ import annotations

import json
import math
import os
import signal

import pytest

from attnlab.training.budget import Budget
from attnlab.training.checkpoint import RESUME_FREE, changed_settings
from attnlab.training.distributed import DistributedContext
from attnlab.training.metrics_log import METRICS_FILE, MetricsLog, drop_partial_line, drop_records_after
from attnlab.training.run_budget import RunClock, fit_warmup
from attnlab.training.run_signals import StopSignals
from attnlab.training.schedules import NoamSchedule
from attnlab.training.sums import RecentUpdates, Sums
from attnlab.training.train_config import TrainConfig


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# -- metrics.jsonl ---------------------------------------------------------------------------
def test_opening_the_log_drops_records_past_the_step_and_the_partial_line_keeping_other_lines(tmp_path):
    lines = [json.dumps({"step": s, "loss": 1.0}) for s in (1, 2, 3, 4)] + ["# a note", json.dumps({"step": "x"})]
    path = tmp_path / METRICS_FILE
    path.write_text("\n".join(lines) + '\n{"step": 5, "lo')  # a killed run's half line
    log = MetricsLog(tmp_path, tensorboard=False)
    log.open(step=2)
    log.write({"step": 3, "loss": 0.5})
    log.close()
    text = path.read_text().splitlines()
    assert text[:4] == [lines[0], lines[1], "# a note", lines[5]]  # steps 3 and 4 gone, the rest kept in order
    assert json.loads(text[4])["step"] == 3 and "time" in json.loads(text[4]) and len(text) == 5


def test_a_log_with_nothing_to_drop_is_not_rewritten(tmp_path):
    path = tmp_path / METRICS_FILE
    path.write_text(json.dumps({"step": 1}) + "\n")
    inode = path.stat().st_ino
    fd = os.open(path, os.O_RDWR | os.O_APPEND)
    try:
        drop_partial_line(fd)
        assert drop_records_after(fd, path, 1) is False
    finally:
        os.close(fd)
    assert path.stat().st_ino == inode and path.read_text() == json.dumps({"step": 1}) + "\n"


def test_a_non_finite_figure_is_written_as_null_and_a_closed_log_writes_nothing(tmp_path):
    log = MetricsLog(tmp_path, tensorboard=False)
    log.write({"step": 1, "loss": 1.0})  # not open: nothing
    assert not (tmp_path / METRICS_FILE).exists()
    log.open()
    log.write({"step": 1, "loss": math.nan})
    log.close()
    assert json.loads((tmp_path / METRICS_FILE).read_text())["loss"] is None


def test_the_log_is_never_written_through_a_symlink(tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_text("yours\n")
    (tmp_path / METRICS_FILE).symlink_to(target)
    with pytest.raises(OSError):
        MetricsLog(tmp_path, tensorboard=False).open()
    assert target.read_text() == "yours\n"


# -- the run clock and schedule fitting ------------------------------------------------------------
def test_the_run_clock_counts_max_minutes_from_its_start_and_times_checkpoints():
    clock = FakeClock()
    run = RunClock(None, 1.0, 0.5, clock)
    clock.now += 60.0
    assert run.seconds_left() == 0.0 and not run.out_of_time()  # past it, not at it
    assert run.checkpoint_due(clock.now - 30.0) and not run.checkpoint_due(clock.now - 29.0)  # at it
    clock.now += 1e-6
    assert run.out_of_time() and run.minutes == 1.0
    unlimited = RunClock(None, None, None, clock)
    assert unlimited.seconds_left() is None and not unlimited.out_of_time() and not unlimited.checkpoint_due(0.0)


def test_a_given_budget_decides_on_its_own_clock():
    budget_clock, own = FakeClock(0.0), FakeClock(5000.0)
    run = RunClock(Budget(2.0, clock=budget_clock), 0.001, None, own)
    own.now += 3600.0  # max_minutes is ignored under a budget
    assert not run.out_of_time() and run.seconds_left() == 120.0 and run.minutes == 2.0
    budget_clock.now += 120.0
    assert run.out_of_time() and run.budget_clock() == 120.0


def test_a_noam_warmup_that_does_not_fit_keeps_its_peak_and_a_cosine_one_decays_over_the_run():
    noam = TrainConfig(out_dir="x", max_steps=50, d_model=64, warmup_steps=4000, lr_scale=2.0)
    fit, line = fit_warmup(noam, 50, "a 50-update run", step=0)
    assert fit["warmup_steps"] == 5 and fit["at_step"] == 0 and fit["total_steps"] == 50
    before, after = NoamSchedule(64, 4000, 2.0)(4000), NoamSchedule(64, 5, fit["lr_scale"])(5)
    assert after == pytest.approx(before, rel=1e-12)
    assert line == (f"schedule: the 4,000-update warm-up does not fit a 50-update run: warming up over 5 updates "
                    f"instead, peak learning rate {before:.3g} kept (Noam)")
    cosine = TrainConfig(out_dir="x", max_steps=1000, schedule="cosine", peak_lr=1e-3, warmup_steps=500)
    fit, _ = fit_warmup(cosine, 300, "the budget", step=3)
    assert (fit["warmup_steps"], fit["total_steps"], fit["at_step"]) == (30, 300, 3)
    assert fit_warmup(cosine, 500, "a run as long as its warm-up", step=0) is None
    assert fit_warmup(cosine, 5, "a tiny run", step=0)[0]["warmup_steps"] == 1  # at least one update


# -- stop signals ----------------------------------------------------------------------------------
class Stop(Exception):
    pass


def test_a_first_signal_asks_to_stop_a_second_stops_at_once_and_the_old_handlers_come_back(capsys):
    before = signal.getsignal(signal.SIGTERM)
    signals = StopSignals(DistributedContext(), lambda number: Stop(number))
    with pytest.raises(Stop) as caught:
        with signals.installed():
            assert signals.number is None
            os.kill(os.getpid(), signal.SIGTERM)
            assert signals.number == signal.SIGTERM
            assert signals.agree(False, True) == (False, True, True)
            os.kill(os.getpid(), signal.SIGINT)
    assert caught.value.args == (signal.SIGINT,)
    assert signal.getsignal(signal.SIGTERM) is before
    assert "SIGTERM received: stopping after this update" in capsys.readouterr().err
    with signals.installed():  # a new call starts with no stop asked
        assert signals.number is None and signals.agree(True, False) == (True, False, False)


# -- sums and resume -----------------------------------------------------------------------------------
def test_the_recent_means_leave_out_non_finite_and_empty_updates_and_keep_the_last_ones():
    recent = RecentUpdates(3)
    assert recent.means() == {}
    for loss, tokens in ((100.0, 10), (2.0, 1), (math.inf, 4), (0.0, 0), (6.0, 2)):
        recent.add(Sums(tokens, loss, {"nll": loss}))
    means = recent.means()  # the last three: inf (left out), empty (left out), 6 over 2
    assert means == {"loss": 3.0, "nll": 3.0, "ppl": math.exp(3.0), "updates": 1}


def test_a_resume_names_changed_settings_and_data_but_not_free_ones_or_a_tuple_stored_as_a_list():
    saved = TrainConfig(out_dir="a", max_steps=10, d_model=8, lr_scale=1.0).to_dict()
    saved = json.loads(json.dumps(saved))  # as stored: betas is a list there
    now = TrainConfig(out_dir="b", max_steps=99, d_model=8, lr_scale=2.0, log_every=7).to_dict()
    assert {"out_dir", "max_steps", "log_every"} <= RESUME_FREE
    assert changed_settings(now, saved, {"data": "x", "new": 1}, {"data": "y"}) == ["lr_scale 1.0 -> 2.0",
                                                                                   "data 'y' -> 'x'"]
    assert changed_settings(now, None, None, {"data": "y"}) == []
