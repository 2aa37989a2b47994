"""Aligned parallel text: two files, one sentence a line, line i of one translating line i of the other.

Files may be plain or gzip-compressed (recognised by their first two bytes, not their
name) and must be UTF-8. Lines are split on ``\\n`` only, so a stray ``\\r`` or Unicode
line separator inside a sentence never shifts the alignment; surrounding whitespace
(including a ``\\r`` from CRLF files) is stripped.
"""

from __future__ import annotations

import gzip
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ParallelCorpus", "read_lines", "read_parallel"]

_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class ParallelCorpus:
    """Sentence pairs ``(source, target)`` plus how they were obtained.

    Behaves as a read-only sequence of pairs: ``len(corpus)``, ``corpus[i]``,
    ``for src, tgt in corpus``.

    Attributes:
        pairs: the aligned, non-empty ``(source, target)`` sentences, in file order.
        skipped_empty: how many line pairs were skipped because either side was empty.
        description: where the pairs came from (file names or data set and split).
    """

    pairs: list[tuple[str, str]]
    skipped_empty: int = 0
    description: str = field(default="", compare=False)

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> tuple[str, str]:
        return self.pairs[index]

    def __iter__(self):
        return iter(self.pairs)

    @property
    def sources(self) -> list[str]:
        """The source side, in order."""
        return [src for src, _ in self.pairs]

    @property
    def targets(self) -> list[str]:
        """The target side, in order."""
        return [tgt for _, tgt in self.pairs]


def read_lines(path: str | os.PathLike) -> list[str]:
    """Read a UTF-8 text file (plain or gzip) into its lines, stripped of surrounding whitespace.

    A final newline does not create an extra empty line. A UTF-8 byte-order mark at the
    start of the file is dropped.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: a line is not valid UTF-8 (the message gives the file and the 1-based
            line number), or the file is gzip-compressed but corrupt.
    """
    path = Path(path)
    with open(path, "rb") as raw:
        compressed = raw.read(2) == _GZIP_MAGIC
    try:
        if compressed:
            with gzip.open(path, "rb") as handle:
                data = handle.read()
        else:
            data = path.read_bytes()
    except (OSError, EOFError, zlib.error) as error:  # BadGzipFile (an OSError), EOFError, zlib.error
        raise ValueError(f"{path}: cannot decompress gzip file: {error}") from error

    if data.startswith(_UTF8_BOM):
        data = data[len(_UTF8_BOM) :]
    raw_lines = data.split(b"\n")
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()  # the newline ending the last line, or an empty file

    lines = []
    for number, raw_line in enumerate(raw_lines, start=1):
        try:
            lines.append(raw_line.decode("utf-8").strip())
        except UnicodeDecodeError as error:
            raise ValueError(
                f"{path}: line {number} is not valid UTF-8 "
                f"(byte 0x{raw_line[error.start]:02x} at column {error.start + 1})"
            ) from None
    return lines


def read_parallel(
    src_path: str | os.PathLike, tgt_path: str | os.PathLike
) -> ParallelCorpus:
    """Read two aligned files into sentence pairs.

    Line pairs where either side is empty (or only whitespace) are skipped and counted in
    ``ParallelCorpus.skipped_empty``; everything else is kept in order.

    Args:
        src_path: source-language file, one sentence a line (plain or ``.gz``, UTF-8).
        tgt_path: target-language file aligned line by line with ``src_path``.

    Returns:
        A ``ParallelCorpus`` of ``(source, target)`` pairs.

    Raises:
        ValueError: the files have different numbers of lines (both counts and both names
            are given), a line is not valid UTF-8 (file and line number), or no non-empty
            pair is left.
    """
    src_lines = read_lines(src_path)
    tgt_lines = read_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        raise ValueError(
            f"parallel files have different numbers of lines: {src_path} has "
            f"{len(src_lines)}, {tgt_path} has {len(tgt_lines)}"
        )
    pairs = [(src, tgt) for src, tgt in zip(src_lines, tgt_lines) if src and tgt]
    skipped = len(src_lines) - len(pairs)
    if not pairs:
        raise ValueError(
            f"empty parallel corpus: {src_path} and {tgt_path} have no line pair with "
            f"text on both sides ({len(src_lines)} lines, {skipped} skipped as empty)"
        )
    return ParallelCorpus(pairs, skipped, description=f"{src_path} + {tgt_path}")
