"""`attnlab export --format hf` of language models: a GPT-2 directory transformers opens
(AutoModelForCausalLM + AutoTokenizer) with attnlab's logits, greedy tokens and token ids;
`attnlab.load` of the export gives the same weights back; a GPT-2 directory attnlab read
goes back unchanged; what GPT-2 cannot express is refused; the output rule."""

from __future__ import annotations

import json
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

import attnlab  # noqa: E402
from attnlab.cli.main import main  # noqa: E402
from attnlab.data.text import CharTokenizer, LineTokenizer  # noqa: E402
from attnlab.generation.sampling import generate  # noqa: E402
from attnlab.models.lm import DecoderLM, lm_tiny  # noqa: E402

TEXT = ("ROMEO: But soft, what light through yonder window breaks?\n"
        "JULIET: O Romeo, Romeo! wherefore art thou Romeo?\n"
        "Deny thy father and refuse thy name; 'tis but thy name that is my enemy.\n")
SENTENCES = ["ROMEO: But soft!", "JULIET: O Romeo,\nwherefore art thou?", "  thy name;  'tis  ", ""]


def snapshot(root):
    return {str(path.relative_to(root)): path.read_bytes() if path.is_file() else None
            for path in sorted(root.rglob("*"))}


def _lm_dir(path, seed=0, **overrides):
    tokenizer = CharTokenizer.from_text(TEXT)
    torch.manual_seed(seed)
    model = DecoderLM(lm_tiny().replace(vocab_size=tokenizer.vocab_size, **overrides)).eval()
    with torch.no_grad():  # non-zero biases and norms, so a swapped name cannot pass
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    model.save_pretrained(path)
    tokenizer.save(path)
    return model, tokenizer


def _export(model_dir, out, *extra, fmt="hf"):
    return main(["export", "--model", str(model_dir), "--format", fmt, "-o", str(out), *extra])


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm")
    model, tokenizer = _lm_dir(root / "model")
    assert _export(root / "model", root / "hf") == 0
    return root, model, tokenizer


def test_logits_float64_and_token_ids_equal_transformers(exported):
    root, model, tokenizer = exported
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(root / "hf")).eval().double()
    assert type(hf).__name__ == "GPT2LMHeadModel"
    theirs = transformers.AutoTokenizer.from_pretrained(str(root / "hf"))
    for sentence in SENTENCES + [TEXT]:
        ids = tokenizer.encode(sentence)
        assert theirs(sentence)["input_ids"] == ids and theirs.decode(ids) == sentence
    ids = torch.tensor([tokenizer.encode(TEXT[:60])])
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, model.double()(ids), rtol=1e-10, atol=1e-10)
    model.float()


def test_greedy_generation_equals_transformers(exported):
    root, model, tokenizer = exported
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(root / "hf")).eval().double()
    model = model.double()
    for prompt in ("ROMEO: ", "JULIET: O"):
        ids = tokenizer.encode(prompt)
        ours = generate(model, [ids], max_new_tokens=24, greedy=True)[0]
        with torch.no_grad():
            theirs = hf.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False, pad_token_id=0)[0]
        assert ours == theirs[len(ids):].tolist()
    model.float()


def test_attnlab_load_of_the_export_gives_the_same_weights_and_ids(exported):
    root, model, tokenizer = exported
    back = attnlab.load(root / "hf")
    ours, theirs = model.state_dict(), back.model.state_dict()
    assert set(ours) == set(theirs)
    assert all(torch.equal(ours[name], theirs[name]) for name in ours)
    for sentence in SENTENCES:
        assert back.tokenizer.encode(sentence) == tokenizer.encode(sentence)
    # and a second export of the export writes the same files
    assert _export(root / "hf", root / "hf2") == 0
    assert snapshot(root / "hf2") == snapshot(root / "hf")


def test_a_gpt2_directory_goes_back_unchanged(tmp_path):
    from safetensors.torch import load_file

    source = tmp_path / "gpt2"
    source.mkdir()
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator([TEXT * 3], vocab_size=300, min_frequency=1, show_progress=False)
    bpe.save_model(str(source))
    config = transformers.GPT2Config(vocab_size=bpe.get_vocab_size(), n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                     bos_token_id=0, eos_token_id=0)
    torch.manual_seed(1)
    transformers.GPT2LMHeadModel(config).save_pretrained(str(source), safe_serialization=True)
    assert _export(source, tmp_path / "out") == 0
    before, after = load_file(str(source / "model.safetensors")), load_file(str(tmp_path / "out" / "model.safetensors"))
    weights = {name: value for name, value in before.items() if value.is_floating_point() and name != "lm_head.weight"}
    assert set(weights) == set(after)
    assert all(torch.equal(weights[name], after[name]) for name in weights)
    for name in ("vocab.json", "merges.txt"):
        assert (tmp_path / "out" / name).read_bytes() == (source / name).read_bytes()
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    ours = attnlab.load(source).tokenizer
    for sentence in SENTENCES[:3]:
        assert theirs(sentence)["input_ids"] == ours.encode(sentence)


@pytest.mark.parametrize("overrides, named", [
    ({"norm_first": False}, "norm_first=false"),
    ({"positional": "sinusoidal"}, "positional='sinusoidal'"),
    ({"positional": "none"}, "positional='none'"),
    ({"attention": {"name": "local_1d", "block_length": 8}}, "attention="),
    ({"attention": {"name": "relative_skew", "max_relative_position": 8, "causal": True}}, "attention="),
    ({"scale_embeddings": True}, "scale_embeddings=true"),
])
def test_what_gpt2_cannot_express_is_refused_naming_it(tmp_path, capsys, overrides, named):
    _lm_dir(tmp_path / "model", **overrides)
    before = snapshot(tmp_path)
    capsys.readouterr()
    assert _export(tmp_path / "model", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err and "GPT-2" in err and "Traceback" not in err
    assert snapshot(tmp_path) == before


def test_a_sentencepiece_bpe_line_tokenizer_travels_exactly_as_tokenizer_json(tmp_path):
    """attnlab train lm --tokenizer bpe: sentencepiece BPE per line, lines joined by the EOS
    id. The export's tokenizer.json gives the same ids on real text (Multi30k, the example
    corpus, whitespace and unknown characters) and decodes any ids the same."""
    import gzip
    import random
    from importlib.resources import files
    from pathlib import Path

    corpus = (Path(__file__).resolve().parents[2] / "examples" / "corpus.txt").read_text(encoding="utf-8")
    tokenizer = LineTokenizer.train(corpus, vocab_size=400)
    torch.manual_seed(0)
    model = DecoderLM(lm_tiny().replace(vocab_size=tokenizer.vocab_size)).eval()
    model.save_pretrained(tmp_path / "model")
    tokenizer.save(tmp_path / "model")
    assert _export(tmp_path / "model", tmp_path / "hf") == 0
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    back = attnlab.load(tmp_path / "hf")
    with gzip.open(files("attnlab.data") / "multi30k" / "val.en.gz", "rt", encoding="utf-8") as handle:
        multi30k = [next(handle).strip() for _ in range(200)]
    lines = corpus.splitlines()
    texts = lines[:300] + multi30k + ["\n".join(lines[i:i + 4]) for i in range(0, 120, 4)] + [
        "", " ", "a\n\nb", "  two  spaces \n\ttab ", "Zürich’s café — “quotes”", "日本語 and ﬁ ligatures", "\n\n"]
    for text in texts:
        ids = tokenizer.encode(text)
        assert theirs(text)["input_ids"] == ids and back.tokenizer.encode(text) == ids, text
    rng = random.Random(0)
    for _ in range(500):  # any ids, special ones (pad, bos, the newline, unk) included
        ids = [rng.randrange(tokenizer.vocab_size) for _ in range(rng.randrange(1, 12))]
        assert theirs.decode(ids) == tokenizer.decode(ids) == back.tokenizer.decode(ids), ids
    ids = torch.tensor([tokenizer.encode(corpus[:200])[:60]])
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf")).eval().double()
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, model.double()(ids), rtol=1e-10, atol=1e-10)


def test_a_unigram_line_tokenizer_is_refused(tmp_path, capsys):
    tokenizer = LineTokenizer.train(TEXT * 4, vocab_size=60, model_type="unigram")
    model = DecoderLM(lm_tiny().replace(vocab_size=tokenizer.vocab_size))
    model.save_pretrained(tmp_path / "model")
    tokenizer.save(tmp_path / "model")
    before = snapshot(tmp_path)
    assert _export(tmp_path / "model", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "unigram" in err and "tokenizer.model" in err and err.count("\n") == 1
    assert snapshot(tmp_path) == before


def test_output_rule(exported, tmp_path, capsys):
    root = exported[0]
    model_dir = root / "model"
    # an existing directory holding files: refused without --force, replaced as a whole with it
    target = tmp_path / "taken"
    target.mkdir()
    (target / "mine.txt").write_text("keep\n")
    assert _export(model_dir, target) == 2
    err = capsys.readouterr().err
    assert "--force" in err and "mine.txt" in err and (target / "mine.txt").is_file()
    assert _export(model_dir, target, "--force") == 0
    assert not (target / "mine.txt").exists() and json.loads((target / "config.json").read_text())["model_type"] == "gpt2"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".taken")]  # no temporaries left
    # a symlink is never written through, with or without --force
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "link"
    os.symlink(elsewhere, link)
    for force in ([], ["--force"]):
        assert _export(model_dir, link, *force) == 2
        assert "symlink" in capsys.readouterr().err and not any(elsewhere.iterdir()) and link.is_symlink()
    # the model directory itself, or one holding it
    before = snapshot(root / "model")
    for out in (model_dir, root):
        assert _export(model_dir, out, "--force") == 2
        assert "input" in capsys.readouterr().err
    assert snapshot(root / "model") == before


def test_another_family_for_a_format_is_refused(exported, tmp_path, capsys):
    assert _export(exported[0] / "model", tmp_path / "out", fmt="timm") == 2
    err = capsys.readouterr().err
    assert "'decoder_lm'" in err and "'vit'" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_without_tokenizers_it_stops_before_reading(exported, tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tokenizers", None)
    assert _export(exported[0] / "model", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "needs tokenizers" in err and "Traceback" not in err and not (tmp_path / "out").exists()


def test_a_missing_or_foreign_model_directory_is_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    for model, needle in (("missing", "--model"), ("empty", "config.json"), ("other", "config.json")):
        assert _export(tmp_path / model, tmp_path / "out") == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


def test_weights_the_layout_has_no_place_for_are_refused_not_dropped(tmp_path):
    """A model holding more than the layout carries (a head a later change adds, an untied
    output projection) is refused: dropping a weight would export another function."""
    from types import SimpleNamespace

    from attnlab.interop.export_hf import gpt2_export

    model, tokenizer = _lm_dir(tmp_path / "model")
    pipeline = SimpleNamespace(model=model, tokenizer=tokenizer, directory=tmp_path / "model")
    assert gpt2_export(pipeline).tensors  # as it is: exported
    model.extra_head = torch.nn.Linear(4, 2)
    with pytest.raises(ValueError, match=r"no place for: extra_head.bias, extra_head.weight"):
        gpt2_export(pipeline)
    del model.extra_head
    model.decoder.head.weight = torch.nn.Parameter(model.decoder.embed.weight.detach().clone())
    with pytest.raises(ValueError, match="untied from the token embedding"):
        gpt2_export(pipeline)
