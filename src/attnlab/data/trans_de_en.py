"""German–English example sentences from Debian's ``trans-de-en`` dictionary.

The package (``apt-get install -y trans-de-en``) installs Frank Richter's dictionary
(dict.tu-chemnitz.de, GPL-2+) as ``/usr/share/trans/de-en``. Each entry is one line::

    heimwärts {adv} | heimwärts steuern | Er ging heimwärts. :: homeward; homewards | to head homewards | He struck for home.

The ``::`` separates German from English; ``|`` separates alternatives that align by
position across the ``::``; ``;`` separates synonyms within one alternative. Most
alternatives are headwords and phrases; some are real example sentences, which is
what this module extracts.

How a sentence pair is extracted from an aligned alternative (both sides alike):

1. Alternatives carrying grammar tags ``{...}`` are headword entries: skipped.
2. Of several sentence variants (``Es wird dunkel.; Es wird finster.``) the first is kept.
3. Trailing notes and labels are dropped: ``(Sicherheitshinweis)``, ``[Br.]``.
4. Inline usage labels ``[ugs.]``, ``[Am.]`` are dropped; inline optional words in
   parentheses are kept without the parentheses (``Is he the man (that) you saw?`` →
   ``Is he the man that you saw?``).
5. The pair is kept only if both sides end in ``.``, ``!`` or ``?`` (a closing quote may
   follow), both start like a sentence (capital letter, digit or opening quote), the
   German side has at least 4 words, and neither side holds a placeholder (``etw.``,
   ``jdm.``, ``sth.``, ``sb.`` ...: these are phrase patterns, not sentences), an
   ellipsis (templates such as ``Wie sagt man …?``) or a slash between words
   (``lagging/trailing``, ``a flat / an accident``: alternatives whose scope cannot be
   resolved reliably, so such pairs are dropped rather than guessed).
6. Exact duplicate pairs are kept once, in file order.

On the dictionary version of 2023-01-30 (Debian package 1.9-6) this gives 16,774
pairs. ``split_pairs`` assigns them to train/valid/test by a hash, see there.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "DEFAULT_TRANS_DE_EN_PATH",
    "clean_example",
    "extract_example_pairs",
    "load_trans_de_en",
    "split_pairs",
]

DEFAULT_TRANS_DE_EN_PATH = Path("/usr/share/trans/de-en")

VALID_FRACTION = 0.05
TEST_FRACTION = 0.05

_SENTENCE_END = r"[.!?][\"“”‘’»«']*"
_ENDS_LIKE_SENTENCE = re.compile(_SENTENCE_END + r"$")
_NOTE = r"(?:\([^()]*\)|\[[^\[\]]*\])"
# A ';' after a finished sentence (perhaps followed by a note) starts another variant.
_NEXT_VARIANT = re.compile(r"(?<=[.!?\"“”‘’»«'])\s*(?:" + _NOTE + r"\s*)*;\s")
_TRAILING_NOTE = re.compile(r"\s*" + _NOTE + r"\s*$")
_INLINE_LABEL = re.compile(r"\s*\[[^\[\]]*\]")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([.,!?;:])")
_STARTS_GERMAN = re.compile(r"[0-9A-ZÄÖÜ„“\"‚‘'»«]")
_STARTS_ENGLISH = re.compile(r"[0-9A-Z“\"‘'»«]")
_PLACEHOLDER = re.compile(r"(?<!\w)(?:etw|jd[mnrs]|sth|sb)\.|(?<!\w)(?:sb[’']s|jds)(?!\w)")
_HAS_END = re.compile(r"[.!?]")
_WORD_SLASH = re.compile(r"(?<![0-9])/|/(?![0-9])")  # any slash except digit/digit (24/7)


def clean_example(text: str) -> str:
    """Steps 2–4 above on one side of an alternative: the plain sentence it holds."""
    match = _NEXT_VARIANT.search(text)
    if match:
        text = text[: match.start()]
    text = text.strip()
    while True:
        stripped = _TRAILING_NOTE.sub("", text)
        if stripped == text:
            break
        text = stripped
    text = _INLINE_LABEL.sub("", text)
    text = text.replace("(", "").replace(")", "")
    text = " ".join(text.split())
    return _SPACE_BEFORE_PUNCT.sub(r"\1", text)


def _is_sentence(text: str, starts: re.Pattern) -> bool:
    return bool(
        _ENDS_LIKE_SENTENCE.search(text)
        and starts.match(text)
        and not _PLACEHOLDER.search(text)
        and "…" not in text
        and not _WORD_SLASH.search(text)
    )


def extract_example_pairs(lines: Iterable[str]) -> list[tuple[str, str]]:
    """Extract ``(german, english)`` example sentence pairs from dictionary lines.

    Args:
        lines: the lines of a ``de-en`` file (``#`` lines are headers and are ignored).

    Returns:
        Unique pairs in the order they first appear (see the module docstring for the rules).
    """
    pairs: dict[tuple[str, str], None] = {}  # an ordered set
    for line in lines:
        if line.startswith("#"):
            continue
        sides = line.rstrip("\n").split(" :: ")
        if len(sides) != 2:
            continue
        german_alternatives = sides[0].split(" | ")
        english_alternatives = sides[1].split(" | ")
        if len(german_alternatives) != len(english_alternatives):
            continue  # misaligned entry: nothing can be paired safely
        for german_raw, english_raw in zip(german_alternatives, english_alternatives):
            if "{" in german_raw or "{" in english_raw:
                continue
            if not (_HAS_END.search(german_raw) and _HAS_END.search(english_raw)):
                continue  # cheap early exit: most alternatives are headwords
            german = clean_example(german_raw)
            english = clean_example(english_raw)
            if (
                len(german.split()) >= 4
                and _is_sentence(german, _STARTS_GERMAN)
                and _is_sentence(english, _STARTS_ENGLISH)
            ):
                pairs[(german, english)] = None
    return list(pairs)


def split_pairs(
    pairs: list[tuple[str, str]],
    valid_fraction: float = VALID_FRACTION,
    test_fraction: float = TEST_FRACTION,
) -> dict[str, list[tuple[str, str]]]:
    """Deterministically split pairs into ``train``, ``valid`` and ``test``.

    Pairs that share a German or an English sentence (one sentence, several
    translations) form a group, and a whole group goes to one split, so no held-out
    sentence is seen in training. A group's split is decided by the SHA-256 of its
    first German sentence (in sorted order): the same sentence lands in the same split
    on every machine and Python version, and mostly even across dictionary versions.
    Each split keeps file order.
    """
    if not (0 <= valid_fraction and 0 <= test_fraction and valid_fraction + test_fraction < 1):
        raise ValueError(
            f"valid_fraction={valid_fraction} and test_fraction={test_fraction} must be "
            "non-negative and sum to less than 1"
        )
    parent: dict[tuple[str, str], tuple[str, str]] = {}

    def find(node):
        parent.setdefault(node, node)
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for german, english in pairs:
        root_de, root_en = find(("de", german)), find(("en", english))
        if root_de != root_en:
            parent[root_en] = root_de

    group_key: dict[tuple[str, str], str] = {}
    for german, _ in pairs:
        root = find(("de", german))
        group_key[root] = min(group_key.get(root, german), german)

    splits: dict[str, list[tuple[str, str]]] = {"train": [], "valid": [], "test": []}
    for german, english in pairs:
        digest = hashlib.sha256(group_key[find(("de", german))].encode("utf-8")).digest()
        position = int.from_bytes(digest[:8], "big") / 2**64  # uniform in [0, 1)
        if position < test_fraction:
            splits["test"].append((german, english))
        elif position < test_fraction + valid_fraction:
            splits["valid"].append((german, english))
        else:
            splits["train"].append((german, english))
    return splits


def load_trans_de_en(path: str | os.PathLike | None = None) -> dict[str, list[tuple[str, str]]]:
    """Parse the dictionary file and split its example sentences.

    Args:
        path: the ``de-en`` file, or a directory holding it; default
            ``/usr/share/trans/de-en``.

    Returns:
        ``{"train": [...], "valid": [...], "test": [...]}`` of ``(german, english)`` pairs.
        On the 2023-01-30 dictionary (Debian 1.9-6): 15,119 / 826 / 829 pairs.

    Raises:
        FileNotFoundError: the file is missing; the message says how to install it.
    """
    path = Path(path) if path is not None else DEFAULT_TRANS_DE_EN_PATH
    if path.is_dir():
        path = path / "de-en"
    if not path.is_file():
        raise FileNotFoundError(
            f"trans-de-en not found: {path} does not exist. Install it with "
            "`sudo apt-get install -y trans-de-en` (Debian/Ubuntu; it puts the file at "
            f"{DEFAULT_TRANS_DE_EN_PATH}), or pass the path of a copy of the de-en file."
        )
    stat = path.stat()
    splits = _load_cached(str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    return {name: list(pairs) for name, pairs in splits.items()}


@functools.lru_cache(maxsize=2)
def _load_cached(path: str, mtime_ns: int, size: int) -> dict[str, tuple[tuple[str, str], ...]]:
    # Parsing takes about a second; callers usually ask for several splits in a row.
    # mtime and size are part of the key so that an edited file is parsed again.
    with open(path, encoding="utf-8", newline="\n") as handle:
        pairs = extract_example_pairs(handle)
    return {name: tuple(split) for name, split in split_pairs(pairs).items()}
