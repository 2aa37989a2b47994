"""Labelled text files: TSV, CSV or JSON Lines, one example a row.

* ``.tsv`` / ``.csv``: a header row naming the columns ``text``, ``label`` and, for text
  pairs, ``text_pair`` (other columns are ignored; CSV follows RFC 4180 quoting, TSV has
  no quoting: a field is everything between tabs);
* ``.jsonl``: one JSON object a line with ``"text"``, ``"label"`` and optionally
  ``"text_pair"`` (strings; a number as label is read as its text).

Every row must have a non-empty text and label (and second text, when the file has that
column). The file is read line by line with a bound on a line's length
(:data:`MAX_LINE_BYTES`) and on its rows (:data:`MAX_ROWS`), invalid UTF-8 is named by
line, and a file with no rows is refused: every error is one line naming the flag, the
file and the line.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LabelledTexts", "read_labelled", "check_label_sets", "MAX_LINE_BYTES", "MAX_ROWS", "SUFFIXES"]

MAX_LINE_BYTES = 1 << 20  # 1 MiB: far beyond any text a BERT reads (512 tokens)
MAX_ROWS = 10_000_000
SUFFIXES = (".tsv", ".csv", ".jsonl")


@dataclass
class LabelledTexts:
    """Rows of a labelled file: ``texts``, ``pairs`` (second texts, or None for single
    texts), ``labels`` (strings), ``lines`` (each row's line number in the file)."""

    path: str
    texts: list[str]
    pairs: list[str] | None
    labels: list[str]
    lines: list[int]

    def __len__(self) -> int:
        return len(self.texts)

    def label_set(self) -> list[str]:
        """The labels that occur, sorted."""
        return sorted(set(self.labels))


def _lines(path: Path, where: str) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of a UTF-8 file, refusing a line over MAX_LINE_BYTES
    without reading it whole."""
    with open(path, "rb") as handle:
        number = 0
        while True:
            raw = handle.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            number += 1
            if len(raw) > MAX_LINE_BYTES:
                raise ValueError(f"{where}, line {number}: longer than {MAX_LINE_BYTES:,d} bytes; a row is one text "
                                 "(or pair) and its label")
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]  # a UTF-8 byte-order mark
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(f"{where}, line {number}: not valid UTF-8 (byte {raw[error.start]:#04x} at "
                                 f"column {error.start + 1})") from None


def read_labelled(path: str, *, flag: str = "--train") -> LabelledTexts:
    """Read a labelled file (module docstring); ValueError naming ``flag``, the file and the line."""
    file = Path(path)
    where = f"{flag} {path}"
    if not file.is_file():
        raise ValueError(f"{where}: no such file")
    suffix = file.suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"{where}: unknown format {suffix or '(no suffix)'!r}; give a .tsv, .csv or .jsonl file")
    rows = _json_rows(file, where) if suffix == ".jsonl" else _table_rows(file, where, suffix)
    texts, pairs, labels, lines, has_pairs = [], [], [], [], None
    for number, text, pair, label in rows:
        if len(texts) >= MAX_ROWS:
            raise ValueError(f"{where}: more than {MAX_ROWS:,d} rows")
        if has_pairs is None:
            has_pairs = pair is not None
        elif has_pairs != (pair is not None):
            raise ValueError(f"{where}, line {number}: {'no' if has_pairs else 'a'} text_pair, but the first row "
                             f"{'has' if has_pairs else 'has none'}; a file holds single texts or pairs, not both")
        for name, value in (("text", text), ("text_pair", pair), ("label", label)):
            if value is not None and not value.strip():
                raise ValueError(f"{where}, line {number}: empty {name}")
        texts.append(text)
        labels.append(label.strip())
        lines.append(number)
        if pair is not None:
            pairs.append(pair)
    if not texts:
        raise ValueError(f"{where}: no rows (only a header, or an empty file); each row is a text and its label")
    return LabelledTexts(str(path), texts, pairs if has_pairs else None, labels, lines)


def _table_rows(file: Path, where: str, suffix: str):
    numbered = _lines(file, where)
    line_of = {}

    def feed():  # csv reads lines; remember which file line each came from
        for number, text in numbered:
            line_of["last"] = number
            yield text

    dialect = {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if suffix == ".tsv" else {}
    reader = csv.reader(feed(), strict=True, **dialect)
    try:
        header = next(reader, None)
        if header is None:
            raise ValueError(f"{where}: empty file; the first line is a header naming the columns text and label "
                             "(and text_pair for pairs)")
        names = [name.strip().lower() for name in header]
        missing = [name for name in ("text", "label") if name not in names]
        if missing:
            raise ValueError(f"{where}, line 1: no {' and no '.join(repr(m) for m in missing)} column in the header "
                             f"({', '.join(repr(n) for n in header)}); the header names the columns text and label "
                             "(and text_pair for pairs)")
        text_at, label_at = names.index("text"), names.index("label")
        pair_at = names.index("text_pair") if "text_pair" in names else None
        for row in reader:
            number = line_of["last"]
            if not row or (len(row) == 1 and not row[0].strip()):
                continue  # a blank line
            if len(row) != len(header):
                raise ValueError(f"{where}, line {number}: {len(row)} field(s), but the header has {len(header)} "
                                 f"({', '.join(header)}); a missing column?")
            yield number, row[text_at], None if pair_at is None else row[pair_at], row[label_at]
    except csv.Error as error:
        raise ValueError(f"{where}, line {line_of.get('last', 1)}: {error}") from None


def _json_rows(file: Path, where: str):
    for number, line in _lines(file, where):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as error:
            raise ValueError(f"{where}, line {number}: not JSON ({error})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{where}, line {number}: not a JSON object with \"text\" and \"label\"")
        for name in ("text", "label"):
            if name not in row:
                raise ValueError(f"{where}, line {number}: no {name!r} field (the object has "
                                 f"{', '.join(map(repr, row)) or 'none'})")
        values = []
        for name in ("text", "text_pair", "label"):
            value = row.get(name)
            if name == "label" and isinstance(value, (int, float)) and not isinstance(value, bool):
                value = str(value)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{where}, line {number}: {name!r} is {type(value).__name__}, not a string")
            values.append(value)
        yield number, *values


def check_label_sets(train: LabelledTexts, valid: LabelledTexts | None, *, labels: list[str] | None = None) -> list[str]:
    """The label set a classifier is trained on: ``labels`` (a resumed run's) or the training
    file's, sorted. Refused: fewer than 2 labels, a label of the
    validation file the training file lacks, single texts against pairs."""
    found = train.label_set()
    if labels is None:
        labels = found
        if len(labels) < 2:
            raise ValueError(f"--train {train.path}: every row has the label {labels[0]!r}; a classifier needs at "
                             "least 2 labels")
    else:
        unknown = [label for label in found if label not in labels]
        if unknown:
            raise ValueError(f"--train {train.path}: label(s) {unknown[:5]} not in the run's label set; resuming on "
                             "other data")
    if valid is not None:
        known = set(labels)
        for label, number in zip(valid.labels, valid.lines):
            if label not in known:
                raise ValueError(f"--valid {valid.path}, line {number}: the label {label!r} does not occur in --train "
                                 f"{train.path}; a classifier only predicts the labels it was trained on")
        if (valid.pairs is None) != (train.pairs is None):
            raise ValueError(f"--valid {valid.path}: {'text pairs' if valid.pairs is not None else 'single texts'}, "
                             f"but --train {train.path} holds "
                             f"{'text pairs' if train.pairs is not None else 'single texts'}")
    return labels
