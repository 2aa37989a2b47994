"""The translation workflow through the CLI's ``main(argv)``: train, translate, evaluate,
attention, average; and bad input giving exit code 2 with a message naming the culprit."""

import json
import struct

import pytest
import sacrebleu
import torch

import attnlab
from attnlab.cli.main import main
from families.conftest import with_record
from attnlab.families.translation.translator import Translator


def test_train_writes_a_loadable_model_directory(trained_model):
    for name in ("config.json", "model.safetensors", "tokenizer.model", "translation.json"):
        assert (trained_model / name).is_file(), name
    model = attnlab.load_model(trained_model)
    assert model.config.vocab_size == 300
    run = trained_model.parent
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any("valid_loss" in r for r in records) and any("loss" in r for r in records)
    assert len(list((run / "checkpoints").glob("step_*"))) == 3  # --keep 3
    info = json.loads((trained_model / "translation.json").read_text())
    assert (info["src_lang"], info["tgt_lang"]) == ("de", "en")


def test_translate_keeps_order_count_and_empty_lines(trained_model, small_corpus, tmp_path, capsys):
    sentences = small_corpus["test.de"].read_text(encoding="utf-8").splitlines()[:6]
    sentences.insert(2, "")
    source = tmp_path / "in.de"
    source.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    assert main(["translate", "--model", str(trained_model), "--input", str(source), "--beam", "1",
                 "--batch-size", "2"]) == 0
    lines = capsys.readouterr().out.split("\n")
    assert lines[-1] == "" and len(lines) - 1 == len(sentences)
    assert lines[2] == ""
    # Batched by length and restored == translated one at a time, in input order.
    translator = Translator.load(trained_model)
    one_by_one = [translator.translate([s], beam=1)[0] for s in sentences]
    assert lines[:-1] == one_by_one


def test_translate_reads_stdin(trained_model, monkeypatch, capsys):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("Ein Mann.\nZwei Hunde spielen im Schnee.\n"))
    assert main(["translate", "--model", str(trained_model), "--beam", "2"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_evaluate_bleu_equals_sacrebleu(trained_model, small_corpus, tmp_path, capsys):
    hypotheses_file, scores_file = tmp_path / "hyp.en", tmp_path / "scores.json"
    assert main(["evaluate", "--model", str(trained_model), "--src-file", str(small_corpus["test.de"]),
                 "--ref-file", str(small_corpus["test.en"]), "--beam", "2", "-o", str(hypotheses_file),
                 "--json", str(scores_file), "--show", "2"]) == 0
    printed = capsys.readouterr().out
    assert "BLEU" in printed and "chrF" in printed and "tok:13a" in printed
    scores = json.loads(scores_file.read_text())
    hypotheses = hypotheses_file.read_text(encoding="utf-8").splitlines()
    references = small_corpus["test.en"].read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == len(references) == scores["sentences"]
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hypotheses, [references]).score)
    assert scores["bleu_lc"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True).score)
    assert "case:mixed" in scores["bleu_signature"] and "case:lc" in scores["bleu_lc_signature"]


def test_evaluate_quantize_int8_scores_the_int8_translations(trained_model, small_corpus, tmp_path, capsys):
    from attnlab.families.translation.translator import Translator

    hypotheses = tmp_path / "int8.en"
    assert main(["evaluate", "--model", str(trained_model), "--src-file", str(small_corpus["test.de"]),
                 "--ref-file", str(small_corpus["test.en"]), "--beam", "2", "--quantize", "int8",
                 "-o", str(hypotheses)]) == 0
    translator = Translator.load(trained_model)
    translator.model.quantize("int8")
    sources = small_corpus["test.de"].read_text(encoding="utf-8").splitlines()
    assert hypotheses.read_text(encoding="utf-8").splitlines() == translator.translate(sources, beam=2)


def test_evaluate_named_dataset(trained_model, multi30k_root, capsys):
    assert main(["evaluate", "--model", str(trained_model), "--data", "multi30k", "--data-root", str(multi30k_root),
                 "--split", "test", "--limit", "8", "--beam", "1"]) == 0
    assert "multi30k test de-en: 8 sentences" in capsys.readouterr().out


def test_attention_writes_a_png(trained_model, tmp_path, capsys):
    out = tmp_path / "plots" / "attention.png"
    assert main(["attention", "--model", str(trained_model), "Ein Mann fährt Fahrrad.", "-o", str(out),
                 "--beam", "2", "--dpi", "40"]) == 0
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 0 and height > 0
    assert "2 layers x 4 heads" in capsys.readouterr().out


def test_average_two_checkpoints(trained_model, tmp_path, capsys):
    checkpoints = sorted((trained_model.parent / "checkpoints").glob("step_*"))[-2:]
    out = tmp_path / "averaged"
    assert main(["average", *map(str, checkpoints), "-o", str(out)]) == 0
    averaged = attnlab.load_model(out).state_dict()
    first, second = (attnlab.load_model(c).state_dict() for c in checkpoints)
    key = "encoder.stack.layers.0.ffn.linear1.weight"
    torch.testing.assert_close(averaged[key], (first[key] + second[key]) / 2)
    assert (out / "tokenizer.model").is_file()


def test_train_on_named_dataset_then_resume(multi30k_root, tmp_path, capsys):
    out = tmp_path / "run"
    common = ["train", "translation", "--data", "multi30k", "--data-root", str(multi30k_root),
              "--max-train-pairs", "200", "--preset", "transformer_tiny", "--vocab-size", "250",
              "--max-tokens", "1024", "--warmup", "5", "--val-every", "0", "--log-every", "2",
              "--no-progress", "--out", str(out)]
    assert main(common + ["--max-steps", "4"]) == 0
    # Same out dir without --resume: refused before any work is done.
    assert main(common + ["--max-steps", "6"]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(common + ["--max-steps", "6", "--resume"]) == 0
    assert (out / "checkpoints" / "step_00000006").is_dir()
    assert (out / "model" / "model.safetensors").is_file()


def test_set_overrides_preset_fields_and_bad_fields_are_named(multi30k_root, tmp_path, capsys):
    common = ["train", "translation", "--data", "multi30k", "--data-root", str(multi30k_root),
              "--max-train-pairs", "100", "--preset", "transformer_tiny", "--vocab-size", "200",
              "--max-tokens", "1024", "--max-steps", "1", "--val-every", "0", "--no-progress"]
    assert main(common + ["--out", str(tmp_path / "a"), "--set", "dropout=0.25", "--set", "activation=gelu"]) == 0
    config = json.loads((tmp_path / "a" / "model" / "config.json").read_text())
    assert config["dropout"] == 0.25 and config["activation"] == "gelu"
    assert main(common + ["--out", str(tmp_path / "b"), "--set", "dropuot=0.25"]) == 2
    assert "dropuot" in capsys.readouterr().err
    assert main(common + ["--out", str(tmp_path / "c"), "--set", "dropout"]) == 2
    assert "FIELD=VALUE" in capsys.readouterr().err


def test_varlen_training_logs_the_padded_runs_losses(multi30k_root, tmp_path, capsys):
    common = ["train", "translation", "--data", "multi30k", "--data-root", str(multi30k_root),
              "--max-train-pairs", "60", "--preset", "transformer_tiny", "--vocab-size", "200", "--set", "dropout=0",
              "--max-tokens", "512", "--max-steps", "3", "--log-every", "1", "--val-every", "0", "--no-progress"]
    losses = {}
    for name, extra in (("padded", []), ("varlen", ["--varlen"])):
        assert main(common + ["--out", str(tmp_path / name), *extra]) == 0
        lines = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        losses[name] = [line["loss"] for line in lines if "loss" in line]
    assert "variable-length attention (no padding)" in capsys.readouterr().err
    assert len(losses["varlen"]) == 3
    # Without dropout the same updates: only the float32 rounding of the two computations differs.
    for padded, varlen in zip(losses["padded"], losses["varlen"]):
        assert abs(padded - varlen) < 1e-3 * abs(padded)


# -- bad input -------------------------------------------------------------------------------

def _error(capsys) -> str:
    return capsys.readouterr().err


def test_mismatched_line_counts_name_both_files(small_corpus, tmp_path, capsys):
    short = tmp_path / "short.en"
    lines = small_corpus["train.en"].read_text(encoding="utf-8").splitlines()
    short.write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    code = main(["train", "translation", "--train-src", str(small_corpus["train.de"]), "--train-tgt", str(short),
                 "--out", str(tmp_path / "out"), "--no-progress"])
    error = _error(capsys)
    assert code == 2
    assert str(small_corpus["train.de"]) in error and str(short) in error and "300" in error and "299" in error
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_missing_named_dataset_says_how_to_get_it(tmp_path, capsys):
    missing = tmp_path / "nowhere"
    code = main(["train", "translation", "--data", "multi30k", "--data-root", str(missing),
                 "--out", str(tmp_path / "out")])
    error = _error(capsys)
    assert code == 2 and "Multi30k not found" in error and str(missing) in error and "ATTNLAB_DATA" in error


def test_missing_training_file_is_named(small_corpus, tmp_path, capsys):
    missing = tmp_path / "missing.de"
    code = main(["train", "translation", "--train-src", str(missing), "--train-tgt", str(small_corpus["train.en"]),
                 "--out", str(tmp_path / "out")])
    assert code == 2 and str(missing) in _error(capsys)


def test_invalid_utf8_names_file_and_line(small_corpus, tmp_path, capsys):
    bad = tmp_path / "bad.de"
    bad.write_bytes(b"Ein Hund.\nZwei \xff Katzen.\n")
    good = tmp_path / "good.en"
    good.write_text("A dog.\nTwo cats.\n", encoding="utf-8")
    code = main(["train", "translation", "--train-src", str(bad), "--train-tgt", str(good),
                 "--out", str(tmp_path / "out")])
    error = _error(capsys)
    assert code == 2 and str(bad) in error and "line 2" in error


def test_neither_or_both_data_sources_is_an_error(small_corpus, tmp_path, capsys):
    assert main(["train", "translation", "--out", str(tmp_path / "out")]) == 2
    assert "--data" in _error(capsys)
    assert main(["train", "translation", "--data", "multi30k", "--train-src", str(small_corpus["train.de"]),
                 "--train-tgt", str(small_corpus["train.en"]), "--out", str(tmp_path / "out")]) == 2


def test_translate_missing_input_and_model(trained_model, tmp_path, capsys):
    missing = tmp_path / "missing.txt"
    assert main(["translate", "--model", str(trained_model), "--input", str(missing)]) == 2
    assert str(missing) in _error(capsys)
    assert main(["translate", "--model", str(tmp_path / "no_model"), "--input", str(missing)]) == 2


def test_cuda_graph_and_batch_size_are_checked_before_anything_is_written(trained_model, small_corpus, tmp_path,
                                                                          capsys):
    out = tmp_path / "out.en"
    for argv, message in [
            (["translate", "--input", str(small_corpus["test.de"]), "-o", str(out), "--cuda-graph", "--device", "cpu"],
             "--cuda-graph needs a CUDA GPU; the model runs on cpu"),
            (["translate", "--input", str(small_corpus["test.de"]), "-o", str(out), "--batch-size", "0"],
             "--batch-size=0 must be at least 1"),
            (["evaluate", "--src-file", str(small_corpus["test.de"]), "--ref-file", str(small_corpus["test.en"]),
              "-o", str(out), "--cuda-graph", "--device", "cpu"], "--cuda-graph needs a CUDA GPU")]:
        assert main([*argv, "--model", str(trained_model)]) == 2
        error = _error(capsys)
        assert message in error and "Traceback" not in error
    assert not out.exists()


def test_evaluate_mismatched_files(trained_model, small_corpus, tmp_path, capsys):
    refs = tmp_path / "refs.en"
    refs.write_text("only one line\n", encoding="utf-8")
    code = main(["evaluate", "--model", str(trained_model), "--src-file", str(small_corpus["test.de"]),
                 "--ref-file", str(refs)])
    error = _error(capsys)
    assert code == 2 and str(refs) in error and "30" in error


def test_attention_empty_sentence_and_bad_suffix(trained_model, tmp_path, capsys):
    assert main(["attention", "--model", str(trained_model), "  ", "-o", str(tmp_path / "a.png")]) == 2
    assert "empty" in _error(capsys)
    assert main(["attention", "--model", str(trained_model), "Ein Hund.", "-o", str(tmp_path / "a.jpg")]) == 2


def test_train_translation_options_are_declared_once():
    """The argparse dests of `train translation` are TranslationTrainOptions' field names and
    its defaults are the dataclass's, so the options are one list, not three."""
    import dataclasses

    from attnlab.cli.main import build_parser
    from attnlab.families.translation.task import TranslationTrainOptions

    args = build_parser().parse_args(["train", "translation", "--out", "x"])
    converted = {"bf16", "device", "val_every", "save_every", "progress_bar", "model_overrides"}
    for field in dataclasses.fields(TranslationTrainOptions):
        if field.name in converted:
            continue
        assert hasattr(args, field.name), f"no argument has dest {field.name!r}"
        if field.default is not dataclasses.MISSING:
            assert getattr(args, field.name) == field.default, field.name


def test_evaluate_without_data_scores_the_models_own_held_out_pairs(trained_model, small_corpus, tmp_path, capsys):
    # Issue 39, 4: no --data/--src-file scores the --valid-src/--valid-tgt files the model was
    # trained with (translation.json records them), in one line that says so
    assert main(["evaluate", "--model", str(trained_model), "--beam", "1", "--limit", "4"]) == 0
    out = capsys.readouterr().out
    valid = (small_corpus["valid.de"].resolve(), small_corpus["valid.en"].resolve())
    assert f"scoring {trained_model}'s own held-out data: {valid[0]} -> {valid[1]}" in out, out
    assert "(30 sentence pairs)" in out and "BLEU" in out
    for i, (change, said) in enumerate((({"valid_src": str(tmp_path / "deleted.de")}, "deleted.de"),
                                        ({"valid_src": None, "valid_tgt": None}, "records no held-out data"))):
        moved = with_record(trained_model, tmp_path / str(i), "translation.json", **change)
        assert main(["evaluate", "--model", str(moved), "--beam", "1"]) == 2
        err = capsys.readouterr().err
        assert "translation.json" in err and said in err and "--src-file" in err, err
