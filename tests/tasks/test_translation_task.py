"""The translation task's pieces (attnlab.tasks.translation) that need no trained model."""

import pytest
import torch

import attnlab
from attnlab.data import ParallelCorpus, Tokenizer, collate_translation
from attnlab.training import label_smoothed_cross_entropy
from attnlab.tasks.translation import (
    TranslationTrainOptions,
    encode_and_filter,
    load_training_corpora,
    translation_loss,
)
from attnlab.translation import Translator

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
    batched = translator.translate(sentences, beam_size=2, batch_size=2, max_len_a=0.5, max_len_b=3)
    assert len(batched) == 4 and batched[1] == ""
    single = [translator.translate([s], beam_size=2, max_len_a=0.5, max_len_b=3)[0] for s in sentences]
    assert batched == single


def test_vocabulary_mismatch_is_refused(tokenizer):
    model = attnlab.create_model("transformer_tiny", vocab_size=tokenizer.vocab_size + 1)
    with pytest.raises(ValueError, match="vocab_size"):
        Translator(model, tokenizer)
