import gzip
import shutil

import pytest

from attnlab.data import download_multi30k, get_parallel_dataset, list_parallel_datasets

from .conftest import needs_trans_de_en


def test_lists_the_named_sets():
    assert list_parallel_datasets() == ["multi30k", "trans-de-en"]


def test_multi30k_from_attnlab_data(shared_data, monkeypatch):
    monkeypatch.setenv("ATTNLAB_DATA", str(shared_data))
    train = get_parallel_dataset("multi30k", "train", "de", "en")
    assert len(train) == 29_000 and train.skipped_empty == 0
    assert train[0] == (
        "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
        "Two young, White males are outside near many bushes.",
    )
    assert len(get_parallel_dataset("multi30k", "valid", "de", "en")) == 1014
    test = get_parallel_dataset("multi30k", "test", "en", "fr")
    assert len(test) == 1000
    assert test[0][0] == get_parallel_dataset("multi30k", "test", "en", "de")[0][0]


@pytest.mark.parametrize(
    "args, message",
    [
        (("wmt14", "train", "de", "en"), "unknown parallel data set 'wmt14'"),
        (("multi30k", "dev", "de", "en"), "unknown split 'dev'"),
        (("multi30k", "train", "de", "cs"), "tgt_lang='cs'"),
        (("multi30k", "train", "de", "de"), "both 'de'"),
        (("trans-de-en", "train", "fr", "en"), "src_lang='fr'"),
    ],
)
def test_bad_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        get_parallel_dataset(*args)


def test_missing_multi30k_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError) as error:  # French is not shipped inside attnlab
        get_parallel_dataset("multi30k", "train", "fr", "en")
    message = str(error.value)
    assert str(tmp_path / "multi30k") in message and "train.fr.gz" in message
    assert "ATTNLAB_DATA" in message
    assert "from attnlab.data import download_multi30k; download_multi30k()" in message


def test_data_dir_is_where_named_sets_live_for_one_call(tmp_path, monkeypatch):
    """``data_dir`` (a verb's --data-dir) stands in for $ATTNLAB_DATA during the call only."""
    from attnlab.data.registry import data_root

    monkeypatch.setenv("ATTNLAB_DATA", str(tmp_path / "elsewhere"))
    mine = tmp_path / "mine" / "multi30k"
    mine.mkdir(parents=True)
    for lang, text in (("de", "Ein Hund.\nZwei Katzen.\n"), ("fr", "Un chien.\nDeux chats.\n")):
        with gzip.open(mine / f"test_2016_flickr.{lang}.gz", "wt", encoding="utf-8") as handle:
            handle.write(text)
    corpus = get_parallel_dataset("multi30k", "test", "de", "fr", data_dir=tmp_path / "mine")
    assert corpus.pairs == [("Ein Hund.", "Un chien."), ("Zwei Katzen.", "Deux chats.")]
    assert data_root() == tmp_path / "elsewhere"  # restored after the call
    with pytest.raises(FileNotFoundError, match="--data-dir"):
        get_parallel_dataset("multi30k", "train", "de", "fr", data_dir=tmp_path / "mine")


def test_missing_trans_de_en_says_how_to_get_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"apt-get install -y trans-de-en"):
        get_parallel_dataset("trans-de-en", "train", "de", "en", root=tmp_path)


@needs_trans_de_en
def test_trans_de_en_both_directions():
    de_en = get_parallel_dataset("trans-de-en", "test", "de", "en")
    en_de = get_parallel_dataset("trans-de-en", "test", "en", "de")
    assert 500 < len(de_en) < 1500
    assert en_de.pairs == [(en, de) for de, en in de_en.pairs]


# -- download, against a file:// mirror of the official files ---------------------------

VALID_FILES = ["val.de.gz", "val.en.gz"]


@pytest.fixture
def mirror(tmp_path, multi30k_dir):
    directory = tmp_path / "mirror"
    directory.mkdir()
    for name in VALID_FILES:
        shutil.copy(multi30k_dir / name, directory / name)
    return directory


def download_valid(root, mirror):
    return download_multi30k(root, base_url=mirror.as_uri() + "/", languages=("de", "en"), splits=("valid",))


def test_download_verifies_and_loads(tmp_path, mirror, multi30k_dir):
    out = tmp_path / "out"
    assert download_valid(out, mirror) == out
    assert sorted(path.name for path in out.iterdir()) == VALID_FILES
    for name in VALID_FILES:
        assert (out / name).read_bytes() == (multi30k_dir / name).read_bytes()
    assert len(get_parallel_dataset("multi30k", "valid", "de", "en", root=out)) == 1014
    # Present and verified files are not fetched again: an empty mirror is fine now.
    shutil.rmtree(mirror)
    download_valid(out, mirror)


def test_download_checksum_mismatch_keeps_nothing(tmp_path, mirror):
    tampered = gzip.compress(b"Ein falscher Satz.\n" * 1014)
    (mirror / "val.en.gz").write_bytes(tampered)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"checksum mismatch for file://.*val\.en\.gz"):
        download_valid(out, mirror)
    assert sorted(path.name for path in out.iterdir()) == ["val.de.gz"]  # no val.en.gz, no .part


def test_download_refuses_to_overwrite_a_different_file(tmp_path, mirror):
    out = tmp_path / "out"
    out.mkdir()
    (out / "val.de.gz").write_bytes(b"my own file")
    with pytest.raises(ValueError, match="val.de.gz exists but its SHA-256"):
        download_valid(out, mirror)
    assert (out / "val.de.gz").read_bytes() == b"my own file"


def test_download_failure_is_an_oserror(tmp_path):
    with pytest.raises(OSError, match="could not download"):
        download_valid(tmp_path / "out", tmp_path / "no-mirror")
    assert list((tmp_path / "out").iterdir()) == []


def test_download_default_root_is_attnlab_data(tmp_path, mirror, monkeypatch):
    monkeypatch.setenv("ATTNLAB_DATA", str(tmp_path / "data"))
    download_valid(None, mirror)
    assert len(get_parallel_dataset("multi30k", "valid", "en", "de")) == 1014


def test_multi30k_german_english_ships_inside_attnlab(tmp_path, monkeypatch):
    """A fresh machine has no ../shared: the embedded copy serves de/en, byte-identical to the official files."""
    import hashlib

    from attnlab.data.registry import EMBEDDED_MULTI30K_DIR, MULTI30K_SHA256

    for path in sorted(EMBEDDED_MULTI30K_DIR.glob("*.gz")):
        assert hashlib.sha256(path.read_bytes()).hexdigest() == MULTI30K_SHA256[path.name], path.name
    assert len(list(EMBEDDED_MULTI30K_DIR.glob("*.gz"))) == 6
    assert (EMBEDDED_MULTI30K_DIR / "NOTICE.md").is_file()
    monkeypatch.setenv("ATTNLAB_DATA", str(tmp_path))  # holds no multi30k/
    test = get_parallel_dataset("multi30k", "test", "en", "de")
    assert len(test) == 1000 and test[0] == ("A man in an orange hat starring at something.",
                                            "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.")
    assert len(get_parallel_dataset("multi30k", "train", "de", "en")) == 29_000
    with pytest.raises(FileNotFoundError, match="ships only the de and en files"):
        get_parallel_dataset("multi30k", "test", "fr", "en")
