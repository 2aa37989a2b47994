"""Kill `attnlab train lm` with SIGKILL at random moments, again and again: every
checkpoint on disk must load, OUT/model (when there is one) must load, the log must stay
valid JSON lines, and a resume must continue. Slow (about two minutes): run it with
``pytest -m slow tests/reliability/test_fault_injection.py``."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import attnlab
from attnlab.data.text import load_lm_tokenizer
from attnlab.training import list_checkpoints, load_training_state

from .conftest import LM_TEXT

KILLS = 24
SEED = 2026


def _command(text: Path, out: Path, max_steps: int) -> list[str]:
    return [sys.executable, "-m", "attnlab.cli.main", "train", "lm", "--text", str(text), "--preset", "lm_tiny",
            "--context", "16", "--batch-size", "4", "--max-steps", str(max_steps), "--warmup", "1",
            "--val-every", "7", "--val-batches", "1", "--save-every", "3", "--out", str(out), "--resume",
            "--no-progress"]


def _check_everything_loads(out: Path) -> int:
    """Every file a run leaves must be readable; returns the latest checkpoint's step."""
    step = 0
    if not out.exists():  # killed before it wrote anything
        return step
    for checkpoint in list_checkpoints(out / "checkpoints"):
        step = load_training_state(checkpoint)["step"]
        attnlab.load_model(checkpoint)
        load_lm_tokenizer(checkpoint)
    if (out / "model").exists() or any(p.name.startswith(".model.") for p in out.iterdir()):
        attnlab.load_model(out / "model")  # repairs a half-done swap first
    metrics = out / "metrics.jsonl"
    if metrics.exists():
        lines = metrics.read_text(encoding="utf-8").split("\n")
        for line in lines[:-1]:  # the last piece may be a line the kill cut short
            json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in metrics.jsonl"))
    return step


@pytest.mark.slow
def test_random_kills_never_leave_a_broken_run(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text(LM_TEXT * 4, encoding="utf-8")
    out = tmp_path / "run"
    rng = random.Random(SEED)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    kills = completed = 0
    step = 0
    steps_seen = []
    while kills < KILLS:
        process = subprocess.Popen(_command(text, out, step + rng.randint(4, 40)), env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if rng.random() < 0.2:  # now and then during start-up, before anything is written
            time.sleep(rng.uniform(0.0, 2.0))
        else:  # mostly once training runs (start-up takes seconds): wait for a new checkpoint
            before = list_checkpoints(out / "checkpoints")
            deadline = time.monotonic() + 60
            while process.poll() is None and list_checkpoints(out / "checkpoints") == before \
                    and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.5))
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            kills += 1
        _, err = process.communicate()
        if process.returncode == 0:
            completed += 1
        else:
            assert process.returncode == -signal.SIGKILL, err.decode()
        step = max(step, _check_everything_loads(out))
        steps_seen.append(step)
    # A run without kills resumes from what is there and finishes.
    target = step + 10
    result = subprocess.run(_command(text, out, target), env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert load_training_state(list_checkpoints(out / "checkpoints")[-1])["step"] == target
    _check_everything_loads(out)
    leftovers = [p.name for p in [*out.iterdir(), *(out / "checkpoints").iterdir()] if ".tmp-" in p.name
                 or ".old-" in p.name]
    assert leftovers == []
    # Most kills must land while training and checkpointing, not all during start-up.
    advanced = sum(b > a for a, b in zip([0, *steps_seen], steps_seen))
    assert advanced >= KILLS // 2, steps_seen
    print(f"{kills} kills, {completed} runs that finished before their kill, {advanced} runs that advanced the "
          f"latest checkpoint; steps after each run {steps_seen}; final step {target}")
