"""attnlab train music / generate-music / evaluate-music on a tiny MIDI folder and on JSB."""

import json
import random

import pytest

from attnlab.cli.main import main
from families.conftest import with_record
from attnlab.data import music
from attnlab.families.music.figures import find_synthesizer

TINY_PERFORMANCE = ["--preset", "music_performance_small", "--set", "num_layers=1", "--set", "d_model=16",
                    "--set", "num_heads=2", "--set", "d_ff=32", "--context", "32", "--batch-size", "4",
                    "--val-every", "3", "--val-batches", "2", "--save-every", "3", "--no-progress", "--device", "cpu",
                    "--warmup", "1"]


@pytest.fixture(scope="module")
def midi_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("midi")
    rng = random.Random(0)
    for piece in range(5):
        notes = []
        for i in range(30):
            start = i * 0.25
            notes.append(music.Note(rng.choice([60, 62, 64, 65, 67]), start, start + 0.2, rng.randint(40, 100)))
        music.write_midi(notes, root / f"piece{piece}.mid")
    return root


@pytest.fixture(scope="module")
def trained(midi_folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    assert main(["train", "music", "--data", str(midi_folder), "--max-steps", "4", "--out", str(out),
                 *TINY_PERFORMANCE]) == 0
    return out


def _no_traceback(err):
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 8


def test_train_writes_a_music_model(trained):
    config = json.loads((trained / "model" / "config.json").read_text())
    assert config["family"] == "music_transformer" and config["encoding"] == "performance"
    assert config["attention"]["name"] == "relative_skew"
    assert any("valid_nll" in line for line in (trained / "metrics.jsonl").read_text().splitlines())


def test_generate_music_writes_midi_png_and_wav(trained, midi_folder, tmp_path, capsys):
    out = tmp_path / "song.mid"
    args = ["generate-music", "--model", str(trained / "model"), "--primer", str(midi_folder / "piece0.mid"),
            "--length", "40", "--seed", "3", "--top-k", "20", "--out", str(out)]
    assert main(args) == 0
    notes = music.read_midi_notes(out)
    assert len(notes) >= 30  # the primer's notes at least
    assert out.with_suffix(".png").stat().st_size > 5000
    err = capsys.readouterr().err
    if find_synthesizer() is not None:
        assert out.with_suffix(".wav").read_bytes()[:4] == b"RIFF"
    else:
        assert "fluidsynth fluid-soundfont-gm" in err
    before = out.read_bytes()
    assert main(args) != 0  # no silent overwrite
    err = capsys.readouterr().err
    assert "--force" in err and out.read_bytes() == before
    _no_traceback(err)
    assert main([*args, "--force", "--no-audio", "--seed", "4"]) == 0


def test_evaluate_music_on_the_held_out_pieces(trained, midi_folder, tmp_path, capsys):
    result_file = tmp_path / "r.json"
    assert main(["evaluate-music", "--model", str(trained / "model"), "--data", str(midi_folder), "--context", "16",
                 "32", "--json", str(result_file), "--device", "cpu"]) == 0
    results = json.loads(result_file.read_text())["results"]
    assert [r["context"] for r in results] == [16, 32] and all(0 < r["nll"] < 10 for r in results)
    assert "nats/token" in capsys.readouterr().out


def test_evaluate_music_with_a_stride(trained, midi_folder, tmp_path, capsys):
    result_file = tmp_path / "r.json"
    args = ["evaluate-music", "--model", str(trained / "model"), "--data", str(midi_folder), "--device", "cpu"]
    assert main([*args, "--context", "16", "--stride", "4", "--json", str(result_file)]) == 0
    assert "context 16 (windows every 4): valid NLL" in capsys.readouterr().out
    strided = json.loads(result_file.read_text())["results"][0]
    assert main([*args, "--context", "16", "--json", str(result_file), "--force"]) == 0
    chunked = json.loads(result_file.read_text())["results"][0]
    assert strided["stride"] == 4 and "stride" not in chunked and strided["tokens"] == chunked["tokens"]
    capsys.readouterr()
    for bad, message in (("0", "--stride=0 must be between 1 and --context 32"),
                         ("17", "--stride=17 must be between 1 and --context 16")):
        assert main([*args, "--context", "32", "16", "--stride", bad, "--json", str(tmp_path / "no.json")]) == 2
        err = capsys.readouterr().err
        assert message in err, err
        _no_traceback(err)
    assert not (tmp_path / "no.json").exists()


def test_bad_inputs_give_one_clear_line(midi_folder, trained, tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "broken.mid").write_bytes(b"MThd\x00\x00\x00\x06\x00\x01")
    music.write_midi([music.Note(60, 0, 1, 80)], bad / "fine.mid")
    cases = [
        (["train", "music", "--data", str(bad), "--out", str(tmp_path / "o1"), *TINY_PERFORMANCE],
         str(bad / "broken.mid")),
        (["train", "music", "--data", str(tmp_path / "nothing"), "--out", str(tmp_path / "o2")], "not jsb, bach or"),
        (["train", "music", "--data", str(midi_folder), "--preset", "music_tiny", "--out", str(tmp_path / "o3")],
         "encoding is 'jsb'"),
        (["generate-music", "--model", str(trained / "model"), "--primer", str(bad / "broken.mid"), "--out",
          str(tmp_path / "x.mid")], str(bad / "broken.mid")),
        (["generate-music", "--model", str(trained / "model"), "--out", str(tmp_path / "x.wav")], "ending in .mid"),
        (["generate-music", "--model", str(trained / "model"), "--length", "9000", "--out", str(tmp_path / "x.mid")],
         "max_positions"),
        (["generate-music", "--model", str(trained / "model"), "--sample-rate", "100", "--out",
          str(tmp_path / "x.mid")], "--sample-rate=100"),
    ]
    for args, message in cases:
        assert main(args) != 0
        err = capsys.readouterr().err
        assert message in err, (args, err)
        _no_traceback(err)
    assert not (tmp_path / "o1").exists() and not (tmp_path / "x.mid").exists()


def test_train_and_evaluate_on_jsb(shared_data, tmp_path, capsys, monkeypatch):
    if not music.jsb_path(shared_data).is_file():
        pytest.skip("JSB Chorales not in the shared data")
    out = tmp_path / "jsb"
    assert main(["train", "music", "--data", "jsb", "--data-dir", str(shared_data), "--preset", "music_tiny",
                 "--context", "32", "--batch-size", "4", "--max-steps", "2", "--val-every", "2", "--val-batches", "1",
                 "--no-progress", "--out", str(out), "--device", "cpu"]) == 0
    assert main(["generate-music", "--model", str(out / "model"), "--primer", "jsb-valid:1", "--data-dir",
                 str(shared_data), "--length", "16", "--seed", "0", "--no-audio", "--out", str(tmp_path / "c.mid")]) == 0
    assert len(music.read_midi_notes(tmp_path / "c.mid")) > 0
    tokens = []
    for limit in ("2", "4"):  # --limit N: the first N validation chorales
        result = tmp_path / f"limit{limit}.json"
        assert main(["evaluate-music", "--model", str(out / "model"), "--context", "16", "--limit", limit,
                     "--json", str(result)]) == 0  # the data is where the model's music.json says
        assert f"scoring the first {limit} of the" in capsys.readouterr().out
        tokens.append(json.loads(result.read_text())["results"][0]["tokens"])
    assert 0 < tokens[0] < tokens[1]
    monkeypatch.setenv("ATTNLAB_DATA", str(tmp_path / "empty"))
    assert main(["evaluate-music", "--model", str(out / "model"), "--data", "jsb", "--data-dir",
                 str(tmp_path / "empty")]) != 0
    err = capsys.readouterr().err
    assert "JSB Chorales not found" in err and "ATTNLAB_DATA" in err


def test_fine_tune_a_music_transformer_with_init(midi_folder, trained, tmp_path, capsys):
    """--init: the saved model's weights and token encoding kept, its weights moved, the
    held-out NLL before and after printed, music.json and start.json in the new model."""
    import torch
    from safetensors.torch import load_file

    out = tmp_path / "ft"
    tiny = [arg for arg in TINY_PERFORMANCE if arg not in ("--preset", "music_performance_small")]
    tiny = [arg for i, arg in enumerate(tiny) if not (arg == "--set" or (i and tiny[i - 1] == "--set"))]
    capsys.readouterr()
    assert main(["train", "music", "--data", str(midi_folder), "--init", str(trained / "model"), "--max-steps", "3",
                 "--out", str(out), *tiny]) == 0
    err = capsys.readouterr().err
    assert "held-out before fine-tuning:" in err and "held-out: " in err and "nats per token" in err
    before, after = load_file(trained / "model" / "model.safetensors"), load_file(out / "model" / "model.safetensors")
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert (out / "model" / "music.json").is_file() and (out / "model" / "start.json").is_file()


def test_evaluate_music_without_data_scores_its_own_held_out_pieces(trained, midi_folder, tmp_path, capsys):
    # Issue 39, 4: no --data scores the model's own held-out pieces, in one line that says so;
    # a recorded folder that is gone is refused naming music.json, the folder and --data
    model = trained / "model"
    assert main(["evaluate-music", "--model", str(model), "--context", "16", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert f"scoring {model}'s own held-out data: the validation pieces of" in out and "(1 piece)" in out, out
    moved = with_record(model, tmp_path, "music.json", data=str(tmp_path / "deleted-folder"), data_dir=None)
    assert main(["evaluate-music", "--model", str(moved), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "music.json" in err and "deleted-folder" in err and "--data" in err, err
    _no_traceback(err)
