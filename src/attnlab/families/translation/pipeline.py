"""The translation family's pipeline (``attnlab.load`` of a translation model directory)."""

from __future__ import annotations

from pathlib import Path

from torch import Tensor

from attnlab.pipelines.base import Pipeline, attention_groups, check_texts

__all__ = ["TranslationPipeline"]


class TranslationPipeline(Pipeline):
    """An encoder–decoder translation model with its sentencepiece vocabulary
    (:class:`attnlab.translation.Translator`, what ``attnlab translate`` runs)."""

    family = "transformer"

    def __init__(self, translator, directory=None):
        super().__init__(translator.model, directory)
        self.translator = translator

    @classmethod
    def load(cls, directory: Path, *, device: str = "cpu") -> TranslationPipeline:
        from attnlab.families.translation.translator import Translator

        return cls(Translator.load(directory, device=device), directory)

    @property
    def tokenizer(self):
        return self.translator.tokenizer

    def translate(self, texts: str | list[str], *, beam: int | None = None, alpha: float = 0.6,
                  max_len_a: float = 1.5, max_len_b: float = 10, batch_size: int = 32) -> str | list[str]:
        """Translations of ``texts`` (one string, or a list: same order and number); beam
        search with the GNMT length penalty ``alpha`` (``beam=1``: greedy, at most 64; None:
        the model's default, a MarianMT directory's ``num_beams``, else 4), as ``attnlab
        translate``; every argument is checked as that verb's flags are."""
        items, single = check_texts(texts)
        out = self.translator.translate(items, beam=beam, alpha=alpha, batch_size=batch_size,
                                        max_len_a=max_len_a, max_len_b=max_len_b)
        return out[0] if single else out

    def save_parts(self, directory: Path) -> None:
        """The tokenizer (sentencepiece ``tokenizer.model``, or a MarianMT model's
        ``source.spm``/``target.spm``/``vocab.json``) and ``translation.json``."""
        self.translator.save(directory)

    def attention(self, text: str) -> dict[str, Tensor]:
        """Greedy-translate ``text``, then the encoder self, decoder self and cross attention
        of the teacher-forced output (the explorer's :class:`TranslationSource`)."""
        from attnlab.families.translation.explore import TranslationSource

        check_texts(text, "text")
        return attention_groups(TranslationSource(self.translator).analyse(text))
