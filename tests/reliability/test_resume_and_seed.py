"""`train lm`: --seed reproduces a run; --resume refuses other data instead of silently
remapping the vocabulary."""

from __future__ import annotations

import shutil

from .conftest import lm_args, run_cli, snapshot


def test_the_same_seed_gives_the_same_model(lm_text, tmp_path, capsys):
    runs = [tmp_path / name for name in ("a", "b", "c")]
    for run, seed in zip(runs, ("7", "7", "8")):
        assert run_cli(lm_args(lm_text, run, "--seed", seed), capsys)[0] == 0
    weights = [(run / "model" / "model.safetensors").read_bytes() for run in runs]
    assert weights[0] == weights[1] and weights[0] != weights[2]


def test_resume_with_different_text_is_refused(lm_run, lm_text, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(lm_run, out)
    other = tmp_path / "other.txt"
    other.write_text(lm_text.read_text(encoding="utf-8").upper(), encoding="utf-8")
    before = snapshot(out)
    code, err = run_cli(lm_args(other, out, "--resume", "--max-steps", "3"), capsys)
    assert code == 2 and "--text" in err and "differ" in err
    assert snapshot(out) == before


def test_resume_with_the_same_text_continues(lm_run, lm_text, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(lm_run, out)
    assert run_cli(lm_args(lm_text, out, "--resume", "--max-steps", "3"), capsys)[0] == 0
    assert (out / "checkpoints" / "step_00000003").is_dir()


def test_train_translation_resume_on_other_data_is_refused_naming_it(tmp_path, capsys):
    """Issue 39 (1, 2): --resume on other data is refused before any work, pointing to --init,
    and OUT is left exactly as it was (translation.json was rewritten with the new file names)."""
    src, tgt = tmp_path / "train.de", tmp_path / "train.en"
    src.write_text("".join(f"ein hund {i} läuft\n" for i in range(40)), encoding="utf-8")
    tgt.write_text("".join(f"a dog {i} runs\n" for i in range(40)), encoding="utf-8")
    out = tmp_path / "run"

    def train(*extra):
        return run_cli(["train", "translation", "--train-src", str(src), "--train-tgt", str(tgt), "--preset",
                        "transformer_tiny", "--vocab-size", "40", "--max-tokens", "256", "--max-length", "32",
                        "--warmup", "1", "--val-every", "0", "--save-every", "1", "--out", str(out), "--no-progress",
                        "--threads", "1", *extra], capsys)

    assert train("--max-steps", "1")[0] == 0
    before = snapshot(out)
    code, err = train("--max-steps", "2", "--resume", "--max-train-pairs", "20")
    assert code == 2 and "--max-train-pairs" in err and "differ" in err and "--init" in err
    assert snapshot(out) == before
    other_src, other_tgt = tmp_path / "new.de", tmp_path / "new.en"
    other_src.write_text("".join(f"eine katze {i}\n" for i in range(40)), encoding="utf-8")
    other_tgt.write_text("".join(f"a cat {i}\n" for i in range(40)), encoding="utf-8")
    code, err = run_cli(["train", "translation", "--train-src", str(other_src), "--train-tgt", str(other_tgt),
                         "--preset", "transformer_tiny", "--vocab-size", "40", "--max-tokens", "256", "--max-length",
                         "32", "--warmup", "1", "--val-every", "0", "--save-every", "1", "--out", str(out),
                         "--no-progress", "--threads", "1", "--max-steps", "2", "--resume"], capsys)
    assert code == 2 and "--init" in err and snapshot(out) == before
