"""train text-classification on separable labelled sets (single texts and pairs) learns well
above chance for any seed; then every road to the trained model gives the same answers:
classify-text (arguments, --file, stdin), attnlab evaluate (routed), attnlab.load(...).classify,
the explorer's source and ONNX; --init from a train bert output and a HuggingFace BERT."""

from __future__ import annotations

import contextlib
import io
import json
import random

import pytest
import torch

from attnlab.cli.main import main

pytest.importorskip("tokenizers")

WEATHER = "sun rain wind snow cloud storm frost mist heat fog".split()
ANIMALS = "cat dog horse cow sheep goat mouse bird fish bear".split()
FILLER = "the a and of to in is it was on".split()
TINY = ["--set", "num_layers=1", "--set", "d_model=32", "--set", "num_heads=2", "--set", "d_ff=64"]


def _sentence(rng, topic):
    words = [rng.choice(topic) for _ in range(2)] + [rng.choice(FILLER) for _ in range(4)]
    rng.shuffle(words)
    return " ".join(words)


def _write(path, rows: int, seed: int, *, pairs: bool = False) -> None:
    """Label = the topic of the text (of the second text for pairs; the first is either)."""
    rng = random.Random(seed)
    lines = ["text\ttext_pair\tlabel" if pairs else "text\tlabel"]
    for _ in range(rows):
        label = rng.choice(["weather", "animal"])
        topic = WEATHER if label == "weather" else ANIMALS
        if pairs:
            lines.append(f"{_sentence(rng, rng.choice([WEATHER, ANIMALS]))}\t{_sentence(rng, topic)}\t{label}")
        else:
            lines.append(f"{_sentence(rng, topic)}\t{label}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _train(argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    assert code == 0, err.getvalue()
    return err.getvalue()


def _tiny_run(root, *, pairs: bool):
    _write(root / "train.tsv", 300, seed=1, pairs=pairs)
    _write(root / "valid.tsv", 60, seed=2, pairs=pairs)
    out = root / "run"
    log = _train(["train", "text-classification", "--train", str(root / "train.tsv"), "--valid",
                  str(root / "valid.tsv"), "--out", str(out), "--vocab-size", "100", "--max-length", "24",
                  "--batch-size", "16", "--max-steps", "150", "--lr", "3e-3", "--warmup", "10", "--val-every", "75",
                  "--no-progress", *TINY])
    return out, log


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return _tiny_run(tmp_path_factory.mktemp("single"), pairs=False)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return _tiny_run(tmp_path_factory.mktemp("pair"), pairs=True)


@pytest.mark.parametrize("which", ["single", "pair"])
def test_a_tiny_run_learns_a_separable_set(which, request):
    out, log = request.getfixturevalue(which)
    results = json.loads((out / "evaluation" / "results.json").read_text())
    assert results["items"] == 60 and results["labels"] == ["animal", "weather"]
    assert results["accuracy"] >= 0.9 and results["macro_f1"] >= 0.9, log  # chance: 0.5
    assert (out / "evaluation" / "confusion_matrix.png").stat().st_size > 1000
    assert json.loads((out / "model" / "labels.json").read_text()) == {"labels": ["animal", "weather"],
                                                                       "pairs": which == "pair"}
    assert "held-out (60 texts): accuracy" in log


def test_every_road_gives_the_same_answer(single, tmp_path, capsys):
    import attnlab

    out, _ = single
    model_dir = out / "model"
    pipeline = attnlab.load(model_dir)
    assert type(pipeline).__name__ == "TextClassifierPipeline" and pipeline.labels == ["animal", "weather"]
    texts = ["the dog and a cat", "snow in the storm", "a horse and a cow"]
    ranked = pipeline.classify(texts, top_k=2)
    assert [r[0][0] for r in ranked] == ["animal", "weather", "animal"]
    assert all(abs(sum(p for _, p in r) - 1) < 1e-5 for r in ranked)
    assert pipeline.classify(texts[1]) == [ranked[1][0]]  # one string: one list
    # classify-text from arguments, a file and stdin prints the same
    assert main(["classify-text", "--model", str(model_dir), "--top-k", "2", *texts]) == 0
    printed = capsys.readouterr().out.splitlines()
    expected = [f"{a} {100 * p:.1f}%, {b} {100 * q:.1f}%\t{t}" for ((a, p), (b, q)), t in zip(ranked, texts)]
    assert printed == expected
    (tmp_path / "texts.txt").write_text("\n".join(texts) + "\n\n")
    assert main(["classify-text", "--model", str(model_dir), "--top-k", "2", "--file", str(tmp_path / "texts.txt")]) == 0
    assert capsys.readouterr().out.splitlines() == expected
    import sys

    stdin = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(("\n".join(texts) + "\n").encode()))
    try:
        assert main(["classify-text", "--model", str(model_dir), "--top-k", "2"]) == 0
    finally:
        sys.stdin = stdin
    assert capsys.readouterr().out.splitlines() == expected
    # attnlab evaluate --model DIR --data FILE routes to evaluate-text-classifier
    valid = out.parent / "valid.tsv"
    assert main(["evaluate", "--model", str(model_dir), "--data", str(valid), "--out", str(tmp_path / "ev")]) == 0
    assert "macro-F1" in capsys.readouterr().out
    scored = json.loads((tmp_path / "ev" / "results.json").read_text())
    trained = json.loads((out / "evaluation" / "results.json").read_text())
    assert scored["confusion_matrix"] == trained["confusion_matrix"]
    from attnlab.families.text_classification.data import read_labelled

    rows = read_labelled(str(valid))
    predicted = pipeline.probabilities(rows.texts).argmax(-1).tolist()
    truth = [pipeline.labels.index(label) for label in rows.labels]
    assert sum(p == t for p, t in zip(predicted, truth)) == sum(scored["confusion_matrix"][i][i] for i in range(2))
    # --out again: kept without --force
    assert main(["evaluate", "--model", str(model_dir), "--data", str(valid), "--out", str(tmp_path / "ev")]) == 2
    assert "--force" in capsys.readouterr().err
    # without --data: the model's own held-out data (its --valid file), said
    assert main(["evaluate", "--model", str(model_dir), "--out", str(tmp_path / "own")]) == 0
    assert f"scoring the model's own held-out data (--valid {valid.resolve()}, from text_classification.json)" \
        in capsys.readouterr().out
    assert json.loads((tmp_path / "own" / "results.json").read_text())["confusion_matrix"] == \
        trained["confusion_matrix"]


def test_evaluate_without_data_scores_the_rows_training_held_out(tmp_path, capsys):
    """No --valid: training holds out a seeded 10 % of --train; evaluate with no --data scores
    exactly those rows (the same count and confusion matrix as the run's own final scoring),
    and says so; with the training file gone it names the file and the flag."""
    _write(tmp_path / "train.tsv", 120, seed=3)
    out = tmp_path / "run"
    log = _train(["train", "text-classification", "--train", str(tmp_path / "train.tsv"), "--out", str(out),
                  "--vocab-size", "100", "--max-length", "24", "--batch-size", "16", "--max-steps", "2",
                  "--warmup", "1", "--seed", "5", "--no-progress", *TINY])
    assert "held-out (12 texts)" in log
    capsys.readouterr()
    assert main(["evaluate", "--model", str(out / "model"), "--out", str(tmp_path / "ev")]) == 0
    said = capsys.readouterr().out
    assert f"12 rows of --train {(tmp_path / 'train.tsv').resolve()} held out, seed 5" in said
    scored = json.loads((tmp_path / "ev" / "results.json").read_text())
    trained = json.loads((out / "evaluation" / "results.json").read_text())
    assert scored["items"] == 12 and scored["confusion_matrix"] == trained["confusion_matrix"]
    (tmp_path / "train.tsv").unlink()
    assert main(["evaluate", "--model", str(out / "model")]) == 2
    err = capsys.readouterr().err
    assert "is gone (moved or deleted); give the file to score with --data" in err and "train.tsv" in err


def test_batched_predictions_equal_one_text_at_a_time(single):
    import attnlab
    from attnlab.families.text_classification.task import predict

    pipeline = attnlab.load(single[0] / "model")
    texts = ["the dog", "snow and rain and the storm in the mist", "a cat", "it is a horse and a cow on the sun"] * 3
    batched = predict(pipeline.model, pipeline.tokenizer, texts, batch_size=5)
    alone = torch.cat([predict(pipeline.model, pipeline.tokenizer, [text]) for text in texts])
    assert torch.allclose(batched, alone, atol=1e-5)  # batched by length, given back in order


def test_pairs_go_in_as_pairs(pair, capsys):
    import attnlab
    from attnlab.families.text_classification.data import read_labelled

    out, _ = pair
    pipeline = attnlab.load(out / "model")
    rows = read_labelled(str(out.parent / "valid.tsv"))
    got = pipeline.classify(rows.texts, rows.pairs)
    hits = sum(g[0][0] == label for g, label in zip(got, rows.labels))
    assert hits >= 0.9 * len(rows)  # the second text decides the label: it is read as the pair
    trained = json.loads((out / "evaluation" / "results.json").read_text())
    assert hits == sum(trained["confusion_matrix"][i][i] for i in range(2))
    with pytest.raises(ValueError, match="the model reads text pairs"):
        pipeline.classify(["no pair"])
    assert main(["classify-text", "--model", str(out / "model"), f"{rows.texts[0]}\t{rows.pairs[0]}"]) == 0
    label, probability = got[0][0]
    assert capsys.readouterr().out.startswith(f"{label} {100 * probability:.1f}%")
    assert main(["classify-text", "--model", str(out / "model"), "no tab here"]) == 2
    assert "FIRST<TAB>SECOND" in capsys.readouterr().err


def test_the_explorer_shows_the_cls_row_and_the_label(single):
    from attnlab.viz.explorer.maps import load_source

    out, _ = single
    source = load_source(out / "model")
    assert source.family == "bert_classifier" and "2 labels: animal, weather" in source.description
    analysis = source.analyse("the cat and the dog")
    assert analysis.output.startswith("animal (")
    (group,) = analysis.groups
    assert group.key_tokens[0] == "[CLS]" and group.weights.shape[-1] == len(group.key_tokens)
    assert torch.allclose(group.weights[:, :, 0].sum(-1), torch.ones(1), atol=1e-5)  # the [CLS] row, every head


def test_onnx_export_of_the_trained_directory(single, tmp_path, capsys):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    out, _ = single
    assert main(["export-onnx", "--model", str(out / "model"), "-o", str(tmp_path / "c.onnx")]) == 0
    assert "-> OK" in capsys.readouterr().out


def test_init_from_train_bert_and_from_a_huggingface_bert(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    _write(tmp_path / "train.tsv", 80, seed=3)
    (tmp_path / "text.txt").write_text("\n".join(line.split("\t")[0] for line in
                                                 (tmp_path / "train.tsv").read_text().splitlines()[1:]) + "\n")
    _train(["train", "bert", "--text", str(tmp_path / "text.txt"), "--vocab-size", "80", "--context", "16",
            "--max-steps", "2", "--batch-size", "8", "--val-every", "0", "--no-progress", "--out",
            str(tmp_path / "mlm"), *TINY])
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WEATHER, *ANIMALS, *FILLER]
    config = transformers.BertConfig(vocab_size=len(words), hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=32)
    transformers.BertForMaskedLM(config).save_pretrained(str(tmp_path / "hf"), safe_serialization=True)
    (tmp_path / "hf" / "vocab.txt").write_text("\n".join(words) + "\n")
    for init, said in ((tmp_path / "mlm" / "model", "adds a new classification head of 2 labels"),
                       (tmp_path / "hf", "adds a new pooler (the directory has none) and a new classification head")):
        log = _train(["train", "text-classification", "--train", str(tmp_path / "train.tsv"), "--init", str(init),
                      "--max-steps", "2", "--batch-size", "8", "--val-every", "0", "--no-progress",
                      "--out", str(tmp_path / f"from-{init.parent.name}-{init.name}")])
        assert said in log, log
    import attnlab

    model = attnlab.load(tmp_path / "from-mlm-model" / "model").model
    assert model.config.num_layers == 1 and model.config.num_labels == 2 and not model.config.mlm_head


@pytest.mark.slow
def test_minilm_fine_tunes(minilm_dir, tmp_path):
    """The real all-MiniLM-L6-v2 learns the separable set in a few dozen updates."""
    _write(tmp_path / "train.tsv", 200, seed=1)
    _write(tmp_path / "valid.tsv", 40, seed=2)
    log = _train(["train", "text-classification", "--train", str(tmp_path / "train.tsv"), "--valid",
                  str(tmp_path / "valid.tsv"), "--init", str(minilm_dir), "--max-length", "16", "--batch-size", "16",
                  "--max-steps", "40", "--lr", "1e-4", "--warmup", "4", "--val-every", "0", "--no-progress",
                  "--out", str(tmp_path / "run")])
    assert "adds a new classification head of 2 labels" in log
    assert json.loads((tmp_path / "run" / "evaluation" / "results.json").read_text())["accuracy"] >= 0.9


def test_lora_from_a_huggingface_bert_trains_the_new_head_and_adapters_and_saves_a_plain_classifier(tmp_path, capsys):
    """train text-classification runs on the training-run lifecycle: --init any BERT (here a
    HuggingFace BertForMaskedLM: no pooler, an MLM head) with --lora 4 trains the adapters and the
    new pooler and classification head (its new parameters), nothing else; OUT/model is a plain
    merged classifier (start.json, no adapters) that classify-text opens; the held-out figure is
    said before and after."""
    transformers = pytest.importorskip("transformers")
    from safetensors.torch import load_file

    from attnlab.tasks.bert import load_init

    _write(tmp_path / "train.tsv", 80, seed=3)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WEATHER, *ANIMALS, *FILLER]
    config = transformers.BertConfig(vocab_size=len(words), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=32)
    torch.manual_seed(0)
    transformers.BertForMaskedLM(config).save_pretrained(str(tmp_path / "hf"), safe_serialization=True)
    (tmp_path / "hf" / "vocab.txt").write_text("\n".join(words) + "\n")
    out = tmp_path / "run"
    capsys.readouterr()
    assert main(["train", "text-classification", "--train", str(tmp_path / "train.tsv"), "--init", str(tmp_path / "hf"),
                 "--lora", "4", "--lr", "1e-2", "--max-steps", "4", "--batch-size", "8", "--val-every", "2",
                 "--save-every", "2", "--no-progress", "--device", "cpu", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "held-out before fine-tuning:" in err and "held-out: " in err and "new parameters: classifier., pooler." in err
    assert json.loads((out / "lora_run.json").read_text())["trainable"] == ["classifier", "pooler"]
    base = load_init(tmp_path / "hf")[0].state_dict()
    early, late = (load_file(out / "checkpoints" / f"step_0000000{n}" / "model.safetensors") for n in (2, 4))
    lora = [name for name in late if name.endswith((".lora_A", ".lora_B"))]
    assert lora and any(not torch.equal(early[name], late[name]) for name in lora)  # the adapters train
    for head in ("classifier.weight", "pooler.weight"):  # the new parameters train in full
        assert not torch.equal(early[head], late[head]), head
    for name, tensor in base.items():  # every weight from --init stays frozen
        if not name.startswith("mlm_"):
            assert torch.equal(late[name], tensor), name
    saved = load_file(out / "model" / "model.safetensors")
    assert not any(name.endswith((".lora_A", ".lora_B")) for name in saved)
    assert not (out / "model" / "lora_run.json").exists()
    assert json.loads((out / "model" / "start.json").read_text())["init"] == str((tmp_path / "hf").resolve())
    assert main(["classify-text", "--model", str(out / "model"), "the dog and a cat"]) == 0
    assert capsys.readouterr().out.split()[0] in ("animal", "weather")
