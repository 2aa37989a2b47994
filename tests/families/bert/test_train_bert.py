"""attnlab train bert: the windows, BERT's 80/10/10 masking, the loss against a float64
reference, a tiny real run whose masked-LM loss falls and whose held-out figures are
evaluate-bert's, --init from a BERT with and without a masked-LM head, and the refusals."""

from __future__ import annotations

import json
import math

import pytest
import torch

from attnlab.cli.main import main

pytest.importorskip("tokenizers")

WORDS = "the a dog cat man woman runs sleeps eats plays on in park house red blue big small".split()


def _text(rows: int, seed: int = 0) -> str:
    """Sentences of a small grammar: subject verb place (predictable words to learn)."""
    import random

    rng = random.Random(seed)
    lines = []
    for _ in range(rows):
        lines.append(f"the {rng.choice(['big', 'small'])} {rng.choice(['dog', 'cat'])} {rng.choice(['runs', 'sleeps'])} "
                     f"in the {rng.choice(['park', 'house'])} .")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from attnlab.tasks.bert import learn_wordpiece

    return learn_wordpiece(_text(200).splitlines(), tmp_path_factory.mktemp("vocab"), vocab_size=200, max_length=32)


# -- windows and masking -----------------------------------------------------------------
def test_sentence_windows_hold_whole_lines_and_packed_windows_are_full(tokenizer):
    from attnlab.families.bert.task import text_windows, tokenize_lines

    lines = [" ".join(["the dog ."] * n) for n in (1, 3, 2, 9, 1, 1)]  # the 9-fold line is longer than a window
    ids = tokenize_lines(tokenizer, lines)
    assert [len(line) for line in ids] == [3, 9, 6, 27, 3, 3]  # three whole-word tokens a phrase
    cls, sep = tokenizer.tokenizer.token_to_id("[CLS]"), tokenizer.tokenizer.token_to_id("[SEP]")
    stream = [t for line in ids for t in line]
    for mode in ("sentences", "packed"):
        windows = text_windows(tokenizer, lines, context=12, mode=mode)
        assert all(int(w[0]) == cls and int(w[-1]) == sep and len(w) <= 12 for w in windows)
        assert [t for w in windows for t in w[1:-1].tolist()] == stream  # every token once, in order
        bodies = [len(w) - 2 for w in windows]
        if mode == "packed":
            assert all(n == 10 for n in bodies[:-1])
        else:  # whole lines (3, 9, 6, 27, 3, 3 tokens) while they fit; the 27-token line cut into windows
            assert bodies == [3, 9, 6, 10, 10, 10, 3]


def test_masking_is_berts_80_10_10(tokenizer):
    from attnlab.families.bert.task import MaskedWindows

    windows = [torch.randint(5, tokenizer.vocab_size, (30,)) for _ in range(400)]
    cls, sep = tokenizer.tokenizer.token_to_id("[CLS]"), tokenizer.tokenizer.token_to_id("[SEP]")
    windows = [torch.cat([torch.tensor([cls]), w, torch.tensor([sep])]) for w in windows]
    source = MaskedWindows(windows, batch_size=400, tokenizer=tokenizer, seed=3)
    batch = source.mask(windows, torch.Generator().manual_seed(3))  # what each of its batches is
    original = torch.stack(windows)
    chosen = batch["targets"] != -100
    assert torch.equal(batch["targets"][chosen], original[chosen])
    assert not chosen[:, 0].any() and not chosen[:, -1].any()  # never [CLS]/[SEP]
    assert torch.equal(batch["ids"][~chosen], original[~chosen])  # only chosen tokens change
    share = chosen.float().mean().item() * 32 / 30
    assert 0.14 < share < 0.16  # 15 % of the 12,000 candidates (sd 0.3 %)
    mask_id = tokenizer.tokenizer.token_to_id("[MASK]")
    masked = (batch["ids"][chosen] == mask_id).float().mean().item()
    kept = (batch["ids"][chosen] == original[chosen]).float().mean().item()
    assert 0.76 < masked < 0.84 and 0.07 < kept < 0.14  # 80 % [MASK]; 10 % kept (+ random hits of itself)
    assert 0.06 < 1 - masked - kept < 0.13  # 10 % a random other token


def test_masked_batches_resume_exactly(tokenizer):
    from attnlab.families.bert.task import MaskedWindows, text_windows

    windows = text_windows(tokenizer, _text(80).splitlines(), context=16)
    source = MaskedWindows(windows, batch_size=4, tokenizer=tokenizer, seed=1)
    stream = _forever(source)
    for _ in range(3):
        next(stream)
    state = source.state_dict()
    expected = [next(stream) for _ in range(len(source))]  # crosses into the next epoch
    again = MaskedWindows(windows, batch_size=4, tokenizer=tokenizer, seed=1)
    again.load_state_dict(state)
    got = [b for _, b in zip(range(len(expected)), _forever(again))]
    assert all(torch.equal(a[k], b[k]) for a, b in zip(expected, got) for k in a)


def _forever(source):
    while True:
        yield from source


def test_the_loss_equals_a_float64_reference(tokenizer):
    from attnlab import create_model
    from attnlab.families.bert.task import MaskedWindows, mlm_loss, text_windows

    torch.manual_seed(0)
    model = create_model("bert_tiny", vocab_size=tokenizer.vocab_size).eval()
    batch = next(iter(MaskedWindows(text_windows(tokenizer, _text(40).splitlines(), context=16), batch_size=8,
                                    tokenizer=tokenizer, seed=0)))
    loss, count, logs = mlm_loss(model, batch)
    reference = model.double()
    with torch.no_grad():
        hidden = reference(batch["ids"], attention_mask=batch["attention_mask"]).hidden
        logits = reference.mlm_logits(hidden)  # every position, then picked: the plain way
    log_probs = torch.log_softmax(logits, -1)
    total, hits = 0.0, 0
    for row, column in (batch["targets"] != -100).nonzero().tolist():
        target = int(batch["targets"][row, column])
        total -= float(log_probs[row, column, target])
        hits += int(log_probs[row, column].argmax()) == target
    assert count == int((batch["targets"] != -100).sum()) > 0
    assert float(loss.detach()) == pytest.approx(total, rel=1e-5)
    assert float(logs["nll"]) == pytest.approx(total, rel=1e-5) and int(logs["correct"]) == hits


# -- the verb ------------------------------------------------------------------------------
TINY = ["--set", "num_layers=2", "--set", "d_model=64", "--set", "num_heads=4", "--set", "d_ff=128"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny real run: 120 updates on 300 lines of the grammar, held out 40 other lines."""
    root = tmp_path_factory.mktemp("bert")
    (root / "train.txt").write_text(_text(300, seed=1))
    (root / "valid.txt").write_text(_text(40, seed=2))
    out = root / "run"
    argv = ["train", "bert", "--text", str(root / "train.txt"), "--valid-text", str(root / "valid.txt"),
            "--vocab-size", "60", "--context", "24", "--batch-size", "16", "--max-steps", "120", "--lr", "2e-3",
            "--warmup", "10", "--val-every", "60", "--no-progress", "--out", str(out), *TINY]
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(argv) == 0
    return root, out, err.getvalue()


def test_a_tiny_run_learns_and_scores_as_evaluate_bert(trained, capsys):
    root, out, log = trained
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "loss" in r]
    assert losses[-1] < losses[0] - 1.0  # the masked-LM loss falls (the grammar is predictable)
    assert {"config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"} <= {
        p.name for p in (out / "model").iterdir()}
    line = next(line for line in log.splitlines() if line.startswith("held-out"))
    accuracy = float(line.split("accuracy ")[1].split(",")[0])
    # the same figures from attnlab evaluate (routed to evaluate-bert) on the held-out text
    assert main(["evaluate", "--model", str(out / "model"), "--text", str(root / "valid.txt"), "--no-progress",
                 "--json", str(root / "scores.json")]) == 0
    scores = json.loads((root / "scores.json").read_text())
    assert f"masked-token accuracy {scores['accuracy']:.4f}, {scores['nll']:.4f} nats" in line
    # far from an untrained model's ln 60 = 4.1 nats and 1/60: half the masked words follow from their
    # neighbours (the, in, .), the others are coin flips (big/small, dog/cat, ...)
    assert accuracy > 0.3 and scores["nll"] < 0.5 * math.log(60)
    # without --text: the model's own held-out text (its --valid-text, from bert.json), said, the
    # same figures (it scored Multi30k's test captions before)
    capsys.readouterr()
    assert main(["evaluate", "--model", str(out / "model"), "--no-progress", "--json", str(root / "own.json")]) == 0
    said = capsys.readouterr().out
    assert f"the model's own held-out text (--valid-text {(root / 'valid.txt').resolve()}, from bert.json)" in said
    assert json.loads((root / "own.json").read_text())["accuracy"] == scores["accuracy"]


def test_under_a_time_budget_the_final_scores_are_still_evaluate_berts(tmp_path, capsys):
    # With --max-minutes the final scoring may be cut, so it takes its batches in a random order; it
    # used to mask the lines in that order too, and printed other figures than evaluate-bert's
    # ("evaluate-bert's protocol: 0.3153 over 2,185 masked tokens" against evaluate's 0.3123 over 2,216).
    (tmp_path / "train.txt").write_text(_text(200, seed=5))
    (tmp_path / "valid.txt").write_text(_text(100, seed=6))  # four scoring batches of up to 32 lines
    out = tmp_path / "run"
    assert main(["train", "bert", "--text", str(tmp_path / "train.txt"), "--valid-text", str(tmp_path / "valid.txt"),
                 "--vocab-size", "60", "--context", "24", "--batch-size", "16", "--max-steps", "3", "--warmup", "1",
                 "--max-minutes", "30", "--no-progress", "--out", str(out), *TINY]) == 0
    line = next(line for line in capsys.readouterr().err.splitlines() if line.startswith("held-out"))
    assert line.startswith("held-out (100 lines), evaluate-bert's protocol")
    assert main(["evaluate", "--model", str(out / "model"), "--no-progress", "--json", str(tmp_path / "s.json")]) == 0
    scores = json.loads((tmp_path / "s.json").read_text())
    assert (f"masked-token accuracy {scores['accuracy']:.4f}, {scores['nll']:.4f} nats per masked token "
            f"(perplexity {scores['perplexity']:.2f}) over {scores['masked_tokens']:,d} masked tokens") in line
    assert f"({scores['most_frequent_token']!r}) would score {scores['most_frequent_share']:.4f}" in line


def test_a_sample_of_scoring_batches_keeps_their_masks(tokenizer):
    from attnlab.families.bert.evaluate import MaskedLMScore

    lines = _text(70, seed=7).splitlines()
    groups = [lines[i:i + 32] for i in range(0, len(lines), 32)]
    in_order = MaskedLMScore(tokenizer, seed=4)
    expected = [in_order.batch(group)["ids"] for group in groups]
    sampled = MaskedLMScore(tokenizer, seed=4)
    states = sampled.states(groups)
    for i in (2, 0, 1):
        sampled.generator.set_state(states[i])
        assert torch.equal(sampled.batch(groups[i])["ids"], expected[i])


def test_without_valid_text_evaluate_scores_the_last_tenth_of_the_training_lines(tmp_path, capsys):
    (tmp_path / "train.txt").write_text(_text(100, seed=3))
    out = tmp_path / "run"
    assert main(["train", "bert", "--text", str(tmp_path / "train.txt"), "--vocab-size", "60", "--context", "24",
                 "--batch-size", "16", "--max-steps", "2", "--warmup", "1", "--no-progress", "--out", str(out),
                 *TINY]) == 0
    lines = [line.strip() for line in (tmp_path / "train.txt").read_text().splitlines() if line.strip()]
    (tmp_path / "tail.txt").write_text("\n".join(lines[int(len(lines) * 0.9):]) + "\n")
    capsys.readouterr()
    assert main(["evaluate", "--model", str(out / "model"), "--no-progress", "--json", str(tmp_path / "own.json")]) == 0
    assert "the last 10% of the lines of --text" in capsys.readouterr().out
    assert main(["evaluate", "--model", str(out / "model"), "--text", str(tmp_path / "tail.txt"), "--no-progress",
                 "--json", str(tmp_path / "tail.json")]) == 0
    own, tail = (json.loads((tmp_path / name).read_text()) for name in ("own.json", "tail.json"))
    assert own["accuracy"] == tail["accuracy"] and own["masked_tokens"] == tail["masked_tokens"]
    (tmp_path / "train.txt").unlink()
    assert main(["evaluate", "--model", str(out / "model"), "--no-progress"]) == 2
    assert "is gone (moved or deleted); give the text to score with --text" in capsys.readouterr().err


def test_without_text_it_trains_on_the_shipped_captions_and_evaluate_scores_their_val_split(tmp_path, capsys):
    from attnlab.families.bert.evaluate import caption_lines

    out = tmp_path / "run"
    assert main(["train", "bert", "--vocab-size", "300", "--context", "32", "--batch-size", "8", "--max-steps", "1",
                 "--warmup", "1", "--val-lines", "8", "--no-progress", "--out", str(out), *TINY]) == 0
    said = capsys.readouterr().err
    assert "data: 29,000 training lines (Multi30k's English train captions (shipped with attnlab))" in said
    assert "1,014 held-out lines (Multi30k's English val captions (shipped with attnlab))" in said
    record = json.loads((out / "model" / "bert.json").read_text())
    assert record["text"] is None and record["data"] == "multi30k-en"
    val = caption_lines("valid")
    (tmp_path / "val.txt").write_text("\n".join(val[:40]) + "\n")
    for name, extra in (("own", []), ("file", ["--text", str(tmp_path / "val.txt")])):
        assert main(["evaluate", "--model", str(out / "model"), "--limit", "40", "--no-progress",
                     "--json", str(tmp_path / f"{name}.json"), *extra]) == 0
    assert "the model's own held-out text (Multi30k's English val captions" in capsys.readouterr().out
    own, file = (json.loads((tmp_path / f"{name}.json").read_text()) for name in ("own", "file"))
    assert len(val) == 1014 and own["accuracy"] == file["accuracy"] and own["masked_tokens"] == file["masked_tokens"]


def test_init_from_a_bert_without_its_masked_lm_head_adds_one(trained, run_verb):
    root, out, _ = trained
    import attnlab
    from attnlab.models.bert import encoder_config

    model = attnlab.load_model(out / "model")
    bare = attnlab.models.BertEncoder(encoder_config(model.config, mlm_head=False))
    bare.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("mlm_")})
    bare.save_pretrained(root / "bare")
    for name in ("vocab.txt", "tokenizer_config.json"):
        (root / "bare" / name).write_bytes((out / "model" / name).read_bytes())
    for directory, said in ((root / "bare", "a new masked-LM head"), (out / "model", "the model's own masked-LM head is kept")):
        target = root / f"from-{directory.name}"
        code, _, err = run_verb(["train", "bert", "--text", str(root / "train.txt"), "--init", str(directory),
                             "--max-steps", "2", "--batch-size", "4", "--val-every", "0", "--no-progress",
                             "--out", str(target)])
        assert code == 0 and said in err, err
        trained_model = attnlab.load_model(target / "model")
        assert trained_model.config.mlm_head and trained_model.config.num_layers == 2
        assert (target / "model" / "vocab.txt").read_bytes() == (out / "model" / "vocab.txt").read_bytes()


def test_init_from_a_huggingface_bert_keeps_its_vocabulary(tmp_path, run_verb):
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=len(WORDS) + 5, hidden_size=32, num_hidden_layers=1,
                                     num_attention_heads=4, intermediate_size=64, max_position_embeddings=32)
    torch.manual_seed(0)
    transformers.BertModel(config).save_pretrained(str(tmp_path / "hf"), safe_serialization=True)
    (tmp_path / "hf" / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    (tmp_path / "text.txt").write_text(_text(50))
    code, _, err = run_verb(["train", "bert", "--text", str(tmp_path / "text.txt"), "--init", str(tmp_path / "hf"),
                         "--max-steps", "2", "--batch-size", "4", "--val-every", "0", "--no-progress",
                         "--out", str(tmp_path / "run")])
    assert code == 0, err
    assert "a new masked-LM head" in err and "WordPiece vocabulary of 23" in err
    assert "windows of up to 32 tokens" in err  # the context fits the model's 32 positions


@pytest.mark.parametrize("extra, flag", [(["--vocab-size", "100"], "--vocab-size"), (["--cased"], "--cased"),
                                         (["--set", "num_layers=1"], "--set")])
def test_options_that_init_decides_are_refused(tmp_path, run_verb, extra, flag):
    (tmp_path / "t.txt").write_text(_text(20))
    code, _, err = run_verb(["train", "bert", "--text", str(tmp_path / "t.txt"), "--init", str(tmp_path),
                         "--out", str(tmp_path / "run"), *extra])
    assert code == 2 and err.count("\n") == 1 and flag in err
    assert not (tmp_path / "run").exists()


def test_init_on_a_vit_directory_is_refused_and_nothing_is_written(tmp_path, run_verb):
    from attnlab import create_model

    create_model("vit_tiny_patch4_28", num_classes=10).save_pretrained(tmp_path / "vit")
    (tmp_path / "t.txt").write_text(_text(20))
    code, _, err = run_verb(["train", "bert", "--text", str(tmp_path / "t.txt"), "--init", str(tmp_path / "vit"),
                         "--out", str(tmp_path / "run")])
    assert code == 2 and err.count("\n") == 1
    assert f"--init {tmp_path / 'vit'}: holds a 'vit' model" in err and "not a BERT" in err
    assert not (tmp_path / "run").exists()


def test_a_text_with_invalid_utf8_is_named_with_its_line(tmp_path, run_verb):
    (tmp_path / "t.txt").write_bytes(b"the dog runs .\nthe cat \xff sleeps .\n")
    code, _, err = run_verb(["train", "bert", "--text", str(tmp_path / "t.txt"), "--out", str(tmp_path / "run")])
    assert code == 2 and err.count("\n") == 1 and "t.txt, line 2: not valid UTF-8" in err
    assert not (tmp_path / "run").exists()
