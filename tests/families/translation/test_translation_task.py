"""The translation task's pieces (attnlab.families.translation.task) that need no trained model."""

import pytest
import torch

import attnlab
from attnlab.data import ParallelCorpus, Tokenizer, collate_translation
from attnlab.training import label_smoothed_cross_entropy
from attnlab.families.translation.task import (
    TranslationTrainOptions,
    encode_and_filter,
    load_training_corpora,
    translation_loss,
)
from attnlab.families.translation.translator import Translator

SENTENCES = [("Ein Hund läuft.", "A dog runs."), ("Zwei Katzen schlafen im Haus.", "Two cats sleep in the house."),
             ("Ein Mann fährt Rad.", "A man rides a bike."), ("Kinder spielen.", "Children play.")] * 5


@pytest.fixture(scope="module")
def tokenizer():
    texts = [s for pair in SENTENCES for s in pair]
    return Tokenizer.train(texts, vocab_size=60)


def test_loss_is_label_smoothed_sum_over_real_tokens(tokenizer):
    model = attnlab.create_model("transformer_tiny", vocab_size=tokenizer.vocab_size, dropout=0.0)
    batch = collate_translation(tokenizer.encode_pairs(SENTENCES[:4]))
    loss_sum, tokens, logs = translation_loss(0.1)(model, batch)
    expected = label_smoothed_cross_entropy(model(batch["src"], batch["tgt_in"]), batch["tgt_out"],
                                            epsilon=0.1, ignore_index=0)
    assert tokens == int((batch["tgt_out"] != 0).sum()) == expected.num_tokens
    torch.testing.assert_close(loss_sum, expected.loss_sum)
    torch.testing.assert_close(logs["nll"], expected.nll_sum)


@pytest.mark.parametrize("overrides", [{}, {"norm_first": True}, {"positional": "learned", "max_positions": 64}])
def test_varlen_loss_and_gradients_equal_the_padded_ones(tokenizer, overrides):
    # float64, no dropout: the packed forward computes only the real tokens, the same maths.
    torch.manual_seed(4)
    model = attnlab.create_model("transformer_tiny", vocab_size=tokenizer.vocab_size, dropout=0.0,
                                 **overrides).double()
    batch = collate_translation(tokenizer.encode_pairs([SENTENCES[i] for i in (1, 0, 3, 2, 1)]))
    assert (batch["src"] == 0).any() and (batch["tgt_in"] == 0).any()  # both sides padded
    results = []
    for varlen in (False, True):
        model.zero_grad()
        loss_sum, tokens, logs = translation_loss(0.1, varlen=varlen)(model, batch)
        loss_sum.backward()
        results.append((loss_sum.detach(), tokens, logs["nll"].detach(),
                        [p.grad.clone() for p in model.parameters()]))
    (padded, padded_tokens, padded_nll, padded_grads), (packed, packed_tokens, packed_nll, packed_grads) = results
    assert packed_tokens == padded_tokens
    # float64 throughout: the two differ in summation order only (~1e-16 relative on sums of a
    # few hundred, gradients of size <= ~10), far inside 1e-10.
    torch.testing.assert_close(packed, padded, rtol=0, atol=1e-10)
    torch.testing.assert_close(packed_nll, padded_nll, rtol=0, atol=1e-10)
    for got, expected in zip(packed_grads, padded_grads):
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-10)


def test_varlen_logits_are_the_real_positions_of_the_padded_ones():
    torch.manual_seed(5)
    model = attnlab.create_model("transformer_tiny", dropout=0.0).double().eval()
    src = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0], [11, 2, 0, 0, 0]])
    tgt = torch.tensor([[1, 12, 13, 14], [1, 15, 0, 0], [1, 16, 17, 0]])
    packed = model(src, tgt, varlen=True)
    torch.testing.assert_close(packed, model(src, tgt)[tgt != 0], rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="tgt_ids: variable-length attention needs right padding"):
        model(src, torch.tensor([[1, 12, 13, 14], [0, 1, 15, 16], [1, 16, 17, 0]]), varlen=True)
    with pytest.raises(ValueError, match="3 sources for 2 targets"):
        model(src, tgt[:2], varlen=True)


def test_varlen_option_refuses_a_pattern_without_it(tmp_path):
    from attnlab.translation import train_translation

    options = TranslationTrainOptions(out=str(tmp_path / "run"), preset="transformer_tiny", varlen=True,
                                      model_overrides={"encoder_attention": {"name": "local_1d", "block_length": 4,
                                                                             "masked": False}})
    with pytest.raises(ValueError, match="--varlen: the encoder's attention pattern .* cannot attend packed"):
        train_translation(options)
    assert not (tmp_path / "run").exists()


def test_default_token_batches_are_larger_on_a_gpu(tmp_path, capsys):
    from attnlab.families.translation.task import default_max_tokens
    from attnlab.translation import train_translation

    assert default_max_tokens("cpu") == 4096
    assert default_max_tokens("cuda") == default_max_tokens("cuda:1") == 25600
    source, target = tmp_path / "train.de", tmp_path / "train.en"
    source.write_text("".join(f"{de}\n" for de, _ in SENTENCES), encoding="utf-8")
    target.write_text("".join(f"{en}\n" for _, en in SENTENCES), encoding="utf-8")
    train_translation(TranslationTrainOptions(out=str(tmp_path / "run"), train_src=str(source), train_tgt=str(target),
                                              preset="transformer_tiny", vocab_size=60, max_steps=1, val_every=None,
                                              progress_bar=False))
    assert "batches of <= 4096 tokens" in capsys.readouterr().err


def test_length_filter_counts_what_it_drops(tokenizer):
    corpus = ParallelCorpus(SENTENCES[:4])
    examples, result = encode_and_filter(tokenizer, corpus, max_length=6)
    assert len(examples) == len(result.kept) and result.dropped == 4 - len(examples) and result.too_long > 0


@pytest.mark.parametrize("overrides, message", [
    ({}, "either --data NAME or --train-src"),
    ({"data": "multi30k", "train_src": "a", "train_tgt": "b"}, "either --data NAME or --train-src"),
    ({"train_src": "a"}, "--train-src and --train-tgt go together"),
])
def test_data_source_must_be_one_of_two(overrides, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        load_training_corpora(TranslationTrainOptions(out=str(tmp_path), **overrides))


def test_translate_restores_order_and_keeps_empty_lines(tokenizer):
    model = attnlab.create_model("transformer_tiny", vocab_size=tokenizer.vocab_size)
    translator = Translator(model, tokenizer)
    sentences = ["Ein Hund.", "", "Zwei Katzen schlafen im Haus, und ein Mann fährt Rad.", "Kinder."]
    batched = translator.translate(sentences, beam=2, batch_size=2, max_len_a=0.5, max_len_b=3)
    assert len(batched) == 4 and batched[1] == ""
    single = [translator.translate([s], beam=2, max_len_a=0.5, max_len_b=3)[0] for s in sentences]
    assert batched == single


def test_vocabulary_mismatch_is_refused(tokenizer):
    model = attnlab.create_model("transformer_tiny", vocab_size=tokenizer.vocab_size + 1)
    with pytest.raises(ValueError, match="vocab_size"):
        Translator(model, tokenizer)


def test_attnlab_translation_is_the_public_path_of_the_family_api():
    """docs/translation.md imports from attnlab.translation: each name is the family package's object."""
    import attnlab.translation as public
    from attnlab.families.translation import onnx, task, train, translator

    for name in public.__all__:
        home = translator if name in ("Translator", "AttentionExample") else train if name == "train_translation" \
            else onnx if name == "onnx_greedy_translate" else task
        assert getattr(public, name) is getattr(home, name)
    with pytest.raises(AttributeError):
        public.no_such_name
