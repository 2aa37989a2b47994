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
    # The default length fits the context (32 here, not 200 tokens), and says so; an explicit
    # --max-new-tokens past the context is refused naming the flag.
    capsys.readouterr()
    assert main(["generate", "--model", str(model_dir), "--prompt", "the ", "--greedy"]) == 0
    captured = capsys.readouterr()
    assert "generating 28 new tokens: the prompt has 4 and the model's context holds 32" in captured.err
    assert len(captured.out) == len("the ") + 28 + 1
    assert main(["generate", "--model", str(model_dir), "--prompt", "the ", "--max-new-tokens", "200"]) == 2
    assert "--max-new-tokens 200: the prompt has 4 tokens and the model's context holds 32" in capsys.readouterr().err
    # --compile aot needs a fixed capacity: refused with --sliding-window, naming both flags, before a word is
    # printed; the default (--compile auto) slides eagerly
    assert main(["generate", "--model", str(model_dir), "--prompt", "the ", "--sliding-window", "--compile", "aot"]) == 2
    captured = capsys.readouterr()
    assert "--compile aot decodes with a cache of fixed capacity; it cannot go with --sliding-window" in captured.err
    assert captured.out == ""
    assert main(["generate", "--model", str(model_dir), "--prompt", "the ", "--sliding-window", "--max-new-tokens",
                 "40", "--seed", "1"]) == 0
    assert len(capsys.readouterr().out) == len("the ") + 40 + 1


def test_train_then_generate_bpe(tmp_path, capsys):
    from attnlab.families.lm.generate import Continuation
    from attnlab.data.text import LineTokenizer, load_lm_tokenizer

    lines = ["the quick brown fox jumps over the lazy dog.", "", "ROMEO:", "a dog, a fox and the end."]
    text = tmp_path / "text.txt"
    text.write_text("\n".join(lines * 20) + "\n", encoding="utf-8")
    assert main(["train", "lm", "--tokenizer", "bpe", "--vocab-size", "60", "--text", str(text), "--preset", "lm_tiny",
                 "--context", "32", "--batch-size", "8", "--max-steps", "3", "--warmup", "1", "--val-every", "0",
                 "--save-every", "2", "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    model_dir = tmp_path / "run" / "model"
    assert (model_dir / "tokenizer.model").is_file() and not (model_dir / "char_tokenizer.json").exists()
    assert list((tmp_path / "run" / "checkpoints").glob("*/tokenizer.model"))
    tokenizer = load_lm_tokenizer(model_dir)
    assert isinstance(tokenizer, LineTokenizer) and tokenizer.vocab_size == 60
    assert attnlab.load_model(model_dir).config.vocab_size == 60
    # The stream encoding keeps line breaks (blank lines included) as the EOS id.
    sample = "ROMEO:\nthe lazy dog.\n\na fox and the end.\n"
    ids = tokenizer.encode(sample)
    assert tokenizer.decode(ids) == sample and ids.count(tokenizer.newline_id) == 4
    # Decoding a token at a time gives the text that decoding all at once gives.
    prompt, rest = ids[:3], ids[3:]
    continuation = Continuation(tokenizer, prompt)
    assert tokenizer.decode(prompt) + "".join(continuation.add(t) for t in rest) == sample
    capsys.readouterr()
    assert main(["generate", "--model", str(model_dir), "--prompt", "ROMEO:", "--max-new-tokens", "6",
                 "--greedy"]) == 0
    streamed = capsys.readouterr().out
    assert streamed.startswith("ROMEO:")
    assert main(["generate", "--model", str(model_dir), "--prompt", "ROMEO:", "--prompt", "the", "--max-new-tokens",
                 "6", "--greedy"]) == 0
    batch = capsys.readouterr().out
    assert batch.startswith(streamed)  # the batch prints the same greedy text as the stream


def test_train_lm_says_what_it_trains_and_clamps_a_long_warmup(tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog.\n" * 20, encoding="utf-8")
    # --warmup (default 100) longer than the run: warm up for a tenth of it, with a note.
    assert main(["train", "lm", "--text", str(text), "--preset", "lm_tiny", "--context", "32", "--batch-size", "8",
                 "--max-steps", "30", "--val-every", "30", "--val-batches", "1", "--save-every", "0",
                 "--device", "cpu", "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "--warmup 100 exceeds --max-steps 30: warming up for 3 updates" in captured.err
    assert "training and" in captured.err and "validation tokens" in captured.err  # the data
    parameters = attnlab.load_model(tmp_path / "run" / "model").num_parameters()
    assert f"{parameters:,d} parameters" in captured.err and "device: cpu" in captured.err
    done = [line for line in captured.err.splitlines() if line.startswith("done: 30 updates")]
    assert done and "valid_loss" in done[0] and "nats per character" in done[0]
    assert "step 30: valid_loss" in captured.err  # validation reaches the screen, not only metrics.jsonl


def test_refused_train_lm_writes_nothing(tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text("some text\n" * 5, encoding="utf-8")
    out = tmp_path / "run"
    assert main(["train", "lm", "--text", str(text), "--preset", "lm_tiny", "--max-steps", "0",
                 "--out", str(out)]) == 2
    assert "--max-steps=0" in capsys.readouterr().err and not out.exists()
