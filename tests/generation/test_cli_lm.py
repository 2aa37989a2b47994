"""`attnlab train lm` and `attnlab generate` end to end on a tiny text."""

import attnlab
from attnlab.cli.main import main


def test_train_then_generate(tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog.\n" * 20, encoding="utf-8")
    # Through the CLI's own entry point: `attnlab train lm ...`.
    assert main(["train", "lm", "--text", str(text), "--preset", "lm_tiny", "--context", "32", "--batch-size", "8",
                 "--max-steps", "4", "--warmup", "1", "--val-every", "2", "--val-batches", "1",
                 "--save-every", "0", "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    model_dir = tmp_path / "run" / "model"
    config = attnlab.load_model(model_dir).config
    assert config.vocab_size == len(set(text.read_text())) and config.max_positions == 32  # = --context
    capsys.readouterr()
    assert main(["generate", "--model", str(model_dir), "--prompt", "the ", "--max-new-tokens", "5",
                 "--greedy"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("the ") and len(out) == len("the ") + 5 + 1
    assert main(["generate", "--model", str(model_dir), "--prompt", "the Z"]) == 2  # unknown character
