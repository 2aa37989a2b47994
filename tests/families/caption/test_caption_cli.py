"""attnlab train caption / caption / evaluate-caption on a tiny COCO-format folder of scenes."""

import json

import pytest

from attnlab.cli.main import main
from families.conftest import with_record
from attnlab.data.images import to_bytes_png
from attnlab.data.scenes import load_scenes

pytestmark = pytest.mark.usefixtures("single_thread")

TINY = ["--preset", "captioner_tiny", "--set", "max_positions=12", "--batch-size", "16", "--val-every", "4", "--save-every", "4", "--no-progress",
        "--device", "cpu", "--lr", "3e-3", "--warmup", "2", "--beam", "2"]


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    """40 scenes as PNG files with a COCO captions JSON."""
    root = tmp_path_factory.mktemp("coco")
    scenes = load_scenes("valid", count=40)
    (root / "images").mkdir()
    images, notes = [], []
    for i, (image, captions) in enumerate(zip(scenes.images, scenes.captions)):
        (root / "images" / f"{i:03d}.png").write_bytes(to_bytes_png(image))
        images.append({"id": i, "file_name": f"{i:03d}.png"})
        notes += [{"image_id": i, "caption": c} for c in captions]
    (root / "captions.json").write_text(json.dumps({"images": images, "annotations": notes}))
    return root


@pytest.fixture(scope="module")
def trained(coco, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    assert main(["train", "caption", "--data", f"coco:{coco}", "--max-steps", "8", "--out", str(out), *TINY]) == 0
    return out


def test_train_writes_model_checkpoints_and_scores(trained, coco):
    model = trained / "model"
    for name in ("config.json", "model.safetensors", "tokenizer.model", "caption.json"):
        assert (model / name).is_file()
    assert json.loads((model / "caption.json").read_text())["data"] == f"coco:{coco}"
    results = json.loads((trained / "evaluation" / "results.json").read_text())
    assert results["images"] == 2 and 0.0 <= results["bleu4"] <= 1.0 and results["cider"] >= 0.0
    assert results["empty_captions"] == 0  # EOS never comes first
    assert (trained / "checkpoints").is_dir() and (trained / "metrics.jsonl").is_file()


def test_a_second_run_into_the_same_directory_is_refused(trained, coco, capsys):
    assert main(["train", "caption", "--data", f"coco:{coco}", "--max-steps", "8", "--out", str(trained), *TINY]) == 2
    assert "--resume" in capsys.readouterr().err


def test_caption_and_attention_figures(trained, coco, tmp_path, capsys):
    images = [str(coco / "images" / "000.png"), str(coco / "images" / "001.png")]
    figures = tmp_path / "figures"
    assert main(["caption", "--model", str(trained / "model"), *images, "--attention-dir", str(figures)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split("\t")[0] for line in lines] == images and all(line.split("\t")[1] for line in lines)
    assert sorted(p.name for p in figures.iterdir()) == ["000.png", "001.png"]
    assert main(["caption", "--model", str(trained / "model"), *images, "--sample", "--temperature", "0.7",
                 "--top-k", "5", "--seed", "3"]) == 0
    sampled = capsys.readouterr().out
    assert main(["caption", "--model", str(trained / "model"), *images, "--sample", "--temperature", "0.7",
                 "--top-k", "5", "--seed", "3"]) == 0
    assert capsys.readouterr().out == sampled and len(sampled.strip().splitlines()) == 2


def test_evaluate_on_scenes_reports_grounding(trained, tmp_path, capsys):
    out = tmp_path / "results.json"
    assert main(["evaluate-caption", "--model", str(trained / "model"), "--data", "scenes", "--limit", "6",
                 "--json", str(out), "--figures", str(tmp_path / "f"), "--figures-count", "2"]) == 0
    results = json.loads(out.read_text())
    assert results["images"] == 6 and results["seen"]["images"] == 3 and results["unseen"]["images"] == 3
    assert "grounding" in results and "unmatched" in results
    assert len(list((tmp_path / "f").iterdir())) == 2
    assert "BLEU-4" in capsys.readouterr().out


def test_bad_inputs_are_one_line_errors(trained, tmp_path, capsys):
    assert main(["caption", "--model", str(trained / "model"), str(tmp_path / "missing.png")]) == 2
    assert "missing.png: no such image file" in capsys.readouterr().err
    (tmp_path / "bad.png").write_text("not an image")
    assert main(["caption", "--model", str(trained / "model"), str(tmp_path / "bad.png")]) == 2
    assert "bad.png: not a readable image" in capsys.readouterr().err
    assert main(["caption", "--model", str(tmp_path / "nothing"), str(tmp_path / "bad.png")]) == 2
    assert "config.json: no such file" in capsys.readouterr().err
    assert main(["train", "caption", "--data", f"flickr:{tmp_path}", "--out", str(tmp_path / "o"), *TINY]) == 2
    err = capsys.readouterr().err
    assert "no Flickr captions file" in err and "Traceback" not in err
    assert main(["train", "caption", "--data", "scenes", "--preset", "lm_tiny", "--out", str(tmp_path / "o")]) == 2
    assert "not a captioner preset" in capsys.readouterr().err


def test_fine_tune_a_captioner_with_init(coco, trained, tmp_path, capsys):
    """--init: the saved captioner's weights and vocabulary kept (none learned), its weights moved,
    the held-out perplexity before and after printed."""
    import torch
    from safetensors.torch import load_file

    out = tmp_path / "ft"
    run = [arg for i, arg in enumerate(TINY) if arg not in ("--preset", "captioner_tiny", "--set", "max_positions=12")]
    capsys.readouterr()
    assert main(["train", "caption", "--data", f"coco:{coco}", "--init", str(trained / "model"), "--max-steps", "4",
                 "--out", str(out), *run]) == 0
    err = capsys.readouterr().err
    assert "held-out before fine-tuning:" in err and "held-out: " in err and "validation perplexity" in err
    model = trained / "model"
    assert (out / "model" / "tokenizer.model").read_bytes() == (model / "tokenizer.model").read_bytes()
    before, after = load_file(model / "model.safetensors"), load_file(out / "model" / "model.safetensors")
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert (out / "model" / "start.json").is_file() and (out / "evaluation" / "results.json").is_file()


def test_evaluate_without_data_scores_the_models_own_held_out_images(trained, coco, tmp_path, capsys):
    # Issue 39, 4: no --data scores the model's own test images, in one line that says so;
    # a recorded folder that is gone is refused naming caption.json, the folder and --data
    model = trained / "model"
    assert main(["evaluate-caption", "--model", str(model), "--beam", "1"]) == 0
    out = capsys.readouterr().out
    assert f"scoring {model}'s own held-out data: coco:{coco} test (2 images)" in out, out
    moved = with_record(model, tmp_path, "caption.json", data=f"coco:{tmp_path / 'deleted-folder'}")
    assert main(["evaluate-caption", "--model", str(moved)]) == 2
    err = capsys.readouterr().err
    assert "caption.json" in err and "deleted-folder" in err and "--data" in err, err


def test_compile_aot_without_a_compiler_says_why_and_captions_eagerly(trained, coco, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    run = ["caption", "--model", str(trained / "model"), str(coco / "images" / "000.png"),
           str(coco / "images" / "001.png")]
    for extra in (["--beam", "2"], ["--sample", "--seed", "3"]):
        assert main([*run, *extra]) == 0
        eager = capsys.readouterr().out
        with pytest.warns(RuntimeWarning, match="no-such-c\\+\\+' is not found; decoding eagerly") as said:
            assert main([*run, *extra, "--compile", "aot"]) == 0
        assert len([w for w in said if "decoding eagerly" in str(w.message)]) == 1
        assert capsys.readouterr().out == eager
    assert not list(tmp_path.rglob("*.pt2"))
    with pytest.raises(SystemExit) as exit:  # argparse's choices: its usage line, status 2
        main([*run, "--compile", "fast"])
    assert exit.value.code == 2 and "argument --compile: invalid choice: 'fast'" in capsys.readouterr().err


def test_a_warning_reaches_the_user_as_one_line_naming_the_verb(trained, coco, tmp_path, monkeypatch, capsys):
    """The CLI's printed form of a warning is one line naming the verb, not the source path and
    code line of the place that warned."""
    import sys
    import warnings

    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    run = ["caption", "--model", str(trained / "model"), str(coco / "images" / "000.png"),
           str(coco / "images" / "001.png"), "--beam", "2", "--compile", "aot"]
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        # print to stderr as Python does outside pytest's recorder (through warnings.formatwarning)
        warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: \
            sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))
        assert main(run) == 0
    err = capsys.readouterr().err
    assert "attnlab caption: warning: compile='aot': " in err and "decoding eagerly" in err
    assert ".py:" not in err and "RuntimeWarning" not in err


@pytest.mark.slow
def test_compile_then_caption_through_the_package(trained, coco, tmp_path, monkeypatch, capsys):
    import warnings

    from attnlab.generation import aot
    from attnlab.generation.compiled import unavailable_reason

    if unavailable_reason() is not None:
        pytest.skip(str(unavailable_reason()))
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    model = str(trained / "model")
    assert main(["compile", "--model", model]) == 0  # the captioner's own default beam, 3
    out = capsys.readouterr().out
    assert "search step, beam 3" in out and len(list((tmp_path / "aot").glob("*.pt2"))) == 1

    def build(*args, **kwargs):
        raise AssertionError("attnlab caption --compile aot built a package that attnlab compile had built")

    monkeypatch.setattr(aot, "_build", build)
    images = [str(coco / "images" / f"{i:03d}.png") for i in range(4)]
    assert main(["caption", "--model", model, *images]) == 0
    eager = capsys.readouterr().out
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no fallback: the package is loaded
        assert main(["caption", "--model", model, *images, "--compile", "aot"]) == 0
    assert capsys.readouterr().out == eager
