"""Translate plain sentences with a trained model directory: tokenise, batch by length,
beam search, restore the input order, detokenise.

    translator = Translator.load("runs/quickstart/model")
    translator.translate(["Das Haus ist klein."])          # ['The house is small.']
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from attnlab.data import Tokenizer
from attnlab.generation import beam_search, greedy_search
from attnlab.models.registry import load_model
from attnlab.families.translation.task import TASK_FILE
from attnlab.interop.hf_marian import check_generation_defaults
from attnlab.pipelines.base import check_beam, check_int, check_number, check_texts

__all__ = ["AttentionExample", "Translator"]


@dataclass(frozen=True)
class AttentionExample:
    """The encoder–decoder attention behind one translation.

    ``cross`` is ``(layers, heads, T, S)``: row ``t`` is the query that predicted
    ``target_pieces[t]``, column ``s`` the source piece ``source_pieces[s]``. Both piece
    lists include the EOS token (``</s>``) the model saw or produced.
    """

    source: str
    translation: str
    source_pieces: list[str]
    target_pieces: list[str]
    cross: Tensor


class Translator:
    """A translation model with its tokenizer (and its languages, when known).

    Args:
        model: an encoder–decoder model (``encode``/``decode``/``new_cache``, e.g. the
            Transformer) whose vocabulary is the tokenizer's.
        tokenizer: the model's joint sentencepiece vocabulary (or a
            :class:`~attnlab.interop.hf_marian.MarianTokenizer`).
        info: what ``translation.json`` holds (``src_lang``, ``tgt_lang``, ``data``), if anything;
            for a MarianMT directory ``{"format": "marian", "generation": {num_beams, max_length, ...}}``.
            ``generation["num_beams"]`` is the default beam size (else 4).
    """

    def __init__(self, model, tokenizer: Tokenizer, info: dict | None = None):
        vocab = model.config.vocab_size
        if vocab != tokenizer.vocab_size:
            raise ValueError(f"the model has vocab_size={vocab} but the tokenizer has {tokenizer.vocab_size} pieces")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.info = dict(info or {})
        generation = self.info.get("generation") or {}
        if not isinstance(generation, dict):
            raise ValueError(f"{TASK_FILE}: \"generation\" must be an object of decoding settings")
        check_generation_defaults(generation, TASK_FILE)  # num_beams 1..MAX_BEAM, ...: as from a MarianMT file
        self.default_beam_size = generation.get("num_beams", 4)

    @classmethod
    def load(cls, directory: str | os.PathLike, *, device: str = "cpu") -> Translator:
        """Load ``config.json`` + ``model.safetensors`` + ``tokenizer.model`` (+ ``translation.json``),
        or a HuggingFace MarianMT directory (``config.json`` with ``model_type: marian``; see
        :func:`attnlab.interop.hf_marian.load_hf_marian`)."""
        from attnlab.interop.hf_marian import is_hf_marian_directory, load_hf_marian

        from attnlab.files import read_json_object
        from attnlab.interop.hf_marian import MarianTokenizer
        from attnlab.tasks import MAX_TASK_FILE_BYTES

        directory = Path(directory)
        if is_hf_marian_directory(directory):
            model, tokenizer, generation = load_hf_marian(directory, device=device)
            return cls(model, tokenizer, {"format": "marian", "generation": generation})
        model = load_model(directory, device=device)
        family = model.config.family
        if family != "transformer":
            raise ValueError(f"{directory}: holds a {family!r} model; translation needs an encoder-decoder "
                             "'transformer' model (a language model is used with attnlab generate)")
        info_path = directory / TASK_FILE
        info = read_json_object(info_path, max_bytes=MAX_TASK_FILE_BYTES) if info_path.is_file() else {}
        try:
            # a MarianMT model saved by attnlab (TranslationPipeline.save_pretrained) keeps Marian's tokenizer
            tokenizer = MarianTokenizer.load(directory) if info.get("format") == "marian" else Tokenizer.load(directory)
        except FileNotFoundError as error:
            raise ValueError(f"{directory}: holds no tokenizer ({error})") from None
        try:
            return cls(model, tokenizer, info)
        except ValueError as error:
            raise ValueError(f"{info_path if str(error).startswith(TASK_FILE) else directory}: "
                             f"{str(error).removeprefix(TASK_FILE + ': ')}") from None

    def save(self, directory: str | os.PathLike) -> None:
        """Write the tokenizer and ``translation.json`` into ``directory`` (beside a model's
        ``save_pretrained``): what :meth:`load` reads."""
        from attnlab.files import atomic_write_json

        self.tokenizer.save(directory)
        if self.info:
            atomic_write_json(Path(directory) / TASK_FILE, self.info)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # -- ids --------------------------------------------------------------------------
    def _source_ids(self, sentences: Sequence[str]) -> list[list[int]]:
        """Subword ids + EOS for each sentence (what the model saw in training)."""
        eos = self.model.config.eos_id
        limit = self._max_source_tokens()
        encoded = self.tokenizer.encode_batch(list(sentences))
        for number, ids in enumerate(encoded, start=1):
            if len(ids) + 1 > limit:
                raise ValueError(f"sentence {number} has {len(ids) + 1} tokens; the model accepts at most {limit} "
                                 "(its max_positions): split it into shorter sentences")
        return [ids + [eos] for ids in encoded]

    def _max_source_tokens(self) -> int:
        # A learned position table ends at the model's max_source_length; sinusoidal ones
        # extend, but the model never saw such lengths, and an unbounded line would cost
        # minutes of quadratic attention: max_positions caps both.
        return self.model.max_source_length or self.model.config.max_positions

    def _pad(self, rows: Sequence[Sequence[int]]) -> Tensor:
        pad = self.model.config.pad_id
        batch = torch.full((len(rows), max(len(r) for r in rows)), pad, dtype=torch.long)
        for i, row in enumerate(rows):
            batch[i, : len(row)] = torch.as_tensor(row, dtype=torch.long)
        return batch.to(self.device)

    def _search(self, src: Tensor, beam_size: int, alpha: float, max_len_a: float, max_len_b: float,
                use_cache: bool = True, cuda_graph: bool = False, compile: bool | str = False) -> list[list[int]]:
        if beam_size == 1 and not cuda_graph:
            hypotheses = greedy_search(self.model, src, alpha=alpha, max_len_a=max_len_a, max_len_b=max_len_b,
                                       use_cache=use_cache, compile=compile)
        else:
            hypotheses = [best[0] for best in beam_search(self.model, src, beam_size=beam_size, alpha=alpha,
                                                          max_len_a=max_len_a, max_len_b=max_len_b,
                                                          use_cache=use_cache, cuda_graph=cuda_graph,
                                                          compile=compile)]
        return [h.tokens for h in hypotheses]

    def _decoding(self, beam, beam_size, alpha, max_len_a, max_len_b) -> int:
        """The beam size to search with, every decoding argument checked as the CLI's flags
        are: ``beam`` 1..MAX_BEAM (None: :attr:`default_beam_size`; ``beam_size``, the old
        name, still accepted with a DeprecationWarning), ``alpha``, ``max_len_a`` and
        ``max_len_b`` finite and >= 0."""
        if beam_size is not None:
            if beam is not None and beam != beam_size:
                raise ValueError(f"beam={beam} and beam_size={beam_size}: give only beam")
            warnings.warn("translate(beam_size=...) is the old name of beam=...", DeprecationWarning, stacklevel=4)
            beam = beam_size
        beam = self.default_beam_size if beam is None else beam
        check_beam(beam)
        for name, value in (("alpha", alpha), ("max_len_a", max_len_a), ("max_len_b", max_len_b)):
            check_number(value, name, low=0.0)
        return beam

    # -- text -------------------------------------------------------------------------
    @torch.no_grad()
    def translate(self, sentences: Sequence[str], *, beam: int | None = None, alpha: float = 0.6,
                  batch_size: int = 32, max_len_a: float = 1.5, max_len_b: float = 10,
                  use_cache: bool = True, cuda_graph: bool = False, beam_size: int | None = None,
                  compile: bool | str = False) -> list[str]:
        """Translations of ``sentences``, in the same order and number.

        Sentences are sorted by length and decoded ``batch_size`` at a time (similar lengths
        share a batch, so little work is spent on padding); an empty sentence translates to
        an empty string. ``beam`` (as ``--beam`` and the pipelines' ``beam=``; ``beam_size`` is
        its deprecated old name): 1 is greedy search, at most :data:`attnlab.limits.MAX_BEAM`; None: the model's
        default (:attr:`default_beam_size`: a MarianMT directory's ``num_beams``, else 4). The output may have at most
        ``max_len_a * source_tokens + max_len_b`` tokens (subword tokens, EOS included).
        ``use_cache=False`` decodes naively, recomputing every prefix (same output, slower).
        ``cuda_graph=True`` (a model on a CUDA device): every batch's search replays one
        captured CUDA graph per token (:func:`~attnlab.generation.search.beam_search`).
        ``compile="aot"``: the decoder's step compiled ahead of time (:mod:`attnlab.generation.aot`).
        """
        sentences, single = check_texts(sentences, "sentences")
        if single:  # a str would be translated character by character
            raise TypeError("sentences: a list of strings; for one sentence pass [sentence] (attnlab.load(...)"
                            ".translate(text) takes one string)")
        beam_size = self._decoding(beam, beam_size, alpha, max_len_a, max_len_b)
        check_int(batch_size, "batch_size")
        sentences = [s.strip() for s in sentences]
        source_ids = self._source_ids(sentences)
        outputs = [""] * len(sentences)
        todo = sorted((i for i, s in enumerate(sentences) if s), key=lambda i: len(source_ids[i]), reverse=True)
        for start in range(0, len(todo), batch_size):
            chunk = todo[start : start + batch_size]
            tokens = self._search(self._pad([source_ids[i] for i in chunk]), beam_size, alpha, max_len_a, max_len_b,
                                  use_cache, cuda_graph, compile)
            for i, ids in zip(chunk, tokens):
                outputs[i] = self.tokenizer.decode(ids)
        return outputs

    @torch.no_grad()
    def attention(self, sentence: str, *, beam: int | None = None, alpha: float = 0.6, max_len_a: float = 1.5,
                  max_len_b: float = 10, beam_size: int | None = None) -> AttentionExample:
        """Translate one sentence and return the encoder–decoder attention of every layer and head."""
        sentence = sentence.strip()
        if not sentence:
            raise ValueError("the sentence to translate is empty")
        beam_size = self._decoding(beam, beam_size, alpha, max_len_a, max_len_b)
        src_ids = self._source_ids([sentence])[0]
        src = self._pad([src_ids])
        output = self._search(src, beam_size, alpha, max_len_a, max_len_b)[0]
        # Teacher-force the chosen translation: query t is the step that produced output[t].
        tgt_in = self._pad([[self.model.config.bos_id] + output[:-1]])
        _, weights = self.model.attention_maps(src, tgt_in)
        cross = torch.stack([w[0] for w in weights.cross]).float().cpu()  # (layers, H, T, S)
        return AttentionExample(
            source=sentence,
            translation=self.tokenizer.decode(output),
            source_pieces=self.tokenizer.pieces(src_ids),
            target_pieces=self.tokenizer.pieces(output),
            cross=cross,
        )
