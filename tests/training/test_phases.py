"""attnlab.training.phases: how a command spends --max-minutes, driven by a fake clock."""

import pytest
import torch

from attnlab.data.images import ImageSet
from attnlab.training import phases
from attnlab.training.phases import Scoring, budget_plan, command_budget, portion, scoring_reserve, take, train_within


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(phases, "clock", fake)
    return fake


def test_command_budget_names_the_flag_and_runs_on_the_module_clock(clock):
    for bad in (0, -1.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="--max-minutes"):
            command_budget(bad)
    budget = command_budget(2)
    clock.advance(30)
    assert budget.left() == 90 and budget.elapsed() == 30
    assert command_budget(None).left() is None


def test_a_portion_is_a_share_of_the_whole_budget_capped_at_what_is_left(clock):
    budget = command_budget(1)  # 60 s
    clock.advance(30)
    part = portion(budget, 0.2)  # 20 % of the whole: 12 s, although 30 s are left
    assert part.left() == pytest.approx(12)
    clock.advance(12)
    assert part.spent() and not budget.spent()
    clock.advance(15)  # 3 s left
    assert portion(budget, 0.5).left() == pytest.approx(3)  # capped
    clock.advance(5)
    assert portion(budget, 0.5).spent()
    assert portion(command_budget(None), 0.2).left() is None
    assert scoring_reserve(budget) == pytest.approx(6) and scoring_reserve(command_budget(None)) == 0


def scored_by(scoring, clock, seconds_per_item):
    seen = []
    for index in scoring:
        seen += index.tolist()
        clock.advance(seconds_per_item * len(index))
    return seen


def test_scoring_without_a_budget_scores_everything_in_order(clock):
    scoring = Scoring("test", 25, unit="image", batch_size=10, budget=command_budget(None), progress=False)
    assert scored_by(scoring, clock, 100.0) == list(range(25))
    assert not scoring.cut and scoring.summary("images") == "25 images"
    assert scoring.record()["scored"] == 25 and scoring.record()["total"] == 25


def test_scoring_stops_before_a_batch_that_would_not_fit_and_says_so(clock):
    budget = command_budget(1)
    clock.advance(50)  # training took 50 s; 10 s are left
    scoring = Scoring("test bits/dim", 100, unit="image", batch_size=10, budget=budget, progress=False)
    seen = scored_by(scoring, clock, 0.3)  # 3 s a batch: three fit in 10 s, a fourth would end at 12 s
    assert len(seen) == 30 and scoring.scored == 30 and scoring.cut
    assert clock.now - budget.started <= 60
    assert sorted(seen) != list(range(30)) and len(set(seen)) == 30  # a random sample, not the first 30
    assert torch.equal(scoring.indices(), torch.tensor(seen))
    assert scoring.summary("images") == "30 of 100 images (a random sample: the time budget ran out)"
    assert scoring.record()["cut_by_budget"] and scoring.record()["total"] == 100
    # The same order every time (the sample does not depend on the run).
    again = Scoring("test", 100, unit="image", batch_size=10, budget=command_budget(1), progress=False)
    assert next(iter(again)).tolist() == seen[:10]


def test_scoring_does_one_batch_even_when_the_budget_is_spent(clock):
    budget = command_budget(1)
    clock.advance(75)
    scoring = Scoring("test", 100, unit="image", batch_size=8, budget=budget, progress=False)
    assert len(scored_by(scoring, clock, 0.01)) == 8 and scoring.cut


def test_a_small_first_batch_is_the_least_a_spent_budget_scores(clock):
    budget = command_budget(1)
    clock.advance(59.5)  # half a second left
    scoring = Scoring("fidelity", 100, unit="prompt", batch_size=64, first_batch=16, budget=budget, progress=False)
    assert len(scored_by(scoring, clock, 0.01)) == 16 and scoring.cut  # 0.16 s, then 64 x 0.01 s > 0.34 s left
    unlimited = Scoring("fidelity", 100, unit="prompt", batch_size=64, first_batch=16, progress=False)
    assert [len(index) for index in unlimited] == [16, 64, 20]


def test_scoring_that_fits_scores_everything(clock):
    scoring = Scoring("test", 40, unit="image", batch_size=10, budget=command_budget(1), progress=False)
    assert sorted(scored_by(scoring, clock, 0.1)) == list(range(40)) and not scoring.cut
    assert scoring.summary("images") == "40 images"


class _Config:
    max_minutes = None


class _Trainer:
    """What train_within uses of a Trainer: its config and train()."""

    def __init__(self):
        self.config = _Config()
        self.resumed = None

    def train(self, *, resume=False):
        self.resumed = resume
        return {"step": 1}


def test_train_within_gives_the_trainer_what_is_left_less_the_reserve(clock):
    budget = command_budget(2)
    clock.advance(30)  # loading
    said = []
    trainer = _Trainer()
    assert train_within(trainer, budget, reserve=12, resume=True, say=said.append) == {"step": 1}
    assert trainer.config.max_minutes == pytest.approx((120 - 30 - 12) / 60, abs=1e-4) and trainer.resumed
    assert said == ["training: up to 1 min 18 s of the budget (30 s of it already spent; 12 s kept for scoring)"]
    clock.advance(100)  # nothing left: the trainer still makes one update
    trainer = _Trainer()
    train_within(trainer, budget, reserve=12)
    assert 0 < trainer.config.max_minutes <= 1e-3
    trainer = _Trainer()
    train_within(trainer, command_budget(None), reserve=12)
    assert trainer.config.max_minutes is None


def test_budget_plan_states_the_split(clock):
    assert budget_plan(command_budget(None), scoring="x") is None
    plan = budget_plan(command_budget(2), parts=[("the VQ-VAE", 0.2)], main="the model", scoring="fidelity")
    assert plan.startswith("time budget: 2 min for the whole command: the VQ-VAE up to 24 s (20 %); the model: "
                           "the rest less the last 12 s (10 %), kept for fidelity")
    assert "outside it:" in plan


def test_take_indexes_every_per_item_field_and_keeps_the_classes():
    data = ImageSet("x", "test", torch.arange(4).view(4, 1, 1, 1).to(torch.uint8), torch.tensor([0, 1, 0, 1]),
                    ["a", "b", "c", "d"])  # as many classes as images: classes must not be indexed
    part = take(data, torch.tensor([3, 0]))
    assert part.images.flatten().tolist() == [3, 0] and part.labels.tolist() == [1, 0]
    assert part.classes == ["a", "b", "c", "d"] and len(part) == 2
