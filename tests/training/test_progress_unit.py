"""The progress bar names what the loss counts (issue 39, point 21: image trainers said tok/s)."""

import time

import pytest

from attnlab.training.progress import Progress
from attnlab.training.trainer import TrainConfig, TrainConfigError


@pytest.mark.parametrize("unit", ["tok", "images", "sub-pixels"])
def test_the_rate_is_shown_in_the_configured_unit(tmp_path, unit):
    config = TrainConfig(out_dir=str(tmp_path), max_steps=5, schedule="cosine", peak_lr=1e-3, progress_unit=unit)
    progress = Progress(config, initial=0, main=True)
    try:
        progress.update({"loss": 1.0, "tokens_per_s": 12.0}, lr=1e-3, started=time.perf_counter() - 1.0, force=True)
        assert progress.bar.postfix.split(", ")[2] == f"{unit}/s=12"
    finally:
        progress.close()


def test_the_default_is_tokens_and_a_unit_is_a_name(tmp_path):
    assert TrainConfig(out_dir=str(tmp_path), max_steps=1, schedule="cosine", peak_lr=1e-3).progress_unit == "tok"
    with pytest.raises(TrainConfigError, match="progress_unit"):
        TrainConfig(out_dir=str(tmp_path), max_steps=1, schedule="cosine", peak_lr=1e-3, progress_unit="")
