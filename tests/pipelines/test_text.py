"""Translation, language-model and BERT pipelines equal the routes their CLI verbs take."""

import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab.cli.main import main
from attnlab.families.lm.task import evaluate_text

SENTENCES = ["ein kleiner hund läuft", "die wiese", "", "ein hund 7 läuft über die wiese"]


def _stdout(argv, capsys) -> str:
    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr().out


# -- translation -------------------------------------------------------------------------
@pytest.mark.parametrize("beam", [1, 3])
def test_translate_equals_the_translator_and_the_cli(translation_dir, tmp_path, capsys, beam):
    from attnlab.families.translation.translator import Translator

    pipeline = attnlab.load(translation_dir)
    got = pipeline.translate(SENTENCES, beam=beam)
    assert got == Translator.load(translation_dir).translate(SENTENCES, beam=beam)
    source = tmp_path / "source.txt"
    source.write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    cli = _stdout(["translate", "--model", str(translation_dir), "--input", str(source), "--beam", str(beam),
                   "--device", "cpu"], capsys)
    assert cli == "".join(t + "\n" for t in got)
    assert pipeline.translate(SENTENCES[0], beam=beam) == got[0]  # one string in, one string out
    if beam == 3:
        assert pipeline.translate(SENTENCES) == pipeline.translate(SENTENCES, beam=4)  # the verb's default beam


def test_translation_attention_equals_the_translators_cross_attention(translation_dir):
    from attnlab.families.translation.translator import Translator

    groups = attnlab.load(translation_dir).attention(SENTENCES[0])
    assert sorted(groups) == ["cross", "decoder self", "encoder self"]
    expected = Translator.load(translation_dir).attention(SENTENCES[0], beam=1)  # greedy, as the explorer
    torch.testing.assert_close(groups["cross"], expected.cross)
    layers, heads, source, _ = groups["encoder self"].shape
    assert source == len(expected.source_pieces)
    torch.testing.assert_close(groups["encoder self"].sum(-1), torch.ones(layers, heads, source))


def test_translation_arguments_are_checked(translation_dir):
    pipeline = attnlab.load(translation_dir)
    with pytest.raises(ValueError, match="beam=0"):
        pipeline.translate(["x"], beam=0)
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        pipeline.translate(["x", 3])


# -- decoder-only language model ---------------------------------------------------------
@pytest.mark.parametrize("fixture", ["lm_char_dir", "lm_bpe_dir"])
@pytest.mark.parametrize("options", [["--greedy"], ["--seed", "3", "--temperature", "0.8", "--top-k", "5"]])
def test_generate_gives_the_text_attnlab_generate_prints(fixture, options, request, capsys):
    directory = request.getfixturevalue(fixture)
    lm = attnlab.load(directory)
    kwargs = {"greedy": True} if options == ["--greedy"] else {"seed": 3, "temperature": 0.8, "top_k": 5}
    text = lm.generate("ROMEO:\nthe", 12, **kwargs)
    cli = _stdout(["generate", "--model", str(directory), "--prompt", "ROMEO:\nthe", "--max-new-tokens", "12",
                   "--device", "cpu", *options], capsys)
    assert cli == "ROMEO:\nthe" + text + "\n"
    # A list of prompts is one left-padded batch, as the verb's several --prompt.
    texts = lm.generate(["the", "a dog"], 8, **kwargs)
    cli = _stdout(["generate", "--model", str(directory), "--prompt", "the", "--prompt", "a dog", "--max-new-tokens",
                   "8", "--device", "cpu", *options], capsys)
    assert cli == "".join(prompt + text + "\n" + "-" * 40 + "\n" for prompt, text in zip(["the", "a dog"], texts))


def test_score_is_the_mean_next_token_nll(lm_bpe_dir):
    lm = attnlab.load(lm_bpe_dir)
    text = "the quick brown fox jumps over the lazy dog."
    ids = torch.tensor(lm.tokenizer.encode(text))
    with torch.no_grad():
        logits = lm.model(ids[None, :-1])[0]
    expected = float(F.cross_entropy(logits, ids[1:]))  # mean over the predicted tokens, in nats
    assert lm.score(text) == pytest.approx(expected, rel=1e-5)
    assert lm.score([text, "a dog"]) == pytest.approx([expected, lm.score("a dog")], rel=1e-6)
    with pytest.raises(ValueError, match="at least 2"):
        lm.score("a")
    # A text longer than the context is scored in windows of it, as attnlab evaluate-lm does.
    long_text = "the lazy dog. " * 40
    long_ids = lm.tokenizer.encode(long_text)
    assert len(long_ids) > 48 + 1
    assert lm.score(long_text) == pytest.approx(evaluate_text(lm.model, long_ids, context=48)["nll"], rel=1e-6)
    assert lm.score(long_text, stride=16) == pytest.approx(
        evaluate_text(lm.model, long_ids, context=48, stride=16)["nll"], rel=1e-6)
    with pytest.raises(ValueError, match="stride=49 must be at most the model's context"):
        lm.score(long_text, stride=49)


def test_lm_attention_is_the_models_causal_self_attention(lm_char_dir):
    from attnlab.viz.explorer.maps import attention_maps

    lm = attnlab.load(lm_char_dir)
    groups = lm.attention("the dog")
    expected = attention_maps(lm.model, ids=torch.tensor([lm.tokenizer.encode("the dog")]))
    assert list(groups) == ["self"]
    torch.testing.assert_close(groups["self"], expected["self"])
    weights = groups["self"]
    assert weights.shape[-1] == 7 and float(weights.triu(1).abs().max()) == 0.0  # nothing from the future
    assert lm.attention("the", generate=3)["self"].shape[-1] == 6


def test_lm_bad_arguments(lm_char_dir):
    lm = attnlab.load(lm_char_dir)
    with pytest.raises(TypeError, match="prompt"):
        lm.generate(5)
    with pytest.raises(ValueError, match="max_new_tokens=0"):
        lm.generate("the", 0)
    with pytest.raises(ValueError, match="Z"):
        lm.generate("the Z", 3)  # a character the tokenizer does not know


# -- BERT ----------------------------------------------------------------------------------
TEXTS = ["a man is playing guitar.", "the dog runs", "the cats sleeps on the mat, the dog runs"]


def test_embed_is_mean_pooled_unit_length_on_an_attnlab_bert_directory(bert_dir):
    pipeline = attnlab.load(bert_dir)
    embeddings = pipeline.embed(TEXTS)
    batch, _ = pipeline.tokenizer.encode(TEXTS)
    with torch.no_grad():
        hidden = pipeline.model(batch["ids"], attention_mask=batch["attention_mask"],
                                token_type_ids=batch["token_type_ids"]).hidden
    mask = batch["attention_mask"][..., None].float()
    mean = (hidden * mask).sum(1) / mask.sum(1)
    torch.testing.assert_close(embeddings, mean / mean.norm(dim=-1, keepdim=True))
    assert embeddings.shape == (3, 32)
    torch.testing.assert_close(pipeline.embed(TEXTS[1]), embeddings[1], atol=1e-6, rtol=1e-5)  # padding-invariant
    torch.testing.assert_close(pipeline.embed(TEXTS, batch_size=1), embeddings, atol=1e-6, rtol=1e-5)


def _cli_vectors(directory, texts, capsys, decimals=8) -> torch.Tensor:
    out = _stdout(["embed", "--model", str(directory), "--vectors", "--decimals", str(decimals), "--device", "cpu",
                   *texts], capsys)
    return torch.tensor([[float(v) for v in line.split()] for line in out.splitlines()])


def test_embed_equals_attnlab_embed_on_a_huggingface_directory(hf_bert_dir, capsys):
    embeddings = attnlab.load(hf_bert_dir).embed(TEXTS)
    torch.testing.assert_close(embeddings, _cli_vectors(hf_bert_dir, TEXTS, capsys), atol=1e-6, rtol=0)


def test_minilm_through_attnlab_load_equals_attnlab_embed(minilm_dir, capsys):
    sentences = ["A man is playing a guitar.", "Someone plays an instrument.", "The stock market fell today."]
    pipeline = attnlab.load(minilm_dir)
    embeddings = pipeline.embed(sentences)
    assert embeddings.shape == (3, 384)
    torch.testing.assert_close(embeddings, _cli_vectors(minilm_dir, sentences, capsys, decimals=7), atol=2e-6, rtol=0)
    similarity = embeddings @ embeddings.T
    assert similarity[0, 1] > similarity[0, 2] + 0.3  # the paraphrase is far closer than the unrelated sentence


def test_bert_attention_is_the_encoders_self_attention(bert_dir):
    pipeline = attnlab.load(bert_dir)
    groups = pipeline.attention("the dog runs")
    batch, tokens = pipeline.tokenizer.encode(["the dog runs"])
    assert tokens[0] == ["[CLS]", "the", "dog", "runs", "[SEP]"]
    with torch.no_grad():
        out = pipeline.model(batch["ids"], attention_mask=batch["attention_mask"], need_weights=True)
    torch.testing.assert_close(groups["self"], torch.stack([w[0] for w in out.attentions]))


def test_a_bert_directory_without_vocab_txt_is_refused(tmp_path, bert_dir):
    attnlab.load_model(bert_dir).save_pretrained(tmp_path / "bare")
    with pytest.raises(ValueError, match="vocab.txt: no such file"):
        attnlab.load(tmp_path / "bare")
