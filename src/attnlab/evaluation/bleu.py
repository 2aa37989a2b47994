"""Corpus-level translation scores with sacrebleu.

Three numbers, each with the sacrebleu signature that makes it reproducible:

* ``bleu``: sacreBLEU as papers should report it: cased, sacrebleu's ``13a`` tokenisation
  of detokenised text, one reference (Post 2018).
* ``chrf``: chrF2 (character n-gram F-score, Popović 2015), sacrebleu defaults.
* ``bleu_lc``: lower-cased BLEU on ``13a``-tokenised text. This is how the small-model
  Multi30k numbers are usually computed (lower-cased, tokenised text scored with a
  multi-bleu-style script); sacrebleu's ``13a`` tokeniser splits punctuation like the
  tokenisers those setups use, so the numbers are comparable in kind, though tokenisers
  differ in details (e.g. ``'s``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF

__all__ = ["TranslationScores", "score_translations"]


@dataclass(frozen=True)
class TranslationScores:
    """Scores of a set of translations against one reference each (all in 0–100)."""

    bleu: float
    bleu_signature: str
    chrf: float
    chrf_signature: str
    bleu_lc: float
    bleu_lc_signature: str
    sentences: int

    def report(self) -> str:
        """A few human-readable lines with every score and signature."""
        return "\n".join([
            f"BLEU   {self.bleu:6.2f}   {self.bleu_signature}",
            f"chrF   {self.chrf:6.2f}   {self.chrf_signature}",
            f"BLEU   {self.bleu_lc:6.2f}   {self.bleu_lc_signature}   (lower-cased, tokenized)",
        ])

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def score_translations(hypotheses: Sequence[str], references: Sequence[str]) -> TranslationScores:
    """sacreBLEU (cased, 13a), chrF and lower-cased tokenized BLEU of ``hypotheses``.

    Raises:
        ValueError: the two lists differ in length, or are empty.
    """
    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} translations but {len(references)} references")
    if not hypotheses:
        raise ValueError("nothing to score: no translations")
    cased = BLEU(tokenize="13a")
    lower = BLEU(tokenize="13a", lowercase=True)
    chrf = CHRF()
    return TranslationScores(
        bleu=cased.corpus_score(hypotheses, [references]).score,
        bleu_signature=str(cased.get_signature()),
        chrf=chrf.corpus_score(hypotheses, [references]).score,
        chrf_signature=str(chrf.get_signature()),
        bleu_lc=lower.corpus_score(hypotheses, [references]).score,
        bleu_lc_signature=str(lower.get_signature()),
        sentences=len(hypotheses),
    )
