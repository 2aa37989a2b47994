"""attnlab train text-to-image / imagine with tiny models (the pipeline, not the quality)."""

import json

import pytest
from PIL import Image

from attnlab.cli.main import main

pytestmark = pytest.mark.usefixtures("single_thread")

TINY = ["--train-images", "100", "--vqvae-preset", "vqvae_tiny", "--vqvae-steps", "4", "--classifier-steps", "4",
        "--reader-images", "50",
        "--preset", "text_to_image_tiny", "--set", "grid=8", "--set", "text_length=24", "--max-steps", "4",
        "--eval-prompts", "4", "--no-progress", "--device", "cpu"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("t2i")
    assert main(["train", "text-to-image", "--out", str(out), *TINY]) == 0
    return out


def test_train_writes_the_model_with_its_vqvae_and_the_scores(trained):
    model = trained / "model"
    for name in ("config.json", "model.safetensors", "tokenizer.model", "text_to_image.json", "vqvae/config.json",
                 "vqvae/model.safetensors"):
        assert (model / name).is_file(), name
    assert (trained / "vqvae" / "model").is_dir() and (trained / "attributes" / "model").is_dir()
    results = json.loads((trained / "evaluation" / "results.json").read_text())
    assert results["vqvae"]["codebook_size"] == 32 and results["vqvae"]["psnr_test"] > 0
    for part in ("seen", "unseen"):
        assert results["fidelity"][part]["generated"]["prompts"] == 2
        assert "objects" in results["fidelity"][part]["real_test_images"]


def test_evaluate_verb(trained, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["evaluate-text-to-image", "--model", str(trained / "model"), "--prompts", "4", "--json", str(out),
                 "--grid", str(tmp_path / "g.png")]) == 0
    results = json.loads(out.read_text())
    assert results["fidelity"]["unseen"]["generated"]["prompts"] == 2 and results["vqvae"]["codebook_size"] == 32
    printed = capsys.readouterr().out
    assert (tmp_path / "g.png").is_file() and "fidelity (unseen" in printed
    # issue 39, 4: it says what it scored
    assert f"scoring {trained / 'model'}'s own held-out data: the held-out prompts of scenes test" in printed
    assert "(4 prompts)" in printed
    assert main(["evaluate-text-to-image", "--model", str(trained / "model"), "--classifier",
                 str(trained / "vqvae" / "model")]) == 2
    assert "not an attribute reader" in capsys.readouterr().err


def test_a_given_vqvae_and_classifier_are_reused(trained, tmp_path):
    out = tmp_path / "again"
    assert main(["train", "text-to-image", "--out", str(out), *TINY, "--vqvae", str(trained / "vqvae" / "model"),
                 "--classifier", str(trained / "attributes" / "model")]) == 0
    assert not (out / "vqvae").exists() and not (out / "attributes").exists()
    assert main(["train", "text-to-image", "--out", str(out), *TINY]) == 2  # refuses to overwrite


def test_imagine_writes_a_grid(trained, tmp_path):
    grid = tmp_path / "grid.png"
    assert main(["imagine", "--model", str(trained / "model"), "a red circle above a green triangle", "a blue square",
                 "--n", "3", "--out", str(grid), "--scale", "1"]) == 0
    with Image.open(grid) as image:
        assert image.size == (3 * 34 + 2, 2 * 34 + 2)


def test_imagine_reranks_with_a_captioner(trained, tmp_path):
    import attnlab
    from attnlab.data.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(trained / "model")
    captioner = attnlab.create_model("captioner_tiny", vocab_size=tokenizer.vocab_size)
    captioner.save_pretrained(tmp_path / "captioner")
    tokenizer.save(tmp_path / "captioner")
    grid = tmp_path / "grid.png"
    assert main(["imagine", "--model", str(trained / "model"), "a red circle", "--n", "2", "--candidates", "3",
                 "--rerank", str(tmp_path / "captioner"), "--out", str(grid), "--scale", "1"]) == 0
    with Image.open(grid) as image:
        assert image.size == (2 * 34 + 2, 34 + 2)
    assert main(["imagine", "--model", str(trained / "model"), "a red circle", "--rerank", str(trained / "model"),
                 "--out", str(tmp_path / "other.png")]) == 2  # not a captioner


def test_imagine_bad_prompts_are_one_line_errors(trained, tmp_path, capsys):
    grid = tmp_path / "grid.png"
    long = " and ".join(["a small red circle"] * 8)
    assert main(["imagine", "--model", str(trained / "model"), long, "--out", str(grid)]) == 2
    assert "text context holds 22" in capsys.readouterr().err
    assert main(["imagine", "--model", str(trained / "model"), "a Ωmega circle", "--out", str(grid)]) == 2
    assert "does not know: 'Ω'" in capsys.readouterr().err
    assert main(["imagine", "--model", str(trained / "model"), "a red circle", "--out", str(tmp_path / "g.jpg")]) == 2
    assert "ending in .png" in capsys.readouterr().err
    assert main(["imagine", "--model", str(trained / "vqvae" / "model"), "a red circle", "--out", str(grid)]) == 2
    assert "not a text-to-image model" in capsys.readouterr().err
    assert not grid.exists()


def test_an_interrupted_run_is_refused_naming_resume_and_resumes(trained, tmp_path, capsys):
    """Issue 39, point 14: a run stopped while its VQ-VAE trained left OUT/vqvae/checkpoints; the
    rerun said "pass resume=True" (a Python keyword) and the verb had no --resume."""
    import shutil

    out = tmp_path / "interrupted"
    shutil.copytree(trained / "vqvae" / "checkpoints", out / "vqvae" / "checkpoints")
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    assert main(["train", "text-to-image", "--out", str(out), *TINY]) == 2
    err = capsys.readouterr().err
    assert "--resume" in err and "resume=True" not in err and str(out / "vqvae") in err
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before  # nothing written
    assert main(["train", "text-to-image", "--out", str(out), *TINY, "--resume"]) == 0
    assert (out / "model" / "model.safetensors").is_file() and (out / "vqvae" / "model").is_dir()
