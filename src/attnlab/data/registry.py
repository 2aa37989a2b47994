"""Named parallel data sets: ``get_parallel_dataset("multi30k", "train", "de", "en")``.

Each data set is a small loader function registered under a name. Every loader takes
the same arguments and returns a ``ParallelCorpus``; when the data is missing, the error
says exactly how to get it.

=============  ===============================================  =======================
name           where it is read from (``root`` overrides)        splits (pairs)
=============  ===============================================  =======================
multi30k       ``$ATTNLAB_DATA/multi30k`` (task 1, raw files),   train 29,000 / valid
               else the German and English copy shipped          1,014 / test 1,000
               inside attnlab (``attnlab/data/multi30k``)        (test_2016_flickr);
                                                                 languages en, de, fr
                                                                 (fr: download)
trans-de-en    ``/usr/share/trans/de-en`` (Debian package)       train 15,119 / valid 826
                                                                 / test 829; de, en
=============  ===============================================  =======================
"""

from __future__ import annotations

import hashlib
import contextlib
import contextvars
import os
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from attnlab.files import sha256_file
from attnlab.data.parallel import ParallelCorpus, read_parallel
from attnlab.data.trans_de_en import DEFAULT_TRANS_DE_EN_PATH, load_trans_de_en

__all__ = [
    "EMBEDDED_MULTI30K_DIR",
    "MULTI30K_URL",
    "data_root",
    "download_multi30k",
    "get_parallel_dataset",
    "list_parallel_datasets",
    "register_parallel_dataset",
]

SPLITS = ("train", "valid", "test")

Loader = Callable[[str, str, str, "str | os.PathLike | None"], ParallelCorpus]
_LOADERS: dict[str, Loader] = {}


def register_parallel_dataset(name: str) -> Callable[[Loader], Loader]:
    """Register ``loader(split, src_lang, tgt_lang, root) -> ParallelCorpus`` under ``name``."""

    def decorator(loader: Loader) -> Loader:
        if name in _LOADERS:
            raise ValueError(f"parallel data set {name!r} is already registered")
        _LOADERS[name] = loader
        return loader

    return decorator


def list_parallel_datasets() -> list[str]:
    """Names accepted by ``get_parallel_dataset``."""
    return sorted(_LOADERS)


def get_parallel_dataset(
    name: str,
    split: str,
    src_lang: str,
    tgt_lang: str,
    root: str | os.PathLike | None = None,
    *,
    data_dir: str | os.PathLike | None = None,
) -> ParallelCorpus:
    """Load one split of a named parallel data set as ``(source, target)`` pairs.

    Args:
        name: one of ``list_parallel_datasets()`` (``multi30k``, ``trans-de-en``).
        split: ``train``, ``valid`` or ``test``.
        src_lang, tgt_lang: language codes, e.g. ``de`` and ``en``; either direction.
        root: where the data set lives, overriding its default (see the module table):
            the ``multi30k`` directory itself, or the ``de-en`` file (or its directory).
        data_dir: where named data sets live (``DATA_DIR/multi30k``), in place of
            ``$ATTNLAB_DATA`` (a verb's ``--data-dir``); ``root`` wins over it.

    Raises:
        ValueError: unknown name, split or language.
        FileNotFoundError: the data is not there; the message says how to get it.
    """
    if name not in _LOADERS:
        raise ValueError(
            f"unknown parallel data set {name!r}; known: {', '.join(list_parallel_datasets())}"
        )
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r} for {name}; use one of {', '.join(SPLITS)}")
    with data_dir_override(data_dir):
        return _LOADERS[name](split, src_lang, tgt_lang, root)


def _check_languages(name: str, src_lang: str, tgt_lang: str, known: Sequence[str]) -> None:
    for argument, lang in (("src_lang", src_lang), ("tgt_lang", tgt_lang)):
        if lang not in known:
            raise ValueError(f"{name} has no language {argument}={lang!r}; it has {', '.join(known)}")
    if src_lang == tgt_lang:
        raise ValueError(f"src_lang and tgt_lang are both {src_lang!r}; choose two languages")


_DATA_DIR: contextvars.ContextVar[Path | None] = contextvars.ContextVar("attnlab_data_dir", default=None)


@contextlib.contextmanager
def data_dir_override(directory: str | os.PathLike | None):
    """Within the block, :func:`data_root` is ``directory`` (a verb's ``--data-dir``); None
    changes nothing."""
    if directory is None:
        yield
        return
    token = _DATA_DIR.set(Path(directory))
    try:
        yield
    finally:
        _DATA_DIR.reset(token)


def data_root() -> Path:
    """The directory holding named data sets: a verb's ``--data-dir`` (:func:`data_dir_override`),
    else ``$ATTNLAB_DATA``, else ``~/.cache/attnlab/data``."""
    override = _DATA_DIR.get()
    if override is not None:
        return override
    configured = os.environ.get("ATTNLAB_DATA")
    return Path(configured) if configured else Path.home() / ".cache" / "attnlab" / "data"


# ---------------------------------------------------------------------------------------
# Multi30k (Elliott et al. 2016), task 1, raw (untokenised, cased) files.

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
MULTI30K_LANGUAGES = ("en", "de", "fr")
_MULTI30K_FILE_STEMS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}

# SHA-256 of the official files, computed from the copies this project tests with (their
# gzip headers carry the repository's December 2017 names and times).
MULTI30K_SHA256 = {
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
}


# The German and English text of train, val and test_2016_flickr ships inside the package
# (1.3 MB gzipped, the official files byte for byte: their SHA-256 are checked above), so a
# fresh offline machine can train and score the translation quickstart. Citation and terms
# of use: attnlab/data/multi30k/NOTICE.md.
EMBEDDED_MULTI30K_DIR = Path(__file__).resolve().parent / "multi30k"
EMBEDDED_MULTI30K_LANGUAGES = ("de", "en")


def _multi30k_dir(root: str | os.PathLike | None) -> Path:
    return Path(root) if root is not None else data_root() / "multi30k"


def _multi30k_source(root: str | os.PathLike | None, split: str, langs: Sequence[str]) -> Path:
    """Where to read ``langs`` of ``split``: ``root`` if given; else ``$ATTNLAB_DATA/multi30k``
    when it holds the files, else the embedded German-English copy."""
    directory = _multi30k_dir(root)
    if root is not None or all((directory / _multi30k_file(split, lang)).is_file() for lang in langs):
        return directory
    if all(lang in EMBEDDED_MULTI30K_LANGUAGES for lang in langs):
        return EMBEDDED_MULTI30K_DIR
    return directory


def _multi30k_file(split: str, lang: str) -> str:
    return f"{_MULTI30K_FILE_STEMS[split]}.{lang}.gz"


@register_parallel_dataset("multi30k")
def _load_multi30k(split, src_lang, tgt_lang, root) -> ParallelCorpus:
    _check_languages("multi30k", src_lang, tgt_lang, MULTI30K_LANGUAGES)
    directory = _multi30k_source(root, split, (src_lang, tgt_lang))
    paths = [directory / _multi30k_file(split, lang) for lang in (src_lang, tgt_lang)]
    missing = [path.name for path in paths if not path.is_file()]
    if missing:
        download_call = "download_multi30k()" if root is None else f"download_multi30k({str(root)!r})"
        raise FileNotFoundError(
            f"Multi30k not found: {directory} has no {' or '.join(missing)} (attnlab ships only "
            f"the {' and '.join(EMBEDDED_MULTI30K_LANGUAGES)} files). Either set "
            "ATTNLAB_DATA (or --data-dir) to a directory that contains multi30k/ (or pass root=<the multi30k "
            "directory>), or, with internet access, download the official files with "
            f"`python -c \"from attnlab.data import download_multi30k; {download_call}\"` "
            f"(from {MULTI30K_URL}, checked against SHA-256 checksums)."
        )
    corpus = read_parallel(*paths)
    return ParallelCorpus(
        corpus.pairs, corpus.skipped_empty, description=f"multi30k {split} {src_lang}-{tgt_lang}"
    )


def download_multi30k(
    root: str | os.PathLike | None = None,
    *,
    base_url: str = MULTI30K_URL,
    languages: Sequence[str] = MULTI30K_LANGUAGES,
    splits: Sequence[str] = SPLITS,
) -> Path:
    """Download the Multi30k task-1 raw files and verify their SHA-256 checksums.

    Each file is written to a temporary file in the target directory, checked, and only
    then renamed into place, so an interrupted or corrupt download never leaves a file
    that looks complete. Files already present with the right checksum are not fetched
    again.

    Args:
        root: directory to write ``{train,val,test_2016_flickr}.{lang}.gz`` into; default
            ``$ATTNLAB_DATA/multi30k`` (the directory ``get_parallel_dataset`` reads).
        base_url: where the files are fetched from (any URL ``urllib`` opens, including
            ``file://`` for a local mirror); ends with ``/``.
        languages: which of ``en``, ``de``, ``fr``.
        splits: which of ``train``, ``valid``, ``test``.

    Returns:
        The directory holding the files.

    Raises:
        ValueError: a downloaded file does not match its checksum (it is not kept), or a
            file already in ``root`` has a different checksum (it is left alone), or an
            unknown language or split.
        OSError: the download failed.
    """
    for lang in languages:
        if lang not in MULTI30K_LANGUAGES:
            raise ValueError(f"multi30k has no language {lang!r}; it has {', '.join(MULTI30K_LANGUAGES)}")
    for split in splits:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    directory = _multi30k_dir(root)
    directory.mkdir(parents=True, exist_ok=True)

    for split in splits:
        for lang in languages:
            name = _multi30k_file(split, lang)
            expected = MULTI30K_SHA256[name]
            target = directory / name
            if target.exists():
                actual = sha256_file(target)
                if actual != expected:
                    raise ValueError(
                        f"{target} exists but its SHA-256 is {actual}, expected {expected}; "
                        "delete it to download it again"
                    )
                continue
            _download_verified(base_url + name, target, expected)
    return directory


def _download_verified(url: str, target: Path, expected_sha256: str) -> None:
    handle, temporary_name = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".part")
    temporary = Path(temporary_name)
    try:
        digest = hashlib.sha256()
        with os.fdopen(handle, "wb") as out:
            try:
                with urllib.request.urlopen(url, timeout=60) as response:
                    for block in iter(lambda: response.read(1 << 20), b""):
                        digest.update(block)
                        out.write(block)
            except (urllib.error.URLError, TimeoutError) as error:
                raise OSError(f"could not download {url}: {error}") from error
        actual = digest.hexdigest()
        if actual != expected_sha256:
            raise ValueError(
                f"checksum mismatch for {url}: SHA-256 {actual}, expected {expected_sha256}; "
                f"the file was not saved to {target}. If the upstream file has changed, "
                "check https://github.com/multi30k/dataset and download it by hand."
            )
        os.chmod(temporary, 0o644)  # mkstemp creates it private
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------
# German–English example sentences from Debian's trans-de-en dictionary.


@register_parallel_dataset("trans-de-en")
def _load_trans_de_en(split, src_lang, tgt_lang, root) -> ParallelCorpus:
    _check_languages("trans-de-en", src_lang, tgt_lang, ("de", "en"))
    pairs = load_trans_de_en(root if root is not None else DEFAULT_TRANS_DE_EN_PATH)[split]
    if src_lang == "en":
        pairs = [(english, german) for german, english in pairs]
    return ParallelCorpus(pairs, 0, description=f"trans-de-en {split} {src_lang}-{tgt_lang}")
