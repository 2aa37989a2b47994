"""Evaluation: translation scores (sacrebleu BLEU and chrF)."""

from attnlab.evaluation.bleu import TranslationScores, score_translations

__all__ = ["TranslationScores", "score_translations"]
