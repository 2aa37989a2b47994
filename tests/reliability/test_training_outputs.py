"""What a training run does to its output directory: nothing before its options are
checked, nothing while another run writes there, nothing through a symlink, and a
half-done replacement of OUT/model is repaired."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest

import attnlab
from attnlab.files import LOCK_FILE, OutputLock, recover_directory

from .conftest import dead_pid, lm_args, run_cli, snapshot


def test_a_refused_run_leaves_an_earlier_run_intact(lm_run, lm_text, tmp_path, capsys):
    """Bad option, or no --resume: the earlier run's char_tokenizer.json and the rest stay."""
    out = tmp_path / "run"
    shutil.copytree(lm_run, out)
    other = lm_text.parent / "other.txt"
    other.write_text("completely different characters: 0123456789 XYZ\n" * 10, encoding="utf-8")
    before = snapshot(out)
    code, err = run_cli(lm_args(other, out), capsys)  # no --resume
    assert code == 2 and "--resume" in err and str(out) in err
    code, err = run_cli(lm_args(other, out, "--resume", "--context", "100000"), capsys)
    assert code == 2
    assert snapshot(out) == before


def test_options_are_checked_before_anything_is_written(lm_text, tmp_path, capsys):
    out = tmp_path / "fresh"
    with pytest.raises(SystemExit) as exit_info:  # refused by the parser, naming the flag
        run_cli(lm_args(lm_text, out, "--max-minutes", "-1"), capsys)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "argument --max-minutes: -1 must be a number above 0" in err
    assert not out.exists()


def test_out_that_is_a_file_is_refused(lm_text, tmp_path, capsys):
    out = tmp_path / "a_file"
    out.write_text("keep\n")
    code, err = run_cli(lm_args(lm_text, out), capsys)
    assert code == 2 and str(out) in err and "not a directory" in err
    assert out.read_text() == "keep\n"


def test_a_second_writer_is_refused_naming_the_holder(lm_text, tmp_path, capsys):
    out = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from attnlab.files import OutputLock
            with OutputLock({str(out)!r}, purpose="test holder"):
                print("locked", flush=True)
                sys.stdin.read()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = snapshot(out)
        code, err = run_cli(lm_args(lm_text, out), capsys)
        assert code == 2 and f"PID {holder.pid}" in err and "another attnlab run" in err
        assert snapshot(out) == before
    finally:
        holder.communicate("")
    # Once the holder is gone, the lock is free again.
    assert run_cli(lm_args(lm_text, out), capsys)[0] == 0


def test_a_stale_lock_of_a_killed_run_is_taken_over(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / LOCK_FILE).write_text(json.dumps({"pid": dead_pid(), "host": "gone", "purpose": "killed"}) + "\n")
    with OutputLock(out) as lock:
        assert lock.stale_holder is not None and "killed" in lock.stale_holder


def test_symlinks_inside_out_are_not_followed(lm_text, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (out / "metrics.jsonl").symlink_to(victim)
    code, err = run_cli(lm_args(lm_text, out), capsys)
    assert code == 2 and "metrics.jsonl" in err and "symlink" in err
    assert victim.read_text() == "precious\n"
    (out / "metrics.jsonl").unlink()
    (out / "char_tokenizer.json").symlink_to(victim)
    code, err = run_cli(lm_args(lm_text, out), capsys)
    assert code == 2 and "char_tokenizer.json" in err
    assert victim.read_text() == "precious\n"


def _half_swapped(lm_run, tmp_path, *, with_new: bool):
    """OUT/model as a kill between the two renames of a replacement leaves it."""
    out = tmp_path / "run"
    shutil.copytree(lm_run, out)
    pid = dead_pid()
    model = out / "model"
    (out / f".model.old-{pid}").mkdir()
    shutil.copytree(model, out / f".model.old-{pid}", dirs_exist_ok=True)
    if with_new:
        shutil.copytree(model, out / f".model.tmp-{pid}")
    shutil.rmtree(model)
    return out


def test_a_killed_swap_is_finished_when_the_new_model_is_complete(lm_run, tmp_path, capsys):
    out = _half_swapped(lm_run, tmp_path, with_new=True)
    capsys.readouterr()
    model = attnlab.load_model(out / "model")  # loading repairs it, and says so
    assert model is not None and "finished an interrupted replacement" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".model")) == []


def test_a_killed_swap_is_rolled_back_without_the_new_model(lm_run, tmp_path):
    out = _half_swapped(lm_run, tmp_path, with_new=False)
    messages = recover_directory(out / "model")
    assert any("rolled back" in m for m in messages)
    assert attnlab.load_model(out / "model") is not None
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".model")) == []


def test_leftovers_of_a_live_process_are_not_touched(lm_run, tmp_path):
    import os

    out = tmp_path / "run"
    shutil.copytree(lm_run, out)
    live = out / f".model.tmp-{os.getppid()}"  # our parent is alive
    live.mkdir()
    assert recover_directory(out / "model") == [] and live.is_dir()


def test_checkpoint_clean_up_spares_a_live_writers_temporaries(tmp_path):
    import os

    import torch

    from attnlab.training import save_checkpoint

    root = tmp_path / "checkpoints"
    live = root / f".step_00000009.tmp-{os.getppid()}"  # another process's checkpoint in flight
    dead = root / f".step_00000008.tmp-{dead_pid()}"
    for directory in (live, dead):
        directory.mkdir(parents=True)
        (directory / "model.safetensors").write_bytes(b"partial")
    save_checkpoint(root, 1, torch.nn.Linear(2, 2), {"x": 1})
    assert live.is_dir() and not dead.exists()


def test_train_translation_checks_options_before_the_vocabulary(tmp_path, capsys):
    src, tgt = tmp_path / "s.de", tmp_path / "s.en"
    src.write_text("ein hund\n" * 20)
    tgt.write_text("a dog\n" * 20)
    for bad, message in ((["--warmup", "0"], "--warmup must be"), (["--set", "num_heads=5"], "num_heads"),
                         (["--keep", "0"], "--keep=0")):
        code, err = run_cli(["train", "translation", "--train-src", str(src), "--train-tgt", str(tgt), "--out",
                             str(tmp_path / "out"), "--no-progress", *bad], capsys)
        assert code == 2 and message in err and "vocabulary" not in err, err
        assert not (tmp_path / "out").exists()
