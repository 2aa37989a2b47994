"""--max-minutes bounds the whole command (issue 29, point 3), checked through the CLI with a
fake clock: every command budget (attnlab.training.phases.clock) and the Trainer's own clock
read it, and the expensive steps (loading data, a vocabulary, each loss call, each scoring
batch) advance it by a fixed cost. So the figures below depend on what the command does,
never on the machine's speed."""

import json
import time
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from attnlab.cli.main import main
from attnlab.training import phases
from attnlab.training import trainer as trainer_module


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(phases, "clock", fake)
    # The Trainer times its max_minutes with time.perf_counter (until it takes a Budget).
    monkeypatch.setattr(trainer_module, "time", SimpleNamespace(perf_counter=fake, time=time.time))
    return fake


def costs(monkeypatch, clock, module, name, seconds, count=lambda args, kwargs: 1):
    """``module.name`` advances the fake clock by ``seconds`` x ``count(args, kwargs)`` per call."""
    real = getattr(module, name)

    def slow(*args, **kwargs):
        result = real(*args, **kwargs)
        clock.advance(seconds * count(args, kwargs))
        return result

    monkeypatch.setattr(module, name, slow)


def images_in_batch(args, kwargs):
    return len(args[1]["images"])


def training_ten_times_slower(args, kwargs):
    """Images in the batch, x 10 in training (the backward pass, and fewer real updates to run)."""
    return len(args[1]["images"]) * (10 if args[0].training else 1)


def stderr_lines(capsys):
    return capsys.readouterr().err.replace("\r", "\n")


# -- train image -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    """8x8 grey images of two classes: 16 training images, 160 test images (DIR/train, DIR/test)."""
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for split, count in (("train", 8), ("test", 80)):
        for label, name in enumerate(("top", "bottom")):
            (root / split / name).mkdir(parents=True)
            for i in range(count):
                pixels = rng.integers(0, 40, (8, 8))
                pixels[4 * label:4 * label + 4] += 200
                Image.fromarray(pixels.astype(np.uint8)).save(root / split / name / f"{i}.png")
    return root


TINY_IMAGE = ["--set", "num_layers=1", "--set", "d_model=16", "--set", "num_heads=2", "--set", "d_ff=24",
              "--batch-size", "4", "--val-every", "0", "--save-every", "0", "--no-progress", "--device", "cpu",
              "--warmup", "1", "--max-steps", "100000"]


def test_train_image_scores_the_test_split_in_the_time_left_and_keeps_to_the_budget(clock, monkeypatch, tmp_path,
                                                                                     capsys, image_folder):
    import attnlab.families.image.train as image_verb
    import attnlab.families.image.task as images_task

    costs(monkeypatch, clock, image_verb, "load_image_set", 5.0)  # each split: 15 s of loading in all
    costs(monkeypatch, clock, images_task, "image_loss", 0.1, training_ten_times_slower)  # an update: 4 s
    start, out = clock.now, tmp_path / "run"
    assert main(["train", "image", "--data", str(image_folder), *TINY_IMAGE, "--max-minutes", "1",
                 "--out", str(out)]) == 0
    elapsed = clock.now - start
    err = stderr_lines(capsys)
    assert "time budget: 1 min for the whole command: training (and loading) less the last 6 s (10 %)" in err
    assert "training: up to 39 s of the budget (15 s of it already spent; 6 s kept for scoring)" in err
    results = json.loads((out / "evaluation" / "results.json").read_text())
    scoring = results["scoring"]
    # 6 s left for 160 images at 0.1 s each, 32 a batch (3.2 s): one batch fits, a second would not.
    assert scoring["total"] == 160 and scoring["cut_by_budget"] and results["images"] == scoring["scored"] == 32
    assert "bits/dim over 32 of 160 images (a random sample: the time budget ran out)" in err
    # Training stops at 55 s (the update that crossed its limit at 54 s); the Trainer's end-of-run
    # check runs the loss once more on the last batch in eval mode (4 images: 0.4 s); scoring
    # ends at 58.6 s.
    assert elapsed == pytest.approx(58.6) and "time: 59 s of the 1 min budget" in err


def test_train_image_without_a_budget_scores_every_test_image(clock, monkeypatch, tmp_path, capsys, image_folder):
    import attnlab.families.image.task as images_task

    costs(monkeypatch, clock, images_task, "image_loss", 0.1, images_in_batch)
    out = tmp_path / "run"
    args = [a if a != "100000" else "3" for a in TINY_IMAGE]
    assert main(["train", "image", "--data", str(image_folder), *args, "--out", str(out)]) == 0
    results = json.loads((out / "evaluation" / "results.json").read_text())
    assert results["images"] == 160 and not results["scoring"]["cut_by_budget"]
    err = stderr_lines(capsys)
    assert "bits/dim over 160 images\n" in err and "time budget" not in err


def test_a_bad_max_minutes_is_a_one_line_error(tmp_path, capsys, image_folder):
    with pytest.raises(SystemExit) as stop:  # refused by the parser, naming the flag
        main(["train", "image", "--data", str(image_folder), *TINY_IMAGE, "--max-minutes", "-1",
              "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "argument --max-minutes: -1 must be a number above 0" in err
    assert "Traceback" not in err
    assert not (tmp_path / "run").exists()


# -- train vit ---------------------------------------------------------------------------------
TINY_VIT = ["--preset", "vit_tiny_patch4_28", "--set", "num_layers=1", "--set", "d_model=16", "--set", "num_heads=2",
            "--set", "d_ff=32", "--batch-size", "4", "--val-every", "0", "--save-every", "0", "--no-progress",
            "--device", "cpu", "--warmup", "1", "--max-steps", "100000"]


def test_train_vit_keeps_to_the_budget(clock, monkeypatch, tmp_path, capsys, image_folder):
    import attnlab.data.images as image_data
    import attnlab.families.vit.task as classification

    costs(monkeypatch, clock, image_data, "load_images", 5.0)
    costs(monkeypatch, clock, classification, "classification_loss", 0.1, training_ten_times_slower)
    costs(monkeypatch, clock, classification, "evaluate_classifier", 0.01, lambda args, kwargs: len(args[1]))
    start, out = clock.now, tmp_path / "run"
    assert main(["train", "vit", "--data", str(image_folder), *TINY_VIT, "--max-minutes", "1", "--out", str(out)]) == 0
    elapsed = clock.now - start
    results = json.loads((out / "evaluation" / "results.json").read_text())
    assert results["images"] == 160 and results["scoring"]["scored"] == 160  # 1.6 s: it fits in the 6 s kept
    assert elapsed <= 60.0
    err = stderr_lines(capsys)
    assert "kept for the test split's accuracy" in err and "test (160 images)" in err


# -- train text-to-image -----------------------------------------------------------------------
TINY_T2I = ["--train-images", "100", "--vqvae-preset", "vqvae_tiny", "--vqvae-steps", "1000", "--classifier-steps",
            "1000", "--reader-images", "50", "--preset", "text_to_image_tiny", "--set", "grid=8", "--set",
            "text_length=24", "--max-steps", "1000", "--eval-prompts", "400", "--batch-size", "16", "--no-progress",
            "--device", "cpu"]


def test_train_text_to_image_gives_each_model_its_share_and_cuts_fidelity_to_the_time_left(clock, monkeypatch,
                                                                                           tmp_path, capsys):
    import attnlab.families.text_to_image.task as task

    for name in ("vqvae_loss", "attribute_loss", "text_to_image_loss"):
        costs(monkeypatch, clock, task, name, 1.0)  # one second per update (and per validation batch)
    costs(monkeypatch, clock, task, "imagine", 0.04, lambda args, kwargs: len(args[3]))  # per prompt
    start, out = clock.now, tmp_path / "t2i"
    assert main(["train", "text-to-image", "--out", str(out), *TINY_T2I, "--max-minutes", "1"]) == 0
    elapsed = clock.now - start
    err = stderr_lines(capsys)
    assert ("time budget: 1 min for the whole command: the VQ-VAE up to 12 s (20 %); the attribute reader up to "
            "9 s (15 %); the text-to-image model: the rest less the last 6 s (10 %)") in err
    # Each auxiliary model stops at the first update past its share (the update that crosses it counts).
    assert "VQ-VAE: 13 of 1,000 updates (its time share was spent at update 13)" in err
    assert "attribute reader: 10 of 1,000 updates (its time share was spent at update 10)" in err
    vqvae_log = [json.loads(line) for line in (out / "vqvae" / "metrics.jsonl").read_text().splitlines()]
    assert {"step": 13, "stopped": "max_minutes"}.items() <= vqvae_log[-1].items()
    # Each auxiliary run ends with the Trainer's end-of-run check (one forward, 1 s here): 25 s are
    # spent before the main model starts; 6 s are kept for scoring.
    assert "training: up to 29 s of the budget (25 s of it already spent; 6 s kept for scoring)" in err
    results = json.loads((out / "evaluation" / "results.json").read_text())
    scoring = results["scoring"]
    # The main model's last update, end-of-run check and held-out pass leave time for the first
    # batch of 16 prompts only (the minimum a cut scoring scores).
    assert scoring["cut_by_budget"] and scoring["scored"] == 16 and scoring["total"] > 16
    assert f"fidelity scored on 16 of {scoring['total']} prompts (a random sample" in err
    assert sum(part["generated"]["prompts"] for part in results["fidelity"].values()) == 16
    assert results["vqvae"]["test_images"] == 1000  # the reconstructions cost no (fake) time: all of them fit
    assert elapsed <= 60.0 and "time: 58 s of the 1 min budget" in err


# -- train caption -----------------------------------------------------------------------------
TINY_CAPTION = ["--data", "scenes", "--train-images", "64", "--preset", "captioner_tiny", "--set", "max_positions=12",
                "--batch-size", "16", "--val-every", "0", "--save-every", "0", "--no-progress", "--device", "cpu",
                "--warmup", "1", "--beam", "2", "--max-steps", "100000"]


def test_train_caption_captions_the_test_images_that_fit(clock, monkeypatch, tmp_path, capsys):
    import attnlab.families.caption.task as task

    costs(monkeypatch, clock, task, "caption_loss", 0.5)
    costs(monkeypatch, clock, task, "generate_captions", 0.05, lambda args, kwargs: len(args[2]))
    start, out = clock.now, tmp_path / "run"
    assert main(["train", "caption", *TINY_CAPTION, "--max-minutes", "0.5", "--out", str(out)]) == 0
    elapsed = clock.now - start
    results = json.loads((out / "evaluation" / "results.json").read_text())
    # Training stops at 27.5 s (3 s kept); a first batch of 20 images (1 s) fits, the next 100 (5 s) would not.
    assert results["scoring"]["cut_by_budget"] and results["images"] == results["scoring"]["scored"] == 20
    assert results["scoring"]["total"] == 1000
    assert elapsed == pytest.approx(29.0)  # + the Trainer's end-of-run check: one forward, 0.5 s
    err = stderr_lines(capsys)
    assert "test captions: 20 of 1,000 images (a random sample: the time budget ran out)" in err


# -- train lm, music, translation: the budget covers what comes before training ----------------------
def test_train_lm_counts_the_vocabulary_in_the_budget(clock, monkeypatch, tmp_path, capsys):
    import attnlab.families.lm.task as lm_task
    import attnlab.training.losses as losses

    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog\n" * 40)
    costs(monkeypatch, clock, lm_task, "build_lm_tokenizer", 20.0)  # a slow vocabulary
    costs(monkeypatch, clock, losses, "lm_loss", 0.5)
    start, out = clock.now, tmp_path / "run"
    assert main(["train", "lm", "--text", str(text), "--preset", "lm_tiny", "--context", "16", "--batch-size", "4",
                 "--max-steps", "100000", "--val-every", "0", "--save-every", "0", "--no-progress", "--device", "cpu",
                 "--max-minutes", "0.5", "--out", str(out)]) == 0
    elapsed = clock.now - start
    # + the update that crosses the limit and the end-of-run check's forward (0.5 s each)
    assert elapsed <= 30.0 + 0.5 + 0.5 + 1e-6  # before: 20 s of vocabulary + 30 s of training
    err = stderr_lines(capsys)
    assert "time budget: 30 s for the whole command: training (and loading)" in err
    assert "training: up to 10 s of the budget (20 s of it already spent)" in err


def test_train_translation_counts_the_vocabulary_in_the_budget(clock, monkeypatch, tmp_path, capsys, small_corpus):
    import attnlab.families.translation.task as task

    real_train = task.Tokenizer.train

    def slow_vocabulary(*args, **kwargs):
        clock.advance(20.0)
        return real_train(*args, **kwargs)

    monkeypatch.setattr(task.Tokenizer, "train", staticmethod(slow_vocabulary))
    real_loss = task.translation_loss

    def slow_loss(*args, **kwargs):
        loss_fn = real_loss(*args, **kwargs)

        def timed(model, batch):
            result = loss_fn(model, batch)
            clock.advance(0.5)
            return result

        return timed

    monkeypatch.setattr(task, "translation_loss", slow_loss)
    start, out = clock.now, tmp_path / "run"
    assert main(["train", "translation", "--src", "de", "--tgt", "en",
                 "--train-src", str(small_corpus["train.de"]), "--train-tgt", str(small_corpus["train.en"]),
                 "--preset", "transformer_tiny", "--vocab-size", "300", "--max-tokens", "1024", "--max-steps", "100000",
                 "--warmup", "10", "--val-every", "0", "--save-every", "0", "--no-progress", "--max-minutes", "0.5",
                 "--out", str(out)]) == 0
    elapsed = clock.now - start
    assert elapsed <= 30.0 + 0.5 + 0.5 + 1e-6  # the crossing update and the end-of-run check
    assert "training: up to 10 s of the budget (20 s of it already spent)" in stderr_lines(capsys)


def test_train_music_counts_reading_the_data_in_the_budget(clock, monkeypatch, tmp_path, capsys):
    import random

    import attnlab.families.music.task as music_task
    from attnlab.data import music

    folder = tmp_path / "midi"
    folder.mkdir()
    rng = random.Random(0)
    for piece in range(3):
        notes = [music.Note(rng.choice([60, 62, 64, 65, 67]), i * 0.25, i * 0.25 + 0.2, rng.randint(40, 100))
                 for i in range(30)]
        music.write_midi(notes, folder / f"piece{piece}.mid")
    costs(monkeypatch, clock, music_task, "load_music_data", 20.0)  # a slow data set
    costs(monkeypatch, clock, music_task, "lm_loss", 0.5)
    start, out = clock.now, tmp_path / "run"
    assert main(["train", "music", "--data", str(folder), "--preset", "music_performance_small", "--set",
                 "num_layers=1", "--set", "d_model=16", "--set", "num_heads=2", "--set", "d_ff=32", "--context", "32",
                 "--batch-size", "4", "--val-every", "0", "--save-every", "0", "--no-progress", "--device", "cpu",
                 "--warmup", "1", "--max-steps", "100000", "--max-minutes", "0.5", "--out", str(out)]) == 0
    elapsed = clock.now - start
    assert elapsed <= 30.0 + 0.5 + 0.5 + 1e-6  # before: 20 s of data + 30 s of training (+ the end check)
    assert "training: up to 10 s of the budget (20 s of it already spent)" in stderr_lines(capsys)
