"""attnlab train translation --init DIR from a HuggingFace MarianMT directory (a random-weight
tiny one built with transformers, real sentencepiece models): the training pairs are encoded
by Marian's own tokenizer (sources by source.spm, targets by target.spm, the decoder started
from the pad token, as transformers' MarianMTModel trains), the objective equals
transformers' loss in float64, the weights move, the held-out figure is printed before and
after, and the saved model keeps Marian's tokenizer files, so every verb opens it and it
tokenises exactly as transformers' MarianTokenizer; `attnlab export --format hf` gives it
back to transformers with the same logits. Bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

import attnlab  # noqa: E402
from attnlab.cli.main import main  # noqa: E402
from attnlab.families.translation.train import TranslationTask  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_thread")

SOURCES = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest ein Buch.",
           "Ein Mann liest ein Buch.", "Zwei Frauen spielen im Schnee.", "Ein Hund fährt Fahrrad."]
TARGETS = ["A man rides a bicycle.", "Two dogs play in the snow.", "A woman reads a book.",
           "A man reads a book.", "Two women play in the snow.", "A dog rides a bicycle."]
RUN = ["--max-tokens", "256", "--max-length", "32", "--val-every", "2", "--save-every", "2", "--no-progress",
       "--threads", "1"]


def _pairs(directory, name, sources, targets):
    src, tgt = directory / f"{name}.de", directory / f"{name}.en"
    src.write_text("".join(line + "\n" for line in sources), encoding="utf-8")
    tgt.write_text("".join(line + "\n" for line in targets), encoding="utf-8")
    kind = "train" if name.startswith("train") else "valid"
    return [f"--{kind}-src", str(src), f"--{kind}-tgt", str(tgt)]


def _hf_tokenizer(directory):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Recommended: pip install sacremoses."
        return transformers.MarianTokenizer.from_pretrained(str(directory))


def _hf_model(directory):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.MarianMTModel.from_pretrained(str(directory)).eval().double()


def _snapshot(root):
    return {str(path.relative_to(root)): path.read_bytes() if path.is_file() else None
            for path in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    from reference.foreign_dirs import marian_directory

    return marian_directory(tmp_path_factory.mktemp("marian") / "opus-mt-de-en")


@pytest.fixture(scope="module")
def run(marian, tmp_path_factory):
    """One fine-tuning run from the MarianMT directory, with the model as it was in memory when
    it was saved and the run's training batches (TranslationTask.save wrapped to keep them)."""
    root = tmp_path_factory.mktemp("marian_run")
    train = _pairs(root, "train", SOURCES * 8, TARGETS * 8)
    valid = _pairs(root, "valid", SOURCES, TARGETS)
    kept = {}
    original = TranslationTask.save

    def save(self, run, model, trainer):
        kept["model"], kept["batches"] = copy.deepcopy(model).cpu().eval(), run.data["train_batches"]
        return original(self, run, model, trainer)

    err = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stderr(err):
        patch.setattr(TranslationTask, "save", save)
        code = main(["train", "translation", "--init", str(marian), *train, *valid, "--max-steps", "6",
                     "--out", str(root / "ft"), *RUN])
    assert code == 0, err.getvalue()
    return {"out": root / "ft", "err": err.getvalue(), "train": train, "valid": valid, **kept}


def test_fine_tuning_a_marian_directory_moves_the_weights_and_prints_before_and_after(marian, run):
    err, model_dir = run["err"], run["out"] / "model"
    assert "vocabulary:" not in err  # none learned: Marian's is kept
    assert f"start: {marian.resolve()} (huggingface marian), weights and vocabulary kept" in err
    assert "fine-tuning: a fresh optimizer and schedule" in err
    before = float(err.split("held-out before fine-tuning: ")[1].split()[0])
    line = next(line for line in err.splitlines() if line.startswith("held-out: "))
    assert line.endswith("validation perplexity")
    after = float(line.split("-> ")[1].split()[0])
    assert after < before  # the held-out pairs are the training pairs' sentences
    start = json.loads((model_dir / "start.json").read_text())
    assert start == {"init": str(marian.resolve()), "format": "huggingface marian",
                     "weights_sha256": hashlib.sha256((marian / "model.safetensors").read_bytes()).hexdigest()}
    first = json.loads((run["out"] / "metrics.jsonl").read_text().splitlines()[0])
    assert first["start_valid_ppl"] == pytest.approx(before, rel=1e-3)
    original, tuned = attnlab.load(marian).model.state_dict(), attnlab.load(model_dir).model.state_dict()
    assert original.keys() == tuned.keys()
    assert any(not torch.equal(original[name], tuned[name]) for name in original)
    assert attnlab.load(model_dir).model.config == attnlab.load(marian).model.config  # architecture from DIR


def test_the_saved_model_tokenises_as_marian_and_keeps_its_files(marian, run):
    model_dir = run["out"] / "model"
    for name in ("source.spm", "target.spm"):
        assert (model_dir / name).read_bytes() == (marian / name).read_bytes()
    assert json.loads((model_dir / "vocab.json").read_text()) == json.loads((marian / "vocab.json").read_text())
    info = json.loads((model_dir / "translation.json").read_text())
    assert info["format"] == "marian" and info["generation"]["num_beams"] == 2  # DIR's generation_config.json
    assert not (model_dir / "tokenizer.model").exists()
    ours, theirs = attnlab.load(model_dir).tokenizer, _hf_tokenizer(marian)
    sentences = SOURCES + TARGETS + ["Ein unbekanntes Wort: Quxzy!", ""]
    for sentence in sentences:
        assert ours.encode(sentence) + [ours.eos_id] == theirs(sentence)["input_ids"], sentence
        assert ours.encode(sentence, target=True) + [ours.eos_id] == theirs(text_target=sentence)["input_ids"]
    generator = torch.Generator().manual_seed(3)
    for _ in range(5):
        ids = torch.randint(0, ours.vocab_size, (10,), generator=generator).tolist()
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True), ids


def test_the_training_batches_and_loss_are_marians_own_float64(marian, run):
    """Each trained pair is transformers' encoding of a training pair (source.spm / target.spm),
    the decoder input is the labels shifted right after decoder_start_token_id (the pad token),
    and the run's loss (without label smoothing) equals MarianMTModel's loss in float64."""
    from transformers.models.marian.modeling_marian import shift_tokens_right

    from attnlab.families.translation.task import translation_loss

    tokenizer, hf = _hf_tokenizer(marian), _hf_model(marian)
    pad, start = hf.config.pad_token_id, hf.config.decoder_start_token_id
    expected = {(tuple(tokenizer(s)["input_ids"]), tuple(tokenizer(text_target=t)["input_ids"]))
                for s, t in zip(SOURCES, TARGETS)}
    ours = attnlab.load(marian).model.double().eval()
    loss_fn = translation_loss(0.0, ours.config.pad_id)
    batches = list(run["batches"])[:2]
    assert batches
    for batch in batches:
        for src, tgt in zip(batch["src"].tolist(), batch["tgt_out"].tolist()):
            assert (tuple(i for i in src if i != pad), tuple(i for i in tgt if i != pad)) in expected
        labels = batch["tgt_out"].masked_fill(batch["tgt_out"] == pad, -100)
        real = labels != -100  # past a row's end transformers shifts in its EOS, attnlab pads: neither is seen
        assert torch.equal(batch["tgt_in"][real], shift_tokens_right(labels, pad, start)[real])
        hf.zero_grad()
        ours.zero_grad()
        theirs = hf(input_ids=batch["src"], attention_mask=batch["src"] != pad, labels=labels).loss
        loss_sum, count, _ = loss_fn(ours, batch)  # no label smoothing: the summed NLL
        mine = loss_sum / count
        assert mine.item() == pytest.approx(theirs.item(), rel=1e-10, abs=1e-12)
        # the gradient of the one shared table (embeddings and output projection; the pad row, the
        # decoder's start, gets none through the lookup in either) is transformers' own
        theirs.backward()
        mine.backward()
        torch.testing.assert_close(ours.encoder.embed.weight.grad, hf.model.shared.weight.grad, rtol=0, atol=1e-10)


def test_the_saved_model_equals_the_fine_tuned_one_in_float64_and_translates(run):
    saved = attnlab.load(run["out"] / "model")
    batch = next(iter(run["batches"]))
    with torch.no_grad():
        expected = run["model"].double()(batch["src"], batch["tgt_in"])
        got = saved.model.double()(batch["src"], batch["tgt_in"])
    assert torch.equal(got, expected)
    saved.model.float()
    assert saved.translator.default_beam_size == 2
    out = saved.translate(SOURCES[:2], beam=1, max_len_a=0, max_len_b=8)
    assert len(out) == 2 and all(isinstance(text, str) for text in out)


def test_every_verb_opens_the_fine_tuned_model(run, tmp_path, monkeypatch, capsys):
    from attnlab.interop.onnx_export import onnx_parity

    model_dir = run["out"] / "model"
    monkeypatch.setattr("sys.stdin", io.StringIO(SOURCES[0] + "\n"))
    assert main(["translate", "--model", str(model_dir), "--beam", "1", "--threads", "1"]) == 0
    assert main(["evaluate", "--model", str(model_dir), "--threads", "1"]) == 0  # its own held-out files
    assert "BLEU" in capsys.readouterr().out
    assert main(["explore", "--model", str(model_dir), "--html", str(tmp_path / "e.html"), SOURCES[1],
                 "--threads", "1"]) == 0
    assert (tmp_path / "e.html").stat().st_size > 1000
    assert main(["attention", "--model", str(model_dir), SOURCES[2], "-o", str(tmp_path / "a.png"),
                 "--threads", "1"]) == 0
    assert (tmp_path / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pytest.importorskip("onnxruntime")
    # Checked: the decoder half's suppressed pad logit is -inf in both runtimes (it read as a
    # NaN difference, "MISMATCH", before).
    assert main(["export-onnx", "--model", str(model_dir), "-o", str(tmp_path / "m.onnx")]) == 0
    assert onnx_parity(attnlab.load(model_dir).model, tmp_path / "m.onnx") < 1e-4
    assert onnx_parity(attnlab.load(model_dir).model, tmp_path / "m.decoder.onnx", part="decoder") < 1e-4


def test_export_hf_gives_transformers_the_same_model_and_tokenizer(marian, run, tmp_path):
    model_dir, out = run["out"] / "model", tmp_path / "hf"
    assert main(["export", "--model", str(model_dir), "--format", "hf", "-o", str(out)]) == 0
    for name in ("source.spm", "target.spm"):
        assert (out / name).read_bytes() == (marian / name).read_bytes()
    hf, ours = _hf_model(out), attnlab.load(model_dir).model.double().eval()
    assert hf.generation_config.num_beams == 2
    tokenizer = _hf_tokenizer(out)
    assert all(tokenizer(s)["input_ids"] == _hf_tokenizer(marian)(s)["input_ids"] for s in SOURCES)
    batch = tokenizer(SOURCES[:3], text_target=TARGETS[:3], return_tensors="pt", padding=True)
    labels = batch["labels"]
    tgt_in = torch.cat([torch.full((3, 1), hf.config.decoder_start_token_id), labels[:, :-1]], dim=1)
    with torch.no_grad():
        theirs = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    decoder_input_ids=tgt_in).logits
        mine = ours(batch["input_ids"], tgt_in)
    assert torch.allclose(theirs, mine, rtol=0, atol=1e-10)


@pytest.mark.slow
def test_a_marian_fine_tuning_run_resumes_and_trains_with_lora(marian, tmp_path, capsys):
    """--resume reads Marian's tokenizer back from the run's checkpoint; --lora merges into a plain
    model that keeps Marian's tokenizer."""
    train = _pairs(tmp_path, "train", SOURCES * 4, TARGETS * 4)
    valid = _pairs(tmp_path, "valid", SOURCES, TARGETS)
    command = ["train", "translation", "--init", str(marian), *train, *valid, "--out", str(tmp_path / "r"), *RUN]
    assert main([*command, "--max-steps", "2"]) == 0
    assert main([*command, "--max-steps", "4", "--resume"]) == 0
    err = capsys.readouterr().err
    assert "vocabulary: reusing the one of" in err and "step 4:" in err
    assert json.loads((tmp_path / "r" / "model" / "translation.json").read_text())["format"] == "marian"
    assert main(["train", "translation", "--init", str(marian), *train, *valid, "--lora", "2", "--max-steps", "2",
                 "--out", str(tmp_path / "lora"), *RUN]) == 0
    err = capsys.readouterr().err
    assert "trainable" in err and "held-out: " in err
    pipeline = attnlab.load(tmp_path / "lora" / "model")
    assert not any("lora" in name for name in pipeline.model.state_dict())
    assert (tmp_path / "lora" / "model" / "source.spm").read_bytes() == (marian / "source.spm").read_bytes()
    assert isinstance(pipeline.translate(SOURCES[0], beam=1, max_len_a=0, max_len_b=5), str)
    # the Python API runs the same lifecycle
    from attnlab.translation import TranslationTrainOptions, train_translation

    model_dir = train_translation(TranslationTrainOptions(
        out=str(tmp_path / "api"), train_src=train[1], train_tgt=train[3], max_steps=1, val_every=None,
        progress_bar=False, max_tokens=256, max_length=32, init=str(marian)))
    assert json.loads((model_dir / "translation.json").read_text())["format"] == "marian"
    assert (model_dir / "target.spm").read_bytes() == (marian / "target.spm").read_bytes()


def _without(marian, tmp_path, name):
    import shutil

    copy_dir = tmp_path / "broken"
    shutil.copytree(marian, copy_dir)
    (copy_dir / name).unlink()
    return copy_dir


@pytest.mark.parametrize("case", ["no source.spm", "unknown text", "varlen", "max-length"])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(marian, tmp_path, capsys, case):
    init, extra, sources, named = marian, [], SOURCES, None
    if case == "no source.spm":
        init, named = _without(marian, tmp_path, "source.spm"), "source.spm: no such file"
    elif case == "unknown text":
        sources, named = ["日本語の文です。"] * 6, "--max-unknown"
    elif case == "varlen":
        extra, named = ["--varlen"], "--varlen"
    else:
        extra, named = ["--max-length", "64"], "--max-length=64"  # Marian's table has 64 positions
    train = _pairs(tmp_path, "train", sources, TARGETS)
    before = _snapshot(tmp_path)
    capsys.readouterr()
    assert main(["train", "translation", "--init", str(init), *train, "--max-steps", "1", "--out",
                 str(tmp_path / "o"), *RUN, *extra]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("attnlab")]
    assert len(lines) == 1 and named in lines[0] and "Traceback" not in err, err
    if case == "no source.spm":
        assert str(init) in lines[0]
    assert _snapshot(tmp_path) == before
