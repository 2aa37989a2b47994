"""attnlab.evaluation.score_translations against sacrebleu called directly."""

import pytest
import sacrebleu

from attnlab.evaluation import score_translations

HYPOTHESES = ["The cat sat on the mat.", "A man rides a Bike down the street!", "two dogs play"]
REFERENCES = ["The cat sat on the mat.", "A man is riding a bike down the street.", "Two dogs are playing."]


def test_scores_equal_sacrebleu():
    scores = score_translations(HYPOTHESES, REFERENCES)
    assert scores.bleu == pytest.approx(sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES], tokenize="13a").score)
    assert scores.chrf == pytest.approx(sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES]).score)
    assert scores.bleu_lc == pytest.approx(
        sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES], tokenize="13a", lowercase=True).score)
    assert scores.bleu_lc > scores.bleu  # "Bike"/"bike" and "two"/"Two" only match lower-cased
    assert scores.bleu_signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert "case:lc" in scores.bleu_lc_signature
    assert scores.sentences == 3
    assert "tok:13a" in scores.report()


def test_perfect_translations_score_100():
    scores = score_translations(REFERENCES, REFERENCES)
    assert scores.bleu == pytest.approx(100.0) and scores.chrf == pytest.approx(100.0)


@pytest.mark.parametrize("hypotheses, references, message", [
    (["a"], ["a", "b"], "1 translations but 2 references"),
    ([], [], "nothing to score"),
])
def test_bad_input(hypotheses, references, message):
    with pytest.raises(ValueError, match=message):
        score_translations(hypotheses, references)
