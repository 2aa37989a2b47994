"""`attnlab export --format hf` of translation models: a MarianMTModel directory with
attnlab's logits (float64), greedy tokens and token ids (MarianTokenizer on real Multi30k
sentences); the paper's interleaved sinusoids are carried by reordering the model
dimension; a MarianMT directory attnlab read goes back unchanged; what Marian cannot
express is refused."""

from __future__ import annotations

import gzip
import json
import warnings
from importlib.resources import files

import pytest
import torch

transformers = pytest.importorskip("transformers")
sentencepiece = pytest.importorskip("sentencepiece")

import attnlab  # noqa: E402
from attnlab.cli.main import main  # noqa: E402
from attnlab.data.tokenizer import Tokenizer  # noqa: E402
from attnlab.generation import greedy_search  # noqa: E402
from attnlab.models.transformer import Transformer, transformer_tiny  # noqa: E402


def _multi30k(name: str, count: int) -> list[str]:
    with gzip.open(files("attnlab.data") / "multi30k" / name, "rt", encoding="utf-8") as handle:
        return [next(handle).strip() for _ in range(count)]


TRAIN = _multi30k("train.de.gz", 400) + _multi30k("train.en.gz", 400)
SOURCES = _multi30k("val.de.gz", 12)


def _export(model_dir, out, *extra):
    return main(["export", "--model", str(model_dir), "--format", "hf", "-o", str(out), *extra])


def snapshot(root):
    return {str(path.relative_to(root)): path.read_bytes() if path.is_file() else None
            for path in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.train(TRAIN, vocab_size=300)


def _translation_dir(path, tokenizer, seed=0, **overrides):
    config = transformer_tiny().replace(vocab_size=tokenizer.vocab_size, **{"final_norm": False, **overrides})
    torch.manual_seed(seed)
    model = Transformer(config).eval()
    with torch.no_grad():  # non-trivial biases and norms; a bias on the output if the model has one
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    model.save_pretrained(path)
    tokenizer.save(path)
    return model


def _hf(directory):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Recommended: pip install sacremoses."
        return (transformers.MarianMTModel.from_pretrained(str(directory)).eval().double(),
                transformers.MarianTokenizer.from_pretrained(str(directory)))


def _source_batch(tokenizer, sentences, eos, pad):
    rows = [tokenizer.encode(s) + [eos] for s in sentences]
    batch = torch.full((len(rows), max(map(len, rows))), pad)
    for i, row in enumerate(rows):
        batch[i, :len(row)] = torch.tensor(row)
    return batch


@pytest.mark.parametrize("positional", ["sinusoidal", "sinusoidal_halves"])
def test_logits_greedy_tokens_and_ids_equal_transformers(tmp_path, tokenizer, positional):
    model = _translation_dir(tmp_path / "model", tokenizer, positional=positional, output_bias=True,
                             activation="silu")
    assert _export(tmp_path / "model", tmp_path / "out") == 0
    hf, hf_tokenizer = _hf(tmp_path / "out")
    c = model.config
    if importlib_sacremoses() is None:  # with sacremoses, MarianTokenizer also normalises punctuation
        for sentence in SOURCES:
            assert hf_tokenizer(sentence)["input_ids"] == tokenizer.encode(sentence) + [c.eos_id], sentence
    src = _source_batch(tokenizer, SOURCES[:6], c.eos_id, c.pad_id)
    tgt = torch.randint(4, c.vocab_size, (6, 9), generator=torch.Generator().manual_seed(3))
    tgt[:, 0] = c.bos_id
    model = model.double()
    with torch.no_grad():
        expected = hf(input_ids=src, attention_mask=(src != c.pad_id).long(), decoder_input_ids=tgt).logits
        torch.testing.assert_close(model(src, tgt), expected, rtol=1e-9, atol=1e-9)
        generated = hf.generate(input_ids=src, attention_mask=(src != c.pad_id).long(), num_beams=1, do_sample=False,
                                max_new_tokens=20)
    ours = greedy_search(model, src, max_len_a=0, max_len_b=20)

    def until_eos(tokens):
        tokens = [int(t) for t in tokens]
        return tokens[:tokens.index(c.eos_id) + 1] if c.eos_id in tokens else tokens

    assert [until_eos(h.tokens) for h in ours] == [until_eos(row[1:]) for row in generated]
    back = attnlab.load(tmp_path / "out")  # MarianMT again: a Marian directory attnlab reads
    with torch.no_grad():
        torch.testing.assert_close(back.model.double()(src, tgt), expected, rtol=1e-9, atol=1e-9)
    assert back.tokenizer.encode_batch(SOURCES) == tokenizer.encode_batch(SOURCES)
    if positional == "sinusoidal_halves":  # nothing reordered: the very weights come back
        ours, theirs = model.float().state_dict(), back.model.float().state_dict()
        assert set(ours) == set(theirs) and all(torch.equal(ours[n], theirs[n]) for n in ours)


def importlib_sacremoses():
    import importlib.util

    return importlib.util.find_spec("sacremoses")


@pytest.mark.parametrize("overrides, named", [
    ({"norm_first": True}, "norm_first=true (pre-LN)"),
    ({"final_norm": True}, "final_norm=true"),
    ({"positional": "learned"}, "positional='learned'"),
    ({"encoder_attention": {"name": "relative_skew", "max_relative_position": 8, "causal": False}},
     "encoder_attention="),
    ({"layer_norm_eps": 1e-6}, "layer_norm_eps"),
])
def test_what_marian_cannot_express_is_refused(tmp_path, tokenizer, capsys, overrides, named):
    _translation_dir(tmp_path / "model", tokenizer, **overrides)
    before = snapshot(tmp_path)
    capsys.readouterr()
    assert _export(tmp_path / "model", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err and "MarianMT" in err
    assert snapshot(tmp_path) == before


def test_a_marian_directory_goes_back_unchanged(tmp_path):
    from safetensors.torch import load_file

    source = tmp_path / "opus"
    source.mkdir()
    spm_path = tmp_path / "spm"
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(TRAIN), model_prefix=str(spm_path),
                                             vocab_size=120, model_type="unigram", bos_id=-1, eos_id=1, unk_id=0,
                                             pad_id=-1, minloglevel=2)
    for name in ("source.spm", "target.spm"):
        (source / name).write_bytes(spm_path.with_suffix(".model").read_bytes())
    processor = sentencepiece.SentencePieceProcessor(model_file=str(source / "source.spm"))
    vocab = {"</s>": 0, "<unk>": 1}
    for i in range(processor.get_piece_size()):
        vocab.setdefault(processor.id_to_piece(i), len(vocab))
    vocab["<pad>"] = len(vocab)
    (source / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (source / "tokenizer_config.json").write_text(json.dumps({"source_lang": "de", "target_lang": "en"}))
    pad = vocab["<pad>"]
    config = transformers.MarianConfig(vocab_size=len(vocab), d_model=32, encoder_layers=2, decoder_layers=2,
                                       encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                       decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=pad,
                                       eos_token_id=0, decoder_start_token_id=pad, scale_embedding=True)
    torch.manual_seed(2)
    hf = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        hf.final_logits_bias.normal_()
    hf.generation_config = transformers.GenerationConfig(bad_words_ids=[[pad]], decoder_start_token_id=pad,
                                                         eos_token_id=0, pad_token_id=pad, num_beams=2)
    hf.save_pretrained(source)
    assert _export(source, tmp_path / "out") == 0
    before, after = load_file(str(source / "model.safetensors")), load_file(str(tmp_path / "out" / "model.safetensors"))
    shared = before["model.shared.weight"]
    for name, value in before.items():
        if name in ("lm_head.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"):
            assert torch.equal(value, shared)  # tied: one table in the export
        else:
            assert torch.equal(after[name], value), name
    for name in ("source.spm", "target.spm", "vocab.json", "tokenizer_config.json", "generation_config.json"):
        assert (tmp_path / "out" / name).read_bytes() == (source / name).read_bytes()
    original, back = attnlab.load(source).model, attnlab.load(tmp_path / "out").model
    assert original.config == back.config
    assert all(torch.equal(value, back.state_dict()[name]) for name, value in original.state_dict().items())
