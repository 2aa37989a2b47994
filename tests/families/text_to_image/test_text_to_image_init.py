"""attnlab train text-to-image --init DIR (issue 37): a saved text-to-image model fine-tuned on
the lifecycle; its VQ-VAE, caption vocabulary and attribute reader come from DIR."""

import json

import pytest
import torch
from safetensors.torch import load_file

from attnlab.cli.main import main

pytestmark = pytest.mark.usefixtures("single_thread")

TINY = ["--train-images", "60", "--max-steps", "3", "--eval-prompts", "2", "--no-progress", "--device", "cpu"]
FRESH = ["--vqvae-preset", "vqvae_tiny", "--vqvae-steps", "2", "--classifier-steps", "2", "--reader-images", "20",
         "--preset", "text_to_image_tiny", "--set", "grid=8", "--set", "text_length=24"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    out = tmp_path_factory.mktemp("t2i_start") / "run"
    assert main(["train", "text-to-image", "--out", str(out), *TINY, *FRESH]) == 0
    return out / "model"


def _same_tensors(a, b) -> bool:
    a, b = load_file(a), load_file(b)
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_init_fine_tunes_a_saved_model_keeping_its_vqvae_vocabulary_and_reader(saved, tmp_path, capsys):
    out = tmp_path / "tuned"
    capsys.readouterr()
    assert main(["train", "text-to-image", "--init", str(saved), "--out", str(out), *TINY]) == 0
    err = capsys.readouterr().err
    assert (f"--init {saved}: the VQ-VAE and the caption vocabulary come from it, the attribute reader from "
            f"{saved / 'attributes'}; no auxiliary model is trained") in err
    assert "VQ-VAE: " not in err and "attribute reader: " not in err  # neither trained
    assert not (out / "vqvae").exists() and not (out / "attributes").exists()
    before = [line for line in err.splitlines() if line.startswith("held-out before fine-tuning: ")]
    after = [line for line in err.splitlines() if line.startswith("held-out: ")]
    assert len(before) == 1 and len(after) == 1 and "nats per image token" in after[0]
    model = out / "model"
    assert not _same_tensors(saved / "model.safetensors", model / "model.safetensors")  # the weights moved
    assert (model / "tokenizer.model").read_bytes() == (saved / "tokenizer.model").read_bytes()
    for part in ("vqvae", "attributes"):
        assert _same_tensors(saved / part / "model.safetensors", model / part / "model.safetensors"), part
    assert json.loads((model / "config.json").read_text())["text_vocab_size"] == \
        json.loads((saved / "config.json").read_text())["text_vocab_size"]
    start = json.loads((model / "start.json").read_text())
    assert start["init"] == str(saved.resolve()) and start["format"] == "attnlab" and "weights_sha256" in start
    assert (out / "evaluation" / "results.json").is_file()
    assert main(["imagine", "--model", str(model), "a red circle", "--out", str(tmp_path / "g.png")]) == 0

    # --resume continues the same run on the same data only
    capsys.readouterr()
    assert main(["train", "text-to-image", "--init", str(saved), "--out", str(out), *TINY, "--train-images", "50",
                 "--resume"]) == 2
    assert "--train-images differ(s)" in capsys.readouterr().err


def test_init_refusals_are_one_line_and_write_nothing(saved, tmp_path, capsys):
    out = tmp_path / "refused"
    assert main(["train", "text-to-image", "--init", str(saved), "--vqvae", str(saved / "vqvae"), "--out", str(out),
                 *TINY]) == 2
    assert "--vqvae with --init: the VQ-VAE comes from --init" in capsys.readouterr().err
    assert main(["train", "text-to-image", "--init", str(saved / "vqvae"), "--out", str(out), *TINY]) == 2
    assert "--init " in capsys.readouterr().err.strip().splitlines()[-1]
    assert main(["train", "text-to-image", "--lora", "2", "--out", str(out), *TINY]) == 2
    assert "--lora 2 needs --init" in capsys.readouterr().err
    assert not out.exists()


def test_lora_fine_tunes_through_the_lifecycle(saved, tmp_path, capsys):
    out = tmp_path / "lora"
    assert main(["train", "text-to-image", "--init", str(saved), "--lora", "2", "--out", str(out), *TINY]) == 0
    assert "LoRA: adapters merged into the saved model" in capsys.readouterr().err
    assert not _same_tensors(saved / "model.safetensors", out / "model" / "model.safetensors")


def test_init_from_a_directory_without_a_reader_trains_only_the_reader(saved, tmp_path, capsys):
    """A text-to-image directory written before OUT/model kept the attribute reader: the VQ-VAE
    and vocabulary still come from it; the reader is trained on its share (said)."""
    import shutil

    older = tmp_path / "older"
    shutil.copytree(saved, older)
    shutil.rmtree(older / "attributes")
    out = tmp_path / "tuned"
    capsys.readouterr()
    assert main(["train", "text-to-image", "--init", str(older), "--out", str(out), *TINY, "--classifier-steps", "2",
                 "--reader-images", "20"]) == 0
    err = capsys.readouterr().err
    assert "it holds no attribute reader: one is trained" in err and "attribute reader: 2 of 2 updates" in err
    assert not (out / "vqvae").exists() and (out / "attributes" / "model").is_dir()
    assert _same_tensors(saved / "vqvae" / "model.safetensors", out / "model" / "vqvae" / "model.safetensors")
