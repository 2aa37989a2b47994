"""Joint subword vocabulary (sentencepiece, BPE or unigram) shared by source and target.

The paper (Vaswani et al. 2017, section 5.1) uses one shared byte-pair vocabulary for
English–German; here ``Tokenizer.train`` learns it from the training sentences of both
languages, ``save`` writes it as ``tokenizer.model`` (sentencepiece's own protobuf
format, nothing pickled) next to the model's weights, and ``load`` reads it back.

Special ids are fixed so every model agrees on them: pad 0, bos 1, eos 2, unk 3.
``encode`` adds no special tokens; ``collate_translation`` adds BOS and EOS where the
model needs them. ``decode`` returns detokenised plain text.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import sentencepiece as spm

__all__ = ["BOS_ID", "EOS_ID", "PAD_ID", "TOKENIZER_FILE", "UNK_ID", "Tokenizer"]

TOKENIZER_FILE = "tokenizer.model"
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
MODEL_TYPES = ("bpe", "unigram")


class Tokenizer:
    """A trained sentencepiece model with fixed special ids.

    Build one with ``Tokenizer.train(...)`` or ``Tokenizer.load(directory)``.
    """

    def __init__(self, model_proto: bytes):
        """Wrap a serialised sentencepiece model (the bytes of a ``tokenizer.model`` file)."""
        self._proto = bytes(model_proto)
        self._processor = spm.SentencePieceProcessor(model_proto=self._proto)
        specials = (self._processor.pad_id(), self._processor.bos_id(),
                    self._processor.eos_id(), self._processor.unk_id())
        if specials != (PAD_ID, BOS_ID, EOS_ID, UNK_ID):
            raise ValueError(
                f"sentencepiece model has special ids pad/bos/eos/unk = {specials}; attnlab "
                f"needs {(PAD_ID, BOS_ID, EOS_ID, UNK_ID)} (train it with Tokenizer.train)"
            )

    # -- building ---------------------------------------------------------------------

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        *,
        vocab_size: int = 8000,
        model_type: str = "bpe",
        character_coverage: float = 1.0,
        max_sentences: int | None = None,
        seed: int = 0,
        num_threads: int | None = None,
    ) -> Tokenizer:
        """Learn a subword vocabulary from sentences.

        For a joint vocabulary pass both sides of the *training* pairs, e.g.
        ``itertools.chain(corpus.sources, corpus.targets)``. Training is deterministic
        (same sentences in the same order and the same arguments give the same model, byte
        for byte) and prints nothing.

        Args:
            texts: sentences, one per item.
            vocab_size: total size including the 4 special pieces.
            model_type: ``"bpe"`` (as in the paper; fast) or ``"unigram"``.
            character_coverage: fraction of characters the vocabulary must cover; 1.0
                keeps every character seen (right for alphabetic languages), rarer ones
                become ``unk`` below it.
            max_sentences: train on a seeded random sample of this many sentences (for
                very large corpora); ``None`` uses all.
            seed: seeds that sample and unigram training.
            num_threads: trainer threads; default ``min(os.cpu_count(), 8)``.

        Raises:
            ValueError: bad ``vocab_size``/``model_type``, no sentences, or a vocabulary
                too large for the text (sentencepiece's limit is given).
        """
        if model_type not in MODEL_TYPES:
            raise ValueError(f"model_type={model_type!r}; use one of {', '.join(MODEL_TYPES)}")
        if not isinstance(vocab_size, int) or vocab_size <= UNK_ID + 1:
            raise ValueError(f"vocab_size={vocab_size!r} must be an int above {UNK_ID + 1} (4 ids are special)")
        if max_sentences is not None and max_sentences < 1:
            raise ValueError(f"max_sentences={max_sentences} must be positive or None")

        sentences = [text for text in texts if text]
        if not sentences:
            raise ValueError("cannot train a tokenizer on no sentences")

        spm.set_random_generator_seed(seed)
        model = io.BytesIO()
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(sentences),
                model_writer=model,
                vocab_size=vocab_size,
                model_type=model_type,
                character_coverage=character_coverage,
                pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID, unk_id=UNK_ID,
                input_sentence_size=max_sentences or 0,
                shuffle_input_sentence=max_sentences is not None,
                num_threads=num_threads or min(os.cpu_count() or 1, 8),
                minloglevel=2,  # errors only: training is otherwise very chatty
            )
        except RuntimeError as error:  # e.g. "Vocabulary size too high (5000). Please set it to a value <= 1234."
            raise ValueError(f"sentencepiece training failed for vocab_size={vocab_size}: {error}") from error
        return cls(model.getvalue())

    @classmethod
    def load(cls, path: str | os.PathLike) -> Tokenizer:
        """Load from a directory holding ``tokenizer.model`` (or from that file itself)."""
        path = Path(path)
        file = path / TOKENIZER_FILE if path.is_dir() else path
        if not file.is_file():
            raise FileNotFoundError(f"no tokenizer at {file} (expected a {TOKENIZER_FILE} saved by Tokenizer.save)")
        try:
            return cls(file.read_bytes())
        except RuntimeError as error:  # sentencepiece cannot parse the bytes
            raise ValueError(f"{file}: not a sentencepiece model ({error})") from None
        except ValueError as error:
            raise ValueError(f"{file}: {error}") from None

    def to_bytes(self) -> bytes:
        """The serialised sentencepiece model: what ``tokenizer.model`` holds."""
        return self._proto

    def files(self) -> dict[str, bytes]:
        """``{"tokenizer.model": bytes}``: the files :meth:`save` writes (a training run carries
        them in its checkpoints and model directory)."""
        return {TOKENIZER_FILE: self._proto}

    def save(self, directory: str | os.PathLike) -> Path:
        """Write ``directory/tokenizer.model`` (atomically: write, then rename) and return its path."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / TOKENIZER_FILE
        handle, temporary = tempfile.mkstemp(dir=directory, prefix=TOKENIZER_FILE, suffix=".part")
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(self._proto)
            os.chmod(temporary, 0o644)  # mkstemp creates it private
            os.replace(temporary, target)
        finally:
            Path(temporary).unlink(missing_ok=True)
        return target

    # -- using ------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """Number of ids, special ones included: ids are ``0 .. vocab_size - 1``."""
        return self._processor.get_piece_size()

    @property
    def pad_id(self) -> int:
        return PAD_ID

    @property
    def bos_id(self) -> int:
        return BOS_ID

    @property
    def eos_id(self) -> int:
        return EOS_ID

    @property
    def unk_id(self) -> int:
        return UNK_ID

    def encode(self, text: str) -> list[int]:
        """Subword ids of one sentence, without BOS/EOS."""
        return self._processor.encode(text)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode`` for many sentences at once (faster than a Python loop)."""
        return self._processor.encode(list(texts))

    def encode_pairs(self, pairs: Iterable[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
        """``(src_ids, tgt_ids)`` for each ``(source, target)`` sentence pair, e.g. a ``ParallelCorpus``."""
        pairs = list(pairs)
        sources = self.encode_batch([src for src, _ in pairs])
        targets = self.encode_batch([tgt for _, tgt in pairs])
        return list(zip(sources, targets))

    def decode(self, ids: Sequence[int]) -> str:
        """Detokenised text of ids (a list or a 1-D tensor).

        Decoding stops at the first EOS, and PAD/BOS are dropped, so a row of a padded
        generation output decodes directly. The unknown id decodes to `` ⁇ ``
        (sentencepiece's mark), so lost characters stay visible.
        """
        ids = [int(i) for i in ids]
        if EOS_ID in ids:
            ids = ids[: ids.index(EOS_ID)]
        for i in ids:
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"id {i} is outside the vocabulary (size {self.vocab_size})")
        return self._processor.decode([i for i in ids if i not in (PAD_ID, BOS_ID)])

    def decode_batch(self, batch: Iterable[Sequence[int]]) -> list[str]:
        """``decode`` for each row (a list of lists or a 2-D tensor)."""
        return [self.decode(row) for row in batch]

    def pieces(self, ids: Sequence[int]) -> list[str]:
        """The subword strings of ids (``▁`` marks a word start), e.g. to label attention plots."""
        return [self._processor.id_to_piece(int(i)) for i in ids]

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size})"
