"""MarianMT weights from HuggingFace give the same logits (float64), greedy tokens and beam
search results; a MarianMT directory (tiny sentencepiece models trained here, vocab.json,
random weights saved by ``save_pretrained`` or as a weights-only ``pytorch_model.bin``)
tokenises like ``transformers.MarianTokenizer`` and translates through ``Translator.load``
and ``attnlab translate``; bad directories give clear errors."""

import io
import json

import pytest
import torch

transformers = pytest.importorskip("transformers")
sentencepiece = pytest.importorskip("sentencepiece")

from attnlab.cli.main import main  # noqa: E402
from attnlab.generation import beam_search, greedy_search  # noqa: E402
from attnlab.interop import from_hf_marian, load_hf_marian  # noqa: E402
from attnlab.interop.hf_marian import MarianTokenizer, config_from_hf_marian  # noqa: E402
from attnlab.layers.positional import sinusoidal_table  # noqa: E402
from attnlab.families.translation.translator import Translator  # noqa: E402

PAD, EOS = 100, 0


def _hf_config(**overrides):
    values = dict(vocab_size=101, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
                  pad_token_id=PAD, eos_token_id=EOS, bos_token_id=EOS, decoder_start_token_id=PAD,
                  scale_embedding=True, activation_function="swish", dropout=0.0, attention_dropout=0.0,
                  activation_dropout=0.0)
    values.update(overrides)
    return transformers.MarianConfig(**values)


def _random_marian(seed=0, eos_bias=0.0, **overrides):
    torch.manual_seed(seed)
    hf = transformers.MarianMTModel(_hf_config(**overrides)).eval()
    with torch.no_grad():
        # transformers' std 0.02 gives a decoder whose output hardly depends on its input:
        # larger weights make outputs differ by source and prefix (and mistakes show).
        for name, parameter in hf.named_parameters():
            if "layer_norm" not in name and "embed_positions" not in name:
                parameter.normal_(0.0, 0.2)
        hf.final_logits_bias.normal_(0.0, 0.5)  # a random logits bias, so that a wrong copy of it shows
        hf.final_logits_bias[0, EOS] += eos_bias
    return hf


def _source_batch(generator, vocab=101):
    src = torch.randint(1, vocab - 1, (3, 9), generator=generator)
    lengths = [9, 6, 3]
    for row, n in enumerate(lengths):
        src[row, n - 1] = EOS
        src[row, n:] = PAD
    return src


@pytest.mark.parametrize("d_model", [32, 33, 8])
def test_marian_layout_equals_transformers_table(d_model):
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    theirs = MarianSinusoidalPositionalEmbedding(50, d_model).create_weight()
    ours = sinusoidal_table(50, d_model, layout="halves")
    # Both tables are float64 sines cast to float32 (values in [-1, 1]): they differ by at most
    # one float32 rounding step (6e-8), well inside 1e-6 on any CPU.
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)
    # The paper's interleaved layout holds the same values in another order.
    interleaved = sinusoidal_table(50, d_model)
    order = list(range(0, d_model, 2)) + list(range(1, d_model, 2))
    torch.testing.assert_close(interleaved[:, order], ours, atol=0, rtol=0)  # the same numbers, reordered


def test_only_the_encoder_decoder_takes_marian_positions():
    import attnlab

    assert attnlab.create_model("transformer_tiny", positional="sinusoidal_halves").encoder.positions.layout == "halves"
    for preset in ("lm_tiny", "imagetransformer_mnist_small"):  # the latter has its own raster positions
        with pytest.raises(ValueError, match="unknown positional encoding 'sinusoidal_halves'"):
            attnlab.create_model(preset, positional="sinusoidal_halves")


def test_bounded_marian_positions_refuse_longer_inputs():
    hf = _random_marian(max_position_embeddings=12)
    model = from_hf_marian(hf)
    assert model.max_source_length == 12 and model.max_output_length() == 12
    with pytest.raises(ValueError, match="max_positions=12"):
        model(torch.ones(1, 13, dtype=torch.long), torch.full((1, 2), PAD))


@pytest.mark.parametrize("overrides", [
    {},
    dict(activation_function="gelu", scale_embedding=False),
    dict(tie_word_embeddings=False, d_model=24, encoder_attention_heads=3, decoder_attention_heads=3,
         encoder_layers=1, decoder_layers=3),
])
def test_logits_equal_transformers_float64(overrides):
    hf = _random_marian(**overrides).double()
    # opus-mt's generation_config bans the pad token: decoding only, teacher forcing stays raw
    model = from_hf_marian(hf, config_from_hf_marian(hf.config, generation={"bad_words_ids": [[PAD]]})).double()
    generator = torch.Generator().manual_seed(1)
    src = _source_batch(generator)
    tgt = torch.randint(1, 100, (3, 7), generator=generator)
    tgt[:, 0] = PAD  # decoder_start_token_id
    with torch.no_grad():
        theirs = hf(input_ids=src, attention_mask=(src != PAD).long(), decoder_input_ids=tgt).logits
        ours = model(src, tgt)
    assert theirs.abs().max() > 1.0  # not a trivial comparison
    # Both models run in float64 (unit rounding 1e-16): a few layers of differently ordered
    # sums stay many orders of magnitude inside 1e-10 on any CPU or thread count.
    torch.testing.assert_close(ours, theirs, atol=1e-10, rtol=1e-10)
    if overrides.get("tie_word_embeddings", True):
        assert model.decoder.head.weight is model.encoder.embed.weight  # three-way tying kept
    else:
        assert model.decoder.head.weight is not model.encoder.embed.weight


@pytest.mark.slow
def test_logits_equal_transformers_at_opus_mt_de_en_shape():
    """The real opus-mt-de-en shape (vocabulary 58,101, d_model 512, 6 + 6 layers, 8 heads,
    FFN 2,048, 512 positions), random weights, float32."""
    config = _hf_config(vocab_size=58101, d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                        decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
                        max_position_embeddings=512, pad_token_id=58100, decoder_start_token_id=58100)
    torch.manual_seed(0)
    hf = transformers.MarianMTModel(config).eval()
    model = from_hf_marian(hf)
    assert model.config.vocab_size == 58101 and model.config.positional == "sinusoidal_halves"
    generator = torch.Generator().manual_seed(2)
    src = torch.randint(1, 58100, (2, 11), generator=generator)
    src[:, -1] = EOS
    src[1, 7:] = 58100
    tgt = torch.randint(1, 58100, (2, 5), generator=generator)
    tgt[:, 0] = 58100
    with torch.no_grad():
        theirs = hf(input_ids=src, attention_mask=(src != 58100).long(), decoder_input_ids=tgt).logits
        ours = model(src, tgt)
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("eos_bias", [-60.0, 2.0, 60.0])
def test_greedy_tokens_equal_transformers_generate(eos_bias):
    """Token for token, with outputs that never end (EOS biased far down), a mix, and outputs
    that end at once (far up): which rows end must not decide by the seed whether both kinds
    are covered."""
    hf = _random_marian(seed=4, eos_bias=eos_bias).double()
    model = from_hf_marian(hf, config_from_hf_marian(hf.config, generation={"bad_words_ids": [[PAD]]})).double()
    assert model.config.suppress_ids == [PAD] and model.config.bos_id == PAD
    src = _source_batch(torch.Generator().manual_seed(5))
    with torch.no_grad():
        theirs = hf.generate(input_ids=src, attention_mask=(src != PAD).long(), num_beams=1, do_sample=False,
                             max_new_tokens=12, min_length=0, bad_words_ids=[[PAD]], forced_eos_token_id=None)
    ours = greedy_search(model, src, max_len_a=0, max_len_b=12)
    expected = []
    for row in theirs.tolist():
        tokens = row[1:]  # drop decoder_start_token_id
        expected.append(tokens[: tokens.index(EOS) + 1] if EOS in tokens else tokens)
    assert [h.tokens for h in ours] == expected
    if eos_bias < 0:
        assert all(EOS not in t and len(t) == 12 for t in expected)  # run on to the limit
    if eos_bias > 10:
        assert all(t == [EOS] for t in expected)  # end at once


@pytest.mark.parametrize("num_beams", [2, 4])
def test_beam_search_equals_transformers_without_length_penalty(num_beams):
    """With attnlab's alpha=0 and HuggingFace's length_penalty=0 both rank finished
    hypotheses by their summed log-probabilities, and with early_stopping=True both stop a
    source when it has num_beams finished ones: the same best hypotheses. (Their defaults
    differ: GNMT ((5 + L) / 6)^alpha with alpha=0.6 here, log_prob / L^1.0 in transformers.)"""
    hf = _random_marian(seed=4, eos_bias=1.0).double()
    model = from_hf_marian(hf).double()  # no suppressed ids: transformers bans words after the softmax
    src = _source_batch(torch.Generator().manual_seed(5))
    with torch.no_grad():
        theirs = hf.generate(input_ids=src, attention_mask=(src != PAD).long(), num_beams=num_beams,
                             do_sample=False, max_new_tokens=10, min_length=0, length_penalty=0.0,
                             early_stopping=True, forced_eos_token_id=None, bad_words_ids=None)
    ours = beam_search(model, src, beam_size=num_beams, alpha=0.0, max_len_a=0, max_len_b=10)
    expected = []
    for row in theirs.tolist():
        tokens = row[1:]
        tokens = tokens[: tokens.index(EOS) + 1] if EOS in tokens else tokens
        expected.append([t for t in tokens if t != PAD] if EOS in tokens else tokens)
    assert [best[0].tokens for best in ours] == expected
    assert any(len(t) > 1 for t in expected)  # not only empty translations


def test_decode_step_adds_the_bias_and_suppresses_like_decode():
    """The step path (TokenDecoder.step, and its forward with a cache: the fixed-shape beam
    search, CUDA graphs) adds the logits bias and suppresses the pad token as
    Transformer.decode does: its beam search equals the eager one, hypothesis for
    hypothesis, and never proposes pad; teacher forcing keeps the raw logits."""
    from attnlab.generation.graphs import beam_search_fixed_shape

    hf = _random_marian(seed=4, eos_bias=1.0)
    model = from_hf_marian(hf, config_from_hf_marian(hf.config, generation={"bad_words_ids": [[PAD]]}))
    src = _source_batch(torch.Generator().manual_seed(5))
    expected = beam_search(model, src, beam_size=3, nbest=3, alpha=0.6, max_len_a=0, max_len_b=8)
    fixed = beam_search_fixed_shape(model, src, beam_size=3, nbest=3, alpha=0.6, max_len_a=0, max_len_b=8,
                                    use_graph=False)
    for got, want in zip(fixed, expected, strict=True):
        assert [h.tokens for h in got] == [h.tokens for h in want]
        torch.testing.assert_close([h.score for h in got], [h.score for h in want], atol=1e-4, rtol=1e-4)
    assert all(PAD not in h.tokens for hypotheses in fixed for h in hypotheses)
    memory, memory_mask = model.encode(src[:1])
    with torch.no_grad():
        full = model.decode(torch.tensor([[PAD]]), memory, memory_mask)[:, -1]
    assert full[0, PAD] == float("-inf") and torch.isfinite(full[0, :PAD]).all()
    with torch.no_grad():
        assert torch.isfinite(model(src[:1], torch.tensor([[PAD]]))).all()  # teacher forcing: raw logits


# -- a MarianMT directory ------------------------------------------------------------------
SOURCE_TEXT = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest ein Buch.",
               "Kinder spielen im Park.", "Der Mann trinkt Kaffee.", "Ein Hund läuft über die Wiese."] * 3
TARGET_TEXT = ["A man rides a bicycle.", "Two dogs play in the snow.", "A woman reads a book.",
               "Children play in the park.", "The man drinks coffee.", "A dog runs across the meadow."] * 3


def _train_spm(lines, path):
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=str(path), vocab_size=60,
                                             model_type="unigram", character_coverage=1.0, hard_vocab_limit=False,
                                             bos_id=-1, eos_id=1, unk_id=0, pad_id=-1, minloglevel=2)
    (path.parent / (path.name + ".vocab")).unlink()
    return path.parent / (path.name + ".model")


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory):
    """What ``huggingface-cli download Helsinki-NLP/opus-mt-de-en`` holds, at toy size."""
    directory = tmp_path_factory.mktemp("opus-mt-toy")
    source = _train_spm(SOURCE_TEXT, directory / "source")
    target = _train_spm(TARGET_TEXT, directory / "target")
    source.rename(directory / "source.spm")
    target.rename(directory / "target.spm")
    pieces = []
    for name in ("source.spm", "target.spm"):
        processor = sentencepiece.SentencePieceProcessor(model_file=str(directory / name))
        pieces += [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    vocab = {"</s>": 0, "<unk>": 1}
    for piece in pieces:
        if piece not in vocab and piece not in ("<unk>", "</s>", "<s>"):
            vocab[piece] = len(vocab)
    vocab["<pad>"] = len(vocab)
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"source_lang": "de", "target_lang": "en", "tokenizer_class": "MarianTokenizer"}), encoding="utf-8")
    pad = vocab["<pad>"]
    hf = _random_marian(seed=6, eos_bias=1.5, vocab_size=len(vocab), pad_token_id=pad, decoder_start_token_id=pad)
    hf.generation_config = transformers.GenerationConfig(
        bad_words_ids=[[pad]], bos_token_id=0, decoder_start_token_id=pad, eos_token_id=0, forced_eos_token_id=0,
        max_length=512, num_beams=3, pad_token_id=pad)
    hf.save_pretrained(directory)
    return directory


def _hf_tokenizer(directory):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Recommended: pip install sacremoses."
        return transformers.MarianTokenizer.from_pretrained(str(directory))


def test_tokenizer_equals_transformers(marian_dir):
    theirs = _hf_tokenizer(marian_dir)
    ours = MarianTokenizer.load(marian_dir)
    assert ours.vocab_size == len(theirs.get_vocab())
    sentences = SOURCE_TEXT[:6] + ["Ein unbekanntes Wort: Quxzy!", "", "  Leerzeichen  "]
    for sentence in sentences:
        assert ours.encode(sentence) + [ours.eos_id] == theirs(sentence)["input_ids"], sentence
    generator = torch.Generator().manual_seed(7)
    for _ in range(10):
        ids = torch.randint(0, ours.vocab_size, (12,), generator=generator).tolist()
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True), ids


def test_directory_loads_and_translates_like_transformers(marian_dir):
    translator = Translator.load(marian_dir)
    assert translator.default_beam_size == 3  # generation_config.json's num_beams
    assert translator.model.config.suppress_ids == [translator.model.config.pad_id]
    hf = transformers.MarianMTModel.from_pretrained(str(marian_dir)).eval()
    tokenizer = _hf_tokenizer(marian_dir)
    sentences = SOURCE_TEXT[:4]
    batch = tokenizer(sentences, return_tensors="pt", padding=True)
    with torch.no_grad():
        generated = hf.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=20, forced_eos_token_id=None)
    expected = tokenizer.batch_decode(generated, skip_special_tokens=True)
    assert translator.translate(sentences, beam=1, max_len_a=0, max_len_b=20) == expected
    assert any(expected)


def test_attnlab_load_reads_a_marian_directory(marian_dir):
    import attnlab

    pipeline = attnlab.load(marian_dir)
    assert pipeline.family == "transformer"
    expected = Translator.load(marian_dir).translate(SOURCE_TEXT[:2], beam=1, max_len_a=0, max_len_b=20)
    assert pipeline.translate(SOURCE_TEXT[:2], beam=1, max_len_a=0, max_len_b=20) == expected


def test_the_explorer_opens_a_marian_directory(marian_dir, tmp_path, capsys):
    from attnlab.viz.explorer.maps import load_source

    source = load_source(marian_dir)
    analysis = source.analyse(SOURCE_TEXT[0])
    assert [group.name for group in analysis.groups] == ["encoder self", "decoder self", "cross"]
    assert analysis.output == Translator.load(marian_dir).translate([SOURCE_TEXT[0]], beam=1, max_len_a=1.5,
                                                                    max_len_b=10)[0]
    page = tmp_path / "marian.html"
    assert main(["explore", "--model", str(marian_dir), "--html", str(page), SOURCE_TEXT[0]]) == 0
    assert page.stat().st_size > 1000


def test_cli_translate_runs_on_a_marian_directory(marian_dir, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(SOURCE_TEXT[:3]) + "\n"))
    assert main(["translate", "--model", str(marian_dir), "--beam", "1", "--max-len-a", "0",
                 "--max-len-b", "20"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == Translator.load(marian_dir).translate(SOURCE_TEXT[:3], beam=1, max_len_a=0, max_len_b=20)
    monkeypatch.setattr("sys.stdin", io.StringIO(SOURCE_TEXT[0] + "\n"))
    assert main(["translate", "--model", str(marian_dir)]) == 0  # the directory's num_beams
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_cli_evaluate_scores_a_marian_directory(marian_dir, tmp_path, capsys):
    sources, references, hypotheses = tmp_path / "src.de", tmp_path / "ref.en", tmp_path / "hyp.en"
    sources.write_text("\n".join(SOURCE_TEXT[:6]) + "\n", encoding="utf-8")
    references.write_text("\n".join(TARGET_TEXT[:6]) + "\n", encoding="utf-8")
    assert main(["evaluate", "--model", str(marian_dir), "--src-file", str(sources), "--ref-file", str(references),
                 "--beam", "1", "-o", str(hypotheses)]) == 0
    assert "BLEU" in capsys.readouterr().out
    expected = Translator.load(marian_dir).translate(SOURCE_TEXT[:6], beam=1)
    assert hypotheses.read_text(encoding="utf-8").splitlines() == expected


def test_attention_verb_on_a_marian_directory(marian_dir, tmp_path, capsys):
    """The attention verb goes through Translator.load too: cross-attention of the translation
    it prints, one row per target piece (EOS included), one column per source piece."""
    out = tmp_path / "attention.png"
    assert main(["attention", "--model", str(marian_dir), SOURCE_TEXT[1], "-o", str(out), "--beam", "2"]) == 0
    assert out.stat().st_size > 0
    printed = capsys.readouterr().out.splitlines()
    example = Translator.load(marian_dir).attention(SOURCE_TEXT[1], beam=2)
    assert printed[0] == example.translation
    layers, heads, rows, columns = example.cross.shape
    assert (layers, heads) == (2, 4) and (rows, columns) == (len(example.target_pieces), len(example.source_pieces))
    torch.testing.assert_close(example.cross.sum(-1), torch.ones(layers, heads, rows))


def test_cli_translate_quantized(marian_dir, monkeypatch, capsys):
    args = ["translate", "--model", str(marian_dir), "--beam", "2", "--max-len-a", "0", "--max-len-b", "20"]
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(SOURCE_TEXT[:4]) + "\n"))
    assert main(args + ["--quantize", "int8"]) == 0
    lines = capsys.readouterr().out.splitlines()
    translator = Translator.load(marian_dir)
    translator.model.quantize("int8")
    assert lines == translator.translate(SOURCE_TEXT[:4], beam=2, max_len_a=0, max_len_b=20)
    with pytest.raises(SystemExit) as exit_info:
        main(args + ["--quantize", "fp4"])
    assert exit_info.value.code == 2 and "--quantize" in capsys.readouterr().err


def test_pytorch_model_bin_is_read_weights_only(marian_dir, tmp_path):
    """Older opus-mt repositories hold pytorch_model.bin only: read with weights_only=True."""
    import shutil

    from safetensors.torch import load_file

    directory = tmp_path / "bin"
    shutil.copytree(marian_dir, directory)
    state = load_file(str(directory / "model.safetensors"))
    (directory / "model.safetensors").unlink()
    torch.save({"model." + k if not k.startswith(("model.", "final_logits_bias", "lm_head")) else k: v
                for k, v in state.items()}, directory / "pytorch_model.bin")
    model, _, _ = load_hf_marian(directory)
    reference, _, _ = load_hf_marian(marian_dir)
    for (name, a), (_, b) in zip(model.state_dict().items(), reference.state_dict().items()):
        assert torch.equal(a, b), name

    marker = tmp_path / "code-ran"
    torch.save({"model.shared.weight": _RunsCodeWhenUnpickled(marker)}, directory / "pytorch_model.bin")
    with pytest.raises(ValueError, match="pytorch_model.bin: not a readable weights-only"):
        load_hf_marian(directory)
    assert not marker.exists()


class _RunsCodeWhenUnpickled:
    """A pickle that would create a file if a full unpickler read it."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        import pathlib

        return pathlib.Path.touch, (pathlib.Path(self.path),)


@pytest.mark.parametrize("remove", ["vocab.json", "source.spm", "config.json"])
def test_missing_file_is_named(marian_dir, tmp_path, remove, capsys):
    import shutil

    directory = tmp_path / "broken"
    shutil.copytree(marian_dir, directory)
    (directory / remove).unlink()
    assert main(["translate", "--model", str(directory), "--input", str(directory / "tokenizer_config.json")]) != 0
    assert remove in capsys.readouterr().err


def test_unsupported_configs_are_refused():
    with pytest.raises(ValueError, match="share_encoder_decoder_embeddings"):
        config_from_hf_marian(_hf_config(share_encoder_decoder_embeddings=False, decoder_vocab_size=50))
    with pytest.raises(ValueError, match="encoder_ffn_dim"):
        config_from_hf_marian(_hf_config(decoder_ffn_dim=32))
    with pytest.raises(ValueError, match="activation_function"):
        config_from_hf_marian(_hf_config(activation_function="tanh"))
    with pytest.raises(ValueError, match="bad_words_ids"):
        config_from_hf_marian(_hf_config(), generation={"bad_words_ids": [[3, 4]]})


# -- every value read from a sidecar is bounded and named with its file (issue 39) --------------
def _marian_copy(marian_dir, tmp_path):
    import shutil

    directory = tmp_path / "opus-mt-copy"
    shutil.copytree(marian_dir, directory)
    return directory


@pytest.mark.parametrize("file, values, message", [
    ("generation_config.json", {"num_beams": 1_000_000_000},
     r"generation_config\.json: num_beams=1000000000 exceeds the largest beam attnlab searches \(64\)"),
    ("generation_config.json", {"num_beams": 0}, r"generation_config\.json: num_beams=0 must be at least 1"),
    ("generation_config.json", {"num_beams": "4"}, r"generation_config\.json: num_beams='4' is not an integer"),
    ("generation_config.json", {"num_beams": 2.5}, r"generation_config\.json: num_beams=2\.5 is not an integer"),
    ("generation_config.json", {"max_length": 10**12}, r"generation_config\.json: max_length=1000000000000 exceeds"),
    ("generation_config.json", {"length_penalty": float("nan")},
     r"generation_config\.json: length_penalty=nan is not a finite number"),
    ("generation_config.json", {"decoder_start_token_id": -3},
     r"generation_config\.json: decoder_start_token_id=-3 must be at least 0"),
    ("config.json", {"num_beams": 10**9}, r"config\.json: num_beams=1000000000 exceeds"),
    ("config.json", {"encoder_layers": "6", "decoder_layers": "6"}, r"config\.json: encoder_layers='6' is not an"),
    ("config.json", {"d_model": float("nan")}, r"config\.json: d_model=nan is not an integer"),
    ("config.json", {"scale_embedding": "false"}, r"config\.json: scale_embedding='false' is not true or false"),
])
def test_sidecar_values_are_bounded_and_named(marian_dir, tmp_path, capsys, file, values, message):
    """num_beams 1e9 in generation_config.json ran 135 s, then failed allocating 264 GB."""
    import attnlab

    directory = _marian_copy(marian_dir, tmp_path)
    if file == "config.json" and "num_beams" in values:
        (directory / "generation_config.json").unlink()  # the config's own field is then the one used
    path = directory / file
    path.write_text(json.dumps({**json.loads(path.read_text()), **values}))
    with pytest.raises(ValueError, match=message):
        load_hf_marian(directory)
    with pytest.raises(ValueError, match=message):
        attnlab.load(directory)
    assert main(["translate", "--model", str(directory), "--input", str(directory / "tokenizer_config.json")]) == 2
    err = capsys.readouterr().err
    assert file in err and "Traceback" not in err


@pytest.mark.parametrize("name", ["generation_config.json", "tokenizer_config.json", "config.json"])
def test_deeply_nested_sidecars_name_the_file(marian_dir, tmp_path, name):
    from reference.damaged import nested_json

    directory = _marian_copy(marian_dir, tmp_path)
    (directory / name).write_text(nested_json())
    with pytest.raises(ValueError, match=rf"{name}: .*nested too deeply"):
        load_hf_marian(directory)


@pytest.mark.parametrize("kind, message", [("int", "has dtype int64"), ("nan", "holds NaN or infinity")])
def test_weights_are_checked_by_the_shared_check(marian_dir, tmp_path, kind, message):
    """The MarianMT loader had its own finiteness loop naming attnlab's keys; now the one
    check every loader runs names the file and its tensor."""
    from reference.damaged import damage_weights

    directory = _marian_copy(marian_dir, tmp_path)
    name = damage_weights(directory, kind)
    with pytest.raises(ValueError, match=rf"model\.safetensors: tensor '{name}' {message}"):
        load_hf_marian(directory)


def test_a_real_sized_vocab_json_is_not_capped_as_a_config(marian_dir, tmp_path):
    """opus-mt's vocab.json (58k pieces) is about 1.3 MB: larger than a config's 1 MiB cap."""
    directory = _marian_copy(marian_dir, tmp_path)
    path = directory / "vocab.json"
    path.write_text(path.read_text(encoding="utf-8") + " " * (3 << 19), encoding="utf-8")
    load_hf_marian(directory)
