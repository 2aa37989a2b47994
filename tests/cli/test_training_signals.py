"""Ctrl-C (SIGINT) and SIGTERM keep the work, for every training verb: a real signal once
`attnlab train ...` trains; it exits 130 (143), says where the checkpoint is and the exact
command that resumes it; `--resume` continues from that step (text-to-image, which cannot
resume, says so). Each verb trains a tiny model.

One test signals a separate `attnlab` process (the exit status and stderr of a real
command); the others run the verb in this process and a watcher thread signals this
process once the training loop has begun (the same handlers, without paying the start-up of
a new Python and torch per verb)."""

from __future__ import annotations

import json
import os
import random
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from attnlab.cli.main import main

STARTUP_SECONDS = 240  # the time a loaded 2-core machine may need to import and reach the loop
FOREVER = "100000"  # --max-steps that no test waits for


def _shell_sigint() -> None:
    """In the child before exec: SIGINT at its default, as a shell starts a program (a test
    worker may have it ignored, and an ignored signal is inherited)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for label, name in enumerate(("left", "right")):
        (root / name).mkdir()
        for i in range(12):
            pixels = rng.integers(0, 60, (8, 8))
            pixels[:, 4 * label:4 * label + 4] += 180
            Image.fromarray(pixels.astype(np.uint8)).save(root / name / f"{i}.png")
    return root


@pytest.fixture(scope="module")
def lm_text(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("text") / "text.txt"
    path.write_text("the quick brown fox jumps over the lazy dog.\nROMEO: a dog, a fox and the end.\n" * 12,
                    encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def midi_folder(tmp_path_factory) -> Path:
    from attnlab.data import music

    root = tmp_path_factory.mktemp("midi")
    rng = random.Random(0)
    for piece in range(5):
        notes = [music.Note(rng.choice([60, 62, 64, 65, 67]), i * 0.25, i * 0.25 + 0.2, rng.randint(40, 100))
                 for i in range(30)]
        music.write_midi(notes, root / f"piece{piece}.mid")
    return root


@pytest.fixture(scope="module")
def coco(tmp_path_factory) -> Path:
    from attnlab.data.images import to_bytes_png
    from attnlab.data.scenes import load_scenes

    root = tmp_path_factory.mktemp("coco")
    scenes = load_scenes("valid", count=24)
    (root / "images").mkdir()
    images, notes = [], []
    for i, (image, captions) in enumerate(zip(scenes.images, scenes.captions)):
        (root / "images" / f"{i:03d}.png").write_bytes(to_bytes_png(image))
        images.append({"id": i, "file_name": f"{i:03d}.png"})
        notes += [{"image_id": i, "caption": c} for c in captions]
    (root / "captions.json").write_text(json.dumps({"images": images, "annotations": notes}))
    return root


COMMON = ["--no-progress", "--threads", "1"]
TINY_VIT = ["--preset", "vit_tiny_patch4_28", "--set", "num_layers=1", "--set", "d_model=16", "--set", "num_heads=2",
            "--set", "d_ff=32", "--batch-size", "8", "--val-every", "0", "--device", "cpu", "--warmup", "1"]
TINY_IMAGE = ["--set", "num_layers=1", "--set", "d_model=16", "--set", "num_heads=2", "--set", "d_ff=24",
              "--batch-size", "4", "--val-every", "0", "--device", "cpu", "--warmup", "1"]
TINY_MUSIC = ["--preset", "music_performance_small", "--set", "num_layers=1", "--set", "d_model=16",
              "--set", "num_heads=2", "--set", "d_ff=32", "--context", "32", "--batch-size", "4", "--val-every", "0",
              "--val-batches", "1", "--device", "cpu", "--warmup", "1"]
TINY_CAPTION = ["--preset", "captioner_tiny", "--set", "max_positions=12", "--batch-size", "8", "--val-every", "0",
                "--device", "cpu", "--warmup", "1", "--beam", "1"]
TINY_T2I = ["--train-images", "60", "--vqvae-preset", "vqvae_tiny", "--vqvae-steps", FOREVER,
            "--classifier-steps", "2", "--reader-images", "20", "--preset", "text_to_image_tiny", "--set", "grid=8",
            "--set", "text_length=24", "--max-steps", "2", "--eval-prompts", "2", "--device", "cpu"]


def _command(verb: str, out: Path, max_steps: str, data: dict[str, Path]) -> list[str]:
    """`attnlab train VERB ...` for a tiny model that trains ``max_steps`` updates into ``out``."""
    steps = ["--max-steps", max_steps]
    if verb == "translation":
        corpus = data["corpus"]
        rest = ["--src", "de", "--tgt", "en", "--train-src", str(corpus["train.de"]), "--train-tgt",
                str(corpus["train.en"]), "--preset", "transformer_tiny", "--vocab-size", "300", "--max-tokens", "512",
                "--warmup", "1", "--val-every", "0", "--log-every", "1", "--device", "cpu"]
    elif verb == "lm":
        rest = ["--text", str(data["text"]), "--preset", "lm_tiny", "--context", "16", "--batch-size", "4",
                "--warmup", "1", "--val-every", "0", "--val-batches", "1", "--device", "cpu"]
    elif verb == "music":
        rest = ["--data", str(data["midi"]), *TINY_MUSIC]
    elif verb == "vit":
        rest = ["--data", str(data["images"]), *TINY_VIT]
    elif verb == "image":
        rest = ["--data", str(data["images"]), *TINY_IMAGE]
    elif verb == "caption":
        rest = ["--data", f"coco:{data['coco']}", *TINY_CAPTION]
    else:
        rest, steps = TINY_T2I, []
    return ["train", verb, *rest, *steps, "--out", str(out), *COMMON]


def _interrupt(argv: list[str], wait_for: Path, number: int) -> tuple[int, str]:
    """Start ``attnlab ARGV``; once ``wait_for`` exists (the training loop has begun), send
    ``number``; return the exit code and stderr."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen([sys.executable, "-m", "attnlab.cli.main", *argv], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_shell_sigint)
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while not wait_for.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process.poll() is None, f"exited {process.returncode} before training:\n{process.stderr.read()}"
        assert wait_for.exists(), f"no {wait_for} after {STARTUP_SECONDS} s"
        process.send_signal(number)
        _, err = process.communicate(timeout=STARTUP_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.returncode, err


def _interrupt_here(argv: list[str], wait_for: Path, number: int, capsys) -> tuple[int, str]:
    """``main(argv)`` in this process; a watcher thread sends this process ``number`` once
    ``wait_for`` exists (the Trainer's handlers are installed by then, and stay until the
    signal ends the run)."""
    failed = []

    def watch():
        deadline = time.monotonic() + STARTUP_SECONDS
        while not wait_for.exists():
            if time.monotonic() > deadline:
                failed.append(f"no {wait_for} after {STARTUP_SECONDS} s")
                return
            time.sleep(0.02)
        os.kill(os.getpid(), number)

    capsys.readouterr()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    code = main(argv)
    watcher.join()
    assert not failed, failed
    return code, capsys.readouterr().err


@pytest.fixture(scope="module")
def data(image_folder, lm_text, midi_folder, coco, small_corpus) -> dict:
    return {"images": image_folder, "text": lm_text, "midi": midi_folder, "coco": coco, "corpus": small_corpus}


@pytest.mark.parametrize("verb, number, where", [
    ("lm", signal.SIGINT, "process"), ("lm", signal.SIGTERM, "here"), ("translation", signal.SIGINT, "here"),
    ("music", signal.SIGINT, "here"), ("vit", signal.SIGINT, "here"), ("image", signal.SIGTERM, "here"),
    ("caption", signal.SIGINT, "here"),
])
def test_a_signal_keeps_the_work_and_resume_continues_it(verb, number, where, data, tmp_path, capsys):
    out = tmp_path / "run"
    argv = _command(verb, out, FOREVER, data)
    if where == "process":
        code, err = _interrupt(argv, out / "metrics.jsonl", number)
    else:
        code, err = _interrupt_here(argv, out / "metrics.jsonl", number, capsys)
    name = signal.Signals(number).name
    assert code == 128 + number, err
    assert "Traceback" not in err, err
    checkpoints = sorted((out / "checkpoints").glob("step_*"))
    assert checkpoints, err
    step = int(checkpoints[-1].name.removeprefix("step_"))
    assert step >= 1
    assert f"attnlab train {verb}: stopped by {name} at step {step}; checkpoint written: {checkpoints[-1]}" in err
    assert "to continue, run the same command with --resume (same --out):" in err
    hint = err.strip().splitlines()[-1].strip()
    assert hint.startswith(f"attnlab train {verb} ") and hint.endswith("--resume") and f"--out {out}" in hint
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["stopped"] == name and records[-1]["step"] == step

    # The hint's command, with a finite --max-steps, continues from that step.
    resume = [*_command(verb, out, str(step + 2), data), "--resume"]
    capsys.readouterr()
    assert main(resume) == 0
    err = capsys.readouterr().err
    assert f"resuming from {checkpoints[-1]} at step {step:,} (of {step + 2:,})" in err, err
    assert "done: " in err and f"{step + 2} updates ({2} in this run, from step {step}" in err, err
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    logged = [r["step"] for r in records if "loss" in r]
    assert len(logged) == len(set(logged)) and logged[-1] == step + 2


def test_text_to_image_interrupted_in_its_vqvae_exits_cleanly(data, tmp_path, capsys):
    out = tmp_path / "t2i"
    code, err = _interrupt_here(_command("text-to-image", out, FOREVER, data), out / "vqvae" / "metrics.jsonl",
                                signal.SIGINT, capsys)
    assert code == 130 and "Traceback" not in err, err
    checkpoint = sorted((out / "vqvae" / "checkpoints").glob("step_*"))[-1]
    assert "attnlab train text-to-image: stopped by SIGINT at step" in err and str(checkpoint) in err
    assert "to continue, run the same command with --resume" in err  # issue 39 (14): it has --resume now
    assert not (out / "model").exists()


@pytest.mark.parametrize("number, code, said", [(signal.SIGTERM, 143, "terminated (SIGTERM)"),
                                                 (signal.SIGINT, 130, "interrupted (SIGINT)")])
def test_a_signal_outside_training_unwinds_and_exits_with_its_code(monkeypatch, capsys, number, code, said):
    import attnlab.cli.presets as presets

    def signalled(args):
        os.kill(os.getpid(), number)
        time.sleep(5)  # the handler raises before this ends
        return 0

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(presets, "run", signalled)
    # As from a shell: SIGINT at Python's own handler, whatever an earlier test in this worker left.
    interrupt = signal.signal(signal.SIGINT, signal.default_int_handler)
    started = time.monotonic()
    try:
        assert main(["presets"]) == code
    finally:
        signal.signal(signal.SIGINT, interrupt)
    assert time.monotonic() - started < 5
    assert capsys.readouterr().err.strip() == f"attnlab presets: {said}"
    assert signal.getsignal(signal.SIGTERM) is before


# A script that runs `attnlab ARGV` with the final scoring's first batch held: it touches
# MARKER and sleeps there, so the test's signal lands in the scoring (after "done:").
HELD_SCORING = """
import pathlib, sys, time
from attnlab.training import phases
marker = pathlib.Path(sys.argv[1])
scoring = phases.Scoring.__iter__
def held(self):
    for batch in scoring(self):
        marker.touch()
        time.sleep(120)
        yield batch
phases.Scoring.__iter__ = held
from attnlab.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("verb", ["vit", pytest.param("image", marks=pytest.mark.slow)])
def test_sigint_in_the_final_scoring_exits_130_with_the_command_that_scores_again(verb, data, tmp_path, capsys):
    # Issue 39, 13: SIGINT right after "done:" killed train vit with status -2 and no word, and
    # train image printed only "interrupted".
    out, marker, script = tmp_path / "run", tmp_path / "scoring", tmp_path / "held.py"
    script.write_text(HELD_SCORING)
    argv = _command(verb, out, "2", data)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen([sys.executable, str(script), str(marker), *argv], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=_shell_sigint)
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists() and process.poll() is None, process.stderr.read() if process.poll() is not None else ""
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=STARTUP_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, err
    assert "Traceback" not in err, err
    checkpoint = sorted((out / "checkpoints").glob("step_*"))[-1]
    assert (f"attnlab train {verb}: interrupted (SIGINT) during the final scoring (" in err
            and f"the last checkpoint is kept: {checkpoint}" in err), err
    assert "to continue (it scores the model again), run the same command with --resume (same --out):" in err
    command = err.strip().splitlines()[-1].strip()
    assert command == shlex.join(["attnlab", *argv, "--resume"]), command
    # That command scores the trained model again, without training.
    capsys.readouterr()
    assert main(shlex.split(command)[1:]) == 0
    err = capsys.readouterr().err
    assert "nothing to do" in err and (out / "evaluation" / "results.json").is_file(), err


def test_an_interrupt_while_preparing_gives_the_command_that_starts_again(data, tmp_path, capsys, monkeypatch):
    # Ctrl-C while the data is read: 130, where it happened, and the command (nothing to resume).
    from attnlab.data import images

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(images, "load_images", interrupted)
    out = tmp_path / "run"
    argv = _command("vit", out, "2", data)
    capsys.readouterr()
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert err.startswith("attnlab train vit: interrupted (SIGINT) while preparing (reading the data"), err
    assert "no checkpoint was written" in err and "to start again, run the same command:" in err, err
    assert err.strip().splitlines()[-1].strip() == shlex.join(["attnlab", *argv])


def test_a_ctrl_c_once_the_program_has_finished_does_not_kill_it(monkeypatch, capsys):
    # A signal right after a verb's work (a tiny run's scoring takes milliseconds) came while
    # Python shut down: the process died by SIGINT (status -2) without a word. Run as the
    # program (no argv), main leaves SIGINT ignored once the verb has returned.
    before = signal.getsignal(signal.SIGINT)
    monkeypatch.setattr(sys, "argv", ["attnlab", "presets"])
    try:
        assert main() == 0
        os.kill(os.getpid(), signal.SIGINT)  # as the process shuts down
        time.sleep(0.05)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
    assert main(["presets"]) == 0 and signal.getsignal(signal.SIGINT) is before  # called with argv: untouched
