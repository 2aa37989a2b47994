"""The training verbs' lifecycle through the CLI: a diverged run is an error (not a saved
model), a schedule that does not fit the run is fitted and said, the last line is the mean
of the last updates, a finished run resumed says there is nothing to do, and errors name
the flags the user typed."""

from __future__ import annotations

import pytest

from attnlab.cli.main import main

from .test_training_signals import TINY_CAPTION, TINY_IMAGE, TINY_MUSIC, TINY_VIT, coco, image_folder, lm_text, \
    midi_folder  # noqa: F401 (fixtures)


def _t2i(out, lr):
    return ["train", "text-to-image", "--train-images", "60", "--vqvae-preset", "vqvae_tiny", "--vqvae-steps", "2",
            "--classifier-steps", "2", "--reader-images", "20", "--preset", "text_to_image_tiny", "--set", "grid=8",
            "--set", "text_length=24", "--max-steps", "2", "--eval-prompts", "2", "--device", "cpu", "--no-progress",
            "--lr", lr, "--out", str(out)]


@pytest.mark.filterwarnings("ignore:step .* is not finite:RuntimeWarning")
@pytest.mark.parametrize("verb", ["vit", "music", "caption", "image", "text-to-image"])
def test_an_absurd_learning_rate_is_a_diverged_run_not_a_saved_model(verb, image_folder, midi_folder, coco,
                                                                      tmp_path, capsys):
    out = tmp_path / "run"
    data = {"vit": ["--data", str(image_folder), *TINY_VIT], "music": ["--data", str(midi_folder), *TINY_MUSIC],
            "caption": ["--data", f"coco:{coco}", *TINY_CAPTION], "image": ["--data", str(image_folder), *TINY_IMAGE]}
    argv = _t2i(out, "1e30") if verb == "text-to-image" else \
        ["train", verb, *data[verb], "--lr", "1e30", "--max-steps", "2", "--no-progress", "--out", str(out)]
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and "diverged" in err and "Traceback" not in err and "internal error" not in err, err
    assert not (out / "model").exists()


def test_a_warmup_longer_than_the_run_is_fitted_and_said(small_corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "translation", "--src", "de", "--tgt", "en", "--train-src", str(small_corpus["train.de"]),
                 "--train-tgt", str(small_corpus["train.en"]), "--valid-src", str(small_corpus["valid.de"]),
                 "--valid-tgt", str(small_corpus["valid.en"]), "--preset", "transformer_tiny", "--vocab-size", "300",
                 "--max-tokens", "512", "--max-steps", "5", "--val-every", "100", "--log-every", "100",
                 "--no-progress", "--threads", "1", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert ("schedule: the 4,000-update warm-up does not fit a 5-update run: warming up over 1 update instead, "
            "peak learning rate") in err
    done = next(line for line in err.splitlines() if line.startswith("done: "))
    # The mean of the last 5 updates (not a stale log line) and a held-out figure from the end of the run.
    assert done.startswith("done: 5 updates in ") and "(mean of the last 5 updates)" in done
    assert "(held-out, step 5)" in done


def test_resuming_a_finished_run_says_there_is_nothing_to_do(lm_text, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", "lm", "--text", str(lm_text), "--preset", "lm_tiny", "--context", "16", "--batch-size", "4",
            "--warmup", "1", "--val-every", "0", "--val-batches", "1", "--device", "cpu", "--no-progress",
            "--threads", "1", "--out", str(out)]
    assert main([*argv, "--max-steps", "3"]) == 0
    capsys.readouterr()
    assert main([*argv, "--max-steps", "2", "--resume"]) == 0
    err = capsys.readouterr().err
    assert "nothing to do:" in err and "already at step 3" in err and "stops at 2 updates" in err
    assert "done: 3 updates (0 in this run, from step 3" in err


def test_training_setting_errors_name_the_flag(small_corpus, tmp_path, capsys):
    base = ["train", "translation", "--train-src", str(small_corpus["train.de"]), "--train-tgt",
            str(small_corpus["train.en"]), "--no-progress", "--out", str(tmp_path / "out")]
    assert main([*base, "--val-every", "-1"]) == 2
    err = capsys.readouterr().err
    assert "--val-every must be a positive integer, got -1" in err and "validate_every" not in err
    assert main([*base, "--log-every", "0"]) == 2
    assert "--log-every must be a positive integer" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*base, "--save-every-minutes", "-1"])
    assert "argument --save-every-minutes: -1 must be a number at least 0" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_save_every_minutes_reaches_the_trainer_config():
    from attnlab.cli.main import build_parser
    from attnlab.cli.options import checkpoint_minutes

    parser = build_parser()
    for verb in ("lm", "music", "vit", "image", "caption", "translation"):
        base = ["train", verb, "--out", "x", *(["--data", "d"] if verb in ("music", "vit", "image") else [])]
        assert checkpoint_minutes(parser.parse_args(base)) == 10.0, verb
        assert checkpoint_minutes(parser.parse_args([*base, "--save-every-minutes", "0"])) is None, verb
        assert checkpoint_minutes(parser.parse_args([*base, "--save-every-minutes", "2.5"])) == 2.5, verb
