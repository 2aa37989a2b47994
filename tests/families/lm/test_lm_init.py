"""attnlab train lm --init DIR: a saved tiny character model fine-tuned on another text (its
tokenizer kept, no vocabulary learned, its weights moved, the held-out figure before and
after printed and logged); unknown characters reported and refused above --max-unknown;
--resume on other data refused for every family, pointing to --init (issue 39, point 2)."""

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from attnlab.cli.main import main

pytestmark = pytest.mark.usefixtures("single_thread")

RUN = ["--context", "16", "--batch-size", "4", "--val-every", "2", "--val-batches", "2", "--save-every", "2",
       "--no-progress", "--device", "cpu"]


@pytest.fixture(scope="module")
def start(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm")
    text = root / "a.txt"
    text.write_text("the quick brown fox jumps over the lazy dog.\n" * 30, encoding="utf-8")
    assert main(["train", "lm", "--text", str(text), "--preset", "lm_tiny", "--max-steps", "4", "--warmup", "1",
                 "--out", str(root / "run"), *RUN]) == 0
    return root / "run" / "model"


def test_fine_tune_keeps_the_tokenizer_and_prints_before_and_after(start, tmp_path, capsys):
    other = tmp_path / "b.txt"
    other.write_text("a lazy dog; the brown fox.\n" * 30 + "Z\n", encoding="utf-8")  # 'Z' and ';' are unknown
    out = tmp_path / "ft"
    capsys.readouterr()
    assert main(["train", "lm", "--text", str(other), "--init", str(start), "--max-steps", "4", "--out", str(out),
                 "--max-unknown", "5", *RUN]) == 0
    err = capsys.readouterr().err
    assert "% of the training text's characters are unknown to its tokenizer" in err
    assert "held-out before fine-tuning:" in err and "held-out: " in err and "nats per character" in err
    assert (out / "model" / "char_tokenizer.json").read_bytes() == (start / "char_tokenizer.json").read_bytes()
    before, after = load_file(start / "model.safetensors"), load_file(out / "model" / "model.safetensors")
    assert any(not torch.equal(before[k], after[k]) for k in before)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["step"] == 0 and records[0]["start_valid_nll"] > 0
    assert json.loads((out / "model" / "start.json").read_text())["format"] == "attnlab"
    capsys.readouterr()
    assert main(["generate", "--model", str(out / "model"), "--prompt", "the ", "--max-new-tokens", "3"]) == 0


def test_the_after_figure_scores_the_saved_weights_when_the_last_validation_was_earlier(start, tmp_path, capsys):
    """--max-steps 5 with --val-every 2: the last validation scored step 4's weights; the
    printed after-figure is the saved model's own held-out loss (step 5), as evaluate gives it."""
    other = tmp_path / "b.txt"
    other.write_text("the lazy dog and the brown fox.\n" * 30, encoding="utf-8")
    out = tmp_path / "ft"
    capsys.readouterr()
    assert main(["train", "lm", "--text", str(other), "--init", str(start), "--max-steps", "5", "--out", str(out),
                 *RUN]) == 0
    err = capsys.readouterr().err
    line = next(line for line in err.splitlines() if line.startswith("held-out: "))
    assert line.endswith("(the saved weights, step 5)"), line
    after = float(line.split(" -> ")[1].split()[0])
    import attnlab
    from attnlab.families.lm.task import load_lm_texts

    model = attnlab.load(out / "model")
    _, held_out = load_lm_texts([str(other)], None)
    ids = torch.tensor([model.tokenizer.encode(held_out)])
    windows = ids[:, : (ids.shape[1] - 1) // 16 * 16 + 1]
    losses = []
    with torch.no_grad():
        for begin in range(0, windows.shape[1] - 1, 16):
            chunk = windows[:, begin: begin + 17]
            logits = model.model(chunk[:, :-1]).double()
            losses.append(torch.nn.functional.cross_entropy(logits[0], chunk[0, 1:], reduction="none"))
    reference = torch.cat(losses).mean().item()
    assert math.isclose(after, reference, rel_tol=2e-3), (after, reference)


def test_an_option_given_at_its_default_value_is_given(start, tmp_path, capsys):
    """--lr 2e-3 is train lm's default: named on the command line it is the user's, not
    replaced by the fine-tuning tenth (it was: values equal to the default counted as not
    given); --warmup left out takes the fine-tuning share of --max-steps."""
    other = tmp_path / "b.txt"
    other.write_text("the lazy dog and the brown fox.\n" * 30, encoding="utf-8")
    capsys.readouterr()
    assert main(["train", "lm", "--text", str(other), "--init", str(start), "--max-steps", "4", "--lr", "2e-3",
                 "--out", str(tmp_path / "given"), *RUN]) == 0
    line = next(x for x in capsys.readouterr().err.splitlines() if x.startswith("fine-tuning:"))
    assert "peak --lr 0.002 (given)" in line and "(5% of --max-steps)" in line, line
    assert main(["train", "lm", "--text", str(other), "--init", str(start), "--max-steps", "4",
                 "--out", str(tmp_path / "default"), *RUN]) == 0
    line = next(x for x in capsys.readouterr().err.splitlines() if x.startswith("fine-tuning:"))
    assert "peak --lr 0.0002 (a tenth of the default)" in line, line


def test_a_checkpoint_directory_is_a_start_too(start, tmp_path, capsys):
    checkpoint = sorted((start.parent / "checkpoints").iterdir())[-1]
    text = tmp_path / "c.txt"
    text.write_text("the dog jumps over the fox.\n" * 30, encoding="utf-8")
    assert main(["train", "lm", "--text", str(text), "--init", str(checkpoint), "--max-steps", "2",
                 "--out", str(tmp_path / "ft"), *RUN]) == 0
    assert "attnlab checkpoint" in capsys.readouterr().err


def test_too_much_unknown_text_is_refused_naming_the_number_and_the_flag(start, tmp_path, capsys):
    text = tmp_path / "greek.txt"
    text.write_text("αβγδε ζηθ the\n" * 40, encoding="utf-8")
    out = tmp_path / "ft"
    assert main(["train", "lm", "--text", str(text), "--init", str(start), "--max-steps", "2", "--out", str(out),
                 *RUN]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "above --max-unknown 1" in err and "pass --max-unknown" in err and "%" in err
    assert not out.exists()


def test_architecture_flags_contradicting_init_are_refused(start, tmp_path, capsys):
    text = tmp_path / "d.txt"
    text.write_text("the lazy dog.\n" * 40, encoding="utf-8")
    cases = [(["--set", "num_layers=3"], "--set num_layers=3"), (["--tokenizer", "bpe"], "--tokenizer"),
             (["--context", "100"], "--context 100")]  # lm_tiny's learned positions stop at 64
    for extra, named in cases:
        out = tmp_path / "o"
        assert main(["train", "lm", "--text", str(text), "--init", str(start), "--max-steps", "2", "--out", str(out),
                     *RUN, *extra]) == 2, extra
        assert named in capsys.readouterr().err and not out.exists()
    # dropout may change, and is said
    assert main(["train", "lm", "--text", str(text), "--init", str(start), "--max-steps", "1", "--out",
                 str(tmp_path / "drop"), *RUN, "--set", "dropout=0.1"]) == 0
    assert "dropout 0.0 -> 0.1" in capsys.readouterr().err


def test_fine_tune_a_huggingface_gpt2_directory(tmp_path, capsys):
    """--init on a HuggingFace GPT-2 directory: its byte-level BPE kept (vocab.json, merges.txt
    saved beside the attnlab weights), the weights moved, and the result opens as a language model."""
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from tests.interop.test_hf_gpt2_directory import TEXT, gpt2_dir

    directory, _ = gpt2_dir.__wrapped__(_Factory(tmp_path))
    text = tmp_path / "t.txt"
    text.write_text(TEXT * 3, encoding="utf-8")
    out = tmp_path / "ft"
    assert main(["train", "lm", "--text", str(text), "--init", str(directory), "--max-steps", "3", "--out", str(out),
                 *RUN]) == 0
    err = capsys.readouterr().err
    assert "huggingface gpt2" in err and "held-out: " in err and "nats per token" in err
    for name in ("vocab.json", "merges.txt"):
        assert (out / "model" / name).read_bytes() == (directory / name).read_bytes()
    import attnlab

    pipeline = attnlab.load(out / "model")
    assert pipeline.tokenizer.encode("ROMEO") == attnlab.load(directory).tokenizer.encode("ROMEO")
    assert json.loads((out / "model" / "start.json").read_text())["format"] == "huggingface gpt2"


class _Factory:
    def __init__(self, root):
        self.root = root

    def mktemp(self, name):
        path = self.root / name
        path.mkdir()
        return path


def test_evaluate_without_text_scores_the_models_own_held_out_text(tmp_path, capsys):
    """Issue 39, point 4: a model trained on the user's text (an alphabet without 'E') was scored on
    Shakespeare by `evaluate --model DIR`, which then failed blaming --text, never given."""
    text = tmp_path / "mine.txt"
    text.write_text("the quick brown fox jumps over the lazy dog.\n" * 40, encoding="utf-8")
    out = tmp_path / "run"
    assert main(["train", "lm", "--text", str(text), "--preset", "lm_tiny", "--max-steps", "2", "--warmup", "1",
                 "--out", str(out), *RUN]) == 0
    assert json.loads((out / "model" / "lm.json").read_text())["text"] == [str(text.resolve())]
    capsys.readouterr()
    assert main(["evaluate", "--model", str(out / "model"), "--limit", "50"]) == 0
    said = capsys.readouterr().out
    assert "the model's own held-out text (the last 10% of" in said and str(text.resolve()) in said
    text.unlink()
    assert main(["evaluate", "--model", str(out / "model")]) == 2
    err = capsys.readouterr().err
    assert "lm.json" in err and "--text" in err and "is gone" in err
    # a model without lm.json is scored on Shakespeare, which this alphabet cannot read: the
    # error names Shakespeare, not --text (never given)
    (out / "model" / "lm.json").unlink()
    assert main(["evaluate", "--model", str(out / "model")]) == 2
    err = capsys.readouterr().err
    assert "Shakespeare" in err and "(no --text given)" in err and "error: --text" not in err, err
