"""How attnlab writes files: atomically, under a lock, never through a symlink, recoverably.

Every writer in attnlab goes through this module (docs/files.md says what it promises):

* :func:`atomic_write` / :func:`atomic_write_bytes`: a file is written under a hidden
  temporary name in its directory, fsynced and renamed over the real name, so a reader
  sees the old or the new file, never half of one. ``rename`` replaces a symlink
  itself, so a write never goes through a link to somewhere else.
* :func:`atomic_directory`: a directory (a checkpoint, ``OUT/model``) is written as the
  hidden sibling ``.NAME.tmp-PID``; replacing an existing ``NAME`` moves it to
  ``.NAME.old-PID``, renames the new one in, then deletes the old one. A kill between
  those steps is repaired by :func:`recover_directory` (the next run, or the next
  load, finishes the swap when the new directory is complete, or rolls it back).
* :class:`OutputLock`: one writer per output directory. ``OUT/.attnlab.lock`` holds an
  exclusive ``flock`` for as long as the run lives, and the holder's PID and host for
  the message a second writer gets; the kernel drops the lock when its holder dies, so
  a lock left by a killed run is stale and simply taken over.
* :func:`refuse_symlinks`: the names a run writes inside its output directory must not
  be symlinks (a run would otherwise write through them into the link's target).
* :func:`check_output_file` / :func:`check_output_directory`: the one rule for a verb's
  outputs, checked before any work: an existing file, link or non-empty directory that
  the verb did not write is refused unless ``--force`` says so (and then it is replaced
  atomically, a link itself rather than its target).
"""

from __future__ import annotations

import contextlib
import hashlib
import errno
import json
import os
import re
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "DiskFull",
    "LOCK_FILE",
    "OutputLock",
    "atomic_directory",
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_json",
    "check_recorded_files",
    "check_output_directory",
    "check_output_file",
    "read_data_record",
    "read_json_object",
    "check_output_files",
    "default_file_mode",
    "disk_full",
    "is_disk_full",
    "fsync_path",
    "json_safe",
    "make_parents",
    "needs_space",
    "pid_alive",
    "recover_directory",
    "refuse_replacing_inputs",
    "refuse_symlinks",
    "remove_made",
    "remove_stale_temporaries",
    "sha256_file",
    "strict_json_bytes",
    "tensors_size",
]

LOCK_FILE = ".attnlab.lock"
_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old)-(?P<pid>\d+)$")


def default_file_mode() -> int:
    """The mode a new file gets under the current umask (0o644 under the usual 022)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def fsync_path(path: str | os.PathLike) -> None:
    """fsync a file or a directory (a rename is durable only once its directory is synced)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


# --------------------------------------------------------------------------- #
# Files
# --------------------------------------------------------------------------- #
def make_parents(path: str | os.PathLike) -> list[Path]:
    """Create the missing directories above ``path`` (the one rule for output parents,
    docs/files.md: a missing directory on an output's path is made when the output is
    written); returns those it made, outermost first, for :func:`remove_made` to undo."""
    made = []
    parent = Path(path).parent
    while not parent.exists() and parent != parent.parent:
        made.append(parent)
        parent = parent.parent
    made.reverse()
    for directory in made:
        directory.mkdir(exist_ok=True)
    return made


def remove_made(directories: list[Path]) -> None:
    """Remove the directories :func:`make_parents` made, innermost first, where they are
    still empty: a failed write leaves no trace."""
    for directory in reversed(directories):
        with contextlib.suppress(OSError):
            directory.rmdir()


# --------------------------------------------------------------------------- #
# A full disk
# --------------------------------------------------------------------------- #
class DiskFull(OSError):
    """A write that found no space left: ``filename`` is the file it could not write, and
    the message says how much space it needed and how much was free (one line for the CLI,
    cli/errors.py). Raised by the shared writers in place of the writing library's own
    error (``OSError(ENOSPC)``, safetensors' ``SafetensorError ... (os error 28)``).
    ``needed`` / ``written``: the bytes it needed (None: unknown), and had written."""

    needed: int | None = None
    written: int | None = None


_FULL = re.compile(r"No space left on device|Disk quota exceeded|os error 28\b|code: 28\b|StorageFull")


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error`` (or what it wraps) says the device or quota is full."""
    while error is not None:
        if isinstance(error, DiskFull):
            return True
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if _FULL.search(str(error)):  # a library's own wording (safetensors: "... (os error 28)", StorageFull)
            return True
        error = error.__cause__ or error.__context__
    return False


def _size(count: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:,.1f} {unit}"
    return f"{count:,d} bytes"


def disk_full(path: str | os.PathLike, *, needed: int | None = None, written: int | None = None) -> DiskFull:
    """The :class:`DiskFull` for ``path``: ``needed`` bytes when the writer knows its size,
    else at least ``written`` (what it had written when the space ran out)."""
    path = Path(path)
    where = path.parent
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        free = f"{_size(shutil.disk_usage(where).free)} free in {where}"
    except OSError:
        free = f"the free space in {where} unknown"
    if needed is not None:
        need = f"it needs {_size(needed)}"
    elif written:
        need = f"it needs more than the {_size(written)} written when the space ran out"
    else:
        need = "it needs more than is free"
    error = DiskFull(errno.ENOSPC, f"could not be written: no space left on the device ({need}; {free}); free "
                                   "some space or choose another output directory", str(path))
    error.needed, error.written = needed, written
    return error


def tensors_size(tensors: dict) -> int:
    """Bytes of the distinct tensor data in ``tensors`` (what a safetensors file of them
    needs, less its small JSON header)."""
    seen, total = set(), 0
    for tensor in tensors.values():
        key = (tensor.data_ptr(), tensor.nbytes)
        if key not in seen:
            seen.add(key)
            total += tensor.nbytes
    return total


@contextlib.contextmanager
def needs_space(path: str | os.PathLike, needed: int | None) -> Iterator[None]:
    """Around a write of ``path`` that needs ``needed`` bytes (a safetensors file inside an
    :func:`atomic_directory`): a full disk becomes the :class:`DiskFull` that says so."""
    try:
        yield
    except Exception as error:
        if is_disk_full(error) and not isinstance(error, DiskFull):
            raise disk_full(path, needed=needed, written=_file_size(path)) from None
        raise


def atomic_write(target: str | os.PathLike, write: Callable[[str], Any], *, size: int | None = None) -> Path:
    """Call ``write(temporary_path)``, fsync it and rename it over ``target``; missing
    directories above ``target`` are made (and removed again if the write fails). A full
    disk is a :class:`DiskFull` naming ``target`` and ``size`` (the bytes it needs, when
    the caller knows them; else at least what was written); nothing is left behind."""
    target = Path(target)
    made = make_parents(target)
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except BaseException as error:
        remove_made(made)
        if is_disk_full(error) and not isinstance(error, DiskFull):
            raise disk_full(target, needed=size) from None
        raise
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, default_file_mode())  # mkstemp makes the file private; give it the usual mode
        os.replace(tmp, target)
    except BaseException as error:
        written = _file_size(tmp)
        Path(tmp).unlink(missing_ok=True)
        remove_made(made)
        if is_disk_full(error) and not isinstance(error, DiskFull):
            raise disk_full(target, needed=size, written=written) from None
        raise
    return target


def _file_size(path: str | os.PathLike) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def atomic_write_bytes(target: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``target`` atomically (see :func:`atomic_write`)."""
    return atomic_write(target, lambda path: Path(path).write_bytes(data), size=len(data))


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float replaced by ``None``, so that strict JSON
    parsers (which reject ``NaN``/``Infinity``) read what we write."""
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def strict_json_bytes(data: Any, *, indent: int | None = 1) -> bytes:
    """``data`` as strict JSON (non-finite numbers refused), UTF-8: what :func:`atomic_write_json` writes."""
    return (json.dumps(data, indent=indent, allow_nan=False) + "\n").encode("utf-8")


def atomic_write_json(target: str | os.PathLike, data: Any, *, indent: int | None = 1) -> Path:
    """Write ``data`` as strict JSON (non-finite numbers refused) atomically."""
    return atomic_write_bytes(target, strict_json_bytes(data, indent=indent))


# --------------------------------------------------------------------------- #
# Directories
# --------------------------------------------------------------------------- #
def _sibling(final: Path, kind: str, pid: int | None = None) -> Path:
    return final.parent / f".{final.name}.{kind}-{os.getpid() if pid is None else pid}"


def _leftovers(final: Path) -> list[tuple[str, int, Path]]:
    """``(kind, pid, path)`` of the swap leftovers of ``final`` (``.NAME.tmp-PID``, ``.NAME.old-PID``)."""
    found = []
    if not final.parent.is_dir():
        return found
    for child in final.parent.iterdir():
        match = _TEMPORARY.match(child.name)
        if match and match.group("name") == final.name and child.is_dir() and not child.is_symlink():
            found.append((match.group("kind"), int(match.group("pid")), child))
    return sorted(found, key=lambda item: (item[1], item[0]))


def recover_directory(final: str | os.PathLike) -> list[str]:
    """Repair what a killed :func:`atomic_directory` left around ``final``; return what was done.

    Only leftovers of dead processes are touched. For each dead writer:

    * ``.NAME.old-PID`` exists and ``NAME`` is missing: the kill came between the two
      renames. The new directory ``.NAME.tmp-PID`` was complete (it is fsynced before the
      old one is moved aside), so the swap is finished; without it, the old one is put back.
    * ``.NAME.old-PID`` and ``NAME`` both exist: the swap was done, only the clean-up was
      not; the old directory is deleted.
    * ``.NAME.tmp-PID`` alone: an unfinished write; it is deleted (``NAME``, if any, is intact).
    """
    final = Path(final)
    done: list[str] = []
    by_pid: dict[int, dict[str, Path]] = {}
    for kind, pid, path in _leftovers(final):
        if pid != os.getpid() and not pid_alive(pid):
            by_pid.setdefault(pid, {})[kind] = path
    for pid, paths in by_pid.items():
        old, new = paths.get("old"), paths.get("tmp")
        if old is not None and not final.exists():
            if new is not None:
                os.replace(new, final)
                done.append(f"{final}: finished an interrupted replacement (moved in {new.name} of dead process {pid})")
                new = None
            else:
                os.replace(old, final)
                done.append(f"{final}: rolled back an interrupted replacement (restored {old.name})")
                old = None
        if old is not None:
            shutil.rmtree(old)
            done.append(f"{final}: removed {old.name}, the previous version left by dead process {pid}")
        if new is not None:
            shutil.rmtree(new)
            done.append(f"{final}: removed {new.name}, an unfinished write of dead process {pid}")
    if done:
        fsync_path(final.parent)
    return done


def sha256_file(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes (hex), read in 1 MiB blocks: the one checksum of data
    sets, downloads, compiled packages and --init's weights."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def remove_stale_temporaries(directory: str | os.PathLike, pattern: str) -> list[Path]:
    """Delete ``directory``'s entries matching ``pattern`` (a glob ending in ``-PID``)
    whose writer process is dead; a live writer's temporaries are left alone."""
    removed = []
    directory = Path(directory)
    if not directory.is_dir():
        return removed
    for path in directory.glob(pattern):
        pid = path.name.rpartition("-")[2]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)) and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


@contextlib.contextmanager
def atomic_directory(final: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory that becomes ``final`` only if the block succeeds.

    An existing ``final`` is replaced as a whole (callers check first that it holds
    nothing they did not write). The swap is recoverable, see :func:`recover_directory`.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    for message in recover_directory(final):
        print(f"attnlab: {message}", file=sys.stderr, flush=True)
    if final.is_symlink():
        raise ValueError(f"{final}: is a symlink; attnlab does not write through symlinks")
    temporary = _sibling(final, "tmp")
    if temporary.exists():
        shutil.rmtree(temporary)
    try:
        temporary.mkdir()
    except OSError as error:
        if is_disk_full(error):
            raise disk_full(final) from None
        raise
    try:
        yield temporary
        mode = default_file_mode()
        for file in temporary.iterdir():
            os.chmod(file, mode)  # safetensors writes its files private (0600)
            fsync_path(file)
        fsync_path(temporary)
        if final.exists():
            # rename() cannot replace a non-empty directory: move the old one aside first.
            previous = _sibling(final, "old")
            os.replace(final, previous)
            os.replace(temporary, final)
            fsync_path(final.parent)
            shutil.rmtree(previous)
        else:
            os.replace(temporary, final)
        fsync_path(final.parent)
    except BaseException as error:
        full = _disk_full_in(error, temporary, final) if is_disk_full(error) else None
        shutil.rmtree(temporary, ignore_errors=True)
        if full is not None:  # said once the temporary is gone, so the free space is what is really free
            raise disk_full(full[0], needed=full[1], written=full[2]) from None
        raise


def _disk_full_in(error: BaseException, temporary: Path, final: Path) -> tuple[Path, int | None, int | None]:
    """``(file, needed, written)`` of a directory write that filled the disk, the file
    under its final name: the one the error names, else the newest in ``temporary``."""
    named = Path(error.filename) if isinstance(error, DiskFull) and error.filename else None
    if named is not None and temporary in named.parents:
        return final / named.relative_to(temporary), error.needed, error.written
    if named is not None:
        return named, error.needed, error.written
    try:
        newest = max((p for p in temporary.rglob("*") if p.is_file()), key=lambda p: p.stat().st_mtime_ns)
    except (OSError, ValueError):
        return final, None, None
    return final / newest.relative_to(temporary), None, _file_size(newest)


def refuse_symlinks(directory: str | os.PathLike, names: Iterable[str]) -> None:
    """Raise ValueError if ``directory`` itself or any of ``names`` inside it is a symlink."""
    directory = Path(directory)
    for name in names:
        path = directory / name
        if path.is_symlink():
            raise ValueError(f"{path}: is a symlink (to {os.readlink(path)}); attnlab writes this name itself "
                             "and does not follow symlinks there; remove the link or choose another output directory")


def read_json_object(path: str | os.PathLike, *, max_bytes: int, what: str = "a JSON object") -> dict:
    """A small JSON file that must hold one object (a model's config, a task's sidecar),
    read without trusting it: larger than ``max_bytes``, not UTF-8 JSON, nested too deeply
    or not an object is a ValueError naming the file (``what``: what it should hold)."""
    path = Path(path)
    size = path.stat().st_size
    if size > max_bytes:
        raise ValueError(f"{path}: {size:,d} bytes is too large for {what}")
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None
    except RecursionError:
        raise ValueError(f"{path}: not valid JSON (nested too deeply)") from None
    if not isinstance(values, dict):
        raise ValueError(f"{path}: expected {what}, found a JSON {type(values).__name__}")
    return values


MAX_CONFIG_BYTES = 1 << 20


def read_data_record(directory: str | os.PathLike, name: str, *, what: str) -> tuple[Path, dict] | None:
    """``(path, record)`` of the sidecar ``name`` in which a model directory records the data it
    was trained on (``lm.json``, ``bert.json``, ``text_classification.json``: a small JSON
    object, read as :func:`read_json_object` reads); None when the directory has none (a
    foreign model, or one trained before the sidecar was kept)."""
    path = Path(directory) / name
    if not path.is_file():
        return None
    return path, read_json_object(path, max_bytes=1 << 20, what=what)


def check_recorded_files(path: Path, names: Iterable[str], *, what: str, instead: str, folders: bool = False) -> None:
    """ValueError naming the sidecar ``path`` for the first of ``names`` (the files, or with
    ``folders`` the files or folders, it records) that is no longer there: ``"{path}: the
    model's {what} {name} is gone (moved or deleted); {instead}"`` (``instead``: what to give
    instead, e.g. the data flag). Every verb that scores or shows a model's own recorded data
    checks it here (:func:`attnlab.cli.options.check_recorded_data` for one named set or path)."""
    for name in names:
        try:
            there = Path(name).exists() if folders else Path(name).is_file()
        except (OSError, ValueError):  # a name the file system cannot hold (too long, a NUL byte)
            there = False
        if not there:
            raise ValueError(f"{path}: the model's {what} {name} is gone (moved or deleted); {instead}")


def read_config_json(directory: str | os.PathLike) -> dict | None:
    """The JSON object in ``directory/config.json``, or None when there is none, it is larger
    than 1 MiB or it is not a JSON object: what deciding "whose directory is this?" reads
    (the family registry, the recognisers of other libraries' directories). Never an error:
    the loader of the family that claims the directory names what is wrong."""
    try:
        return read_json_object(Path(directory) / "config.json", max_bytes=MAX_CONFIG_BYTES)
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------- #
# The output rule every verb follows
# --------------------------------------------------------------------------- #
def check_output_file(path: str | os.PathLike, *, force: bool, flag: str, suffixes: Iterable[str] = ()) -> Path:
    """An output file named by option ``flag``, checked before any work is done.

    Refused (ValueError naming ``flag``): a directory; an existing file or symlink unless
    ``force`` (then :func:`atomic_write` replaces it: a link is replaced by the file, its
    target is never written); a path through a file (``notes.txt/x.png``); a name without
    one of ``suffixes`` (when given, lower-case, with the dot: ``(".png",)``). A missing
    parent directory is accepted: the writer (:func:`atomic_write`) makes it when it writes
    the file, so a refused or failed command creates nothing.
    """
    out = Path(path)
    suffixes = tuple(suffixes)
    if suffixes and out.suffix.lower() not in suffixes:
        raise ValueError(f"{flag} {out}: give a file name ending in {' or '.join(suffixes)}")
    if out.is_dir() and not out.is_symlink():
        raise ValueError(f"{flag} {out}: is a directory; give a file name")
    if (out.exists() or out.is_symlink()) and not force:
        what = f"is a symlink (to {os.readlink(out)})" if out.is_symlink() else "exists"
        raise ValueError(f"{flag} {out} {what}; pass --force to replace it, or choose a new name")
    _check_ancestors(out, flag)
    return out


def _check_ancestors(out: Path, flag: str) -> None:
    """The nearest existing directory above ``out`` must be a directory (missing ones are
    made by the writer); a file there is refused, naming it."""
    ancestor = out.parent
    while not ancestor.exists() and not ancestor.is_symlink() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        what = "a symlink to nothing" if ancestor.is_symlink() else "a file, not a directory"
        raise ValueError(f"{flag} {out}: {ancestor} is {what}")


def _refuse_link_or_file(out: Path, flag: str) -> None:
    """An output directory may not be a symlink (never written through) or a file."""
    if out.is_symlink():
        raise ValueError(f"{flag} {out}: is a symlink (to {os.readlink(out)}); attnlab does not write "
                         "through symlinks; give a directory")
    if out.exists() and not out.is_dir():
        raise ValueError(f"{flag} {out}: is a file, not a directory")


def check_output_directory(path: str | os.PathLike, *, force: bool, flag: str,
                           own: Callable[[Path], bool] | None = None) -> Path:
    """An output directory named by option ``flag``, checked before any work is done.

    Accepted: a path that does not exist (missing parent directories are made by the writer;
    an existing ancestor that is a file is refused), an empty directory, or one
    for which ``own(path)`` says the verb wrote it itself (e.g. its own earlier output,
    recognised by a marker it writes). Anything else — a file, a symlink, a directory
    holding other files — is refused unless ``force``; with ``force`` the caller replaces
    it as a whole with :func:`atomic_directory` (a symlink is never written through).
    """
    out = Path(path)
    _refuse_link_or_file(out, flag)
    if not out.exists():
        _check_ancestors(out, flag)
        return out
    entries = sorted(entry.name for entry in out.iterdir())
    if not entries or force or (own is not None and own(out)):
        return out
    shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
    raise ValueError(f"{flag} {out}: the directory exists and holds files attnlab did not write here "
                     f"({shown}); pass --force to replace it as a whole, or choose a new directory")


def refuse_replacing_inputs(path: str | os.PathLike, inputs: Iterable[str | os.PathLike], *, flag: str,
                            verb: str) -> None:
    """An output directory replaced as a whole (``check_output_directory`` + ``--force``) must
    not be one of the verb's ``inputs``, a directory holding one, or the current directory (or
    one above it): ValueError naming ``flag``, with or without ``--force``. ``verb`` says
    what the verb does ("averaging", "exporting")."""
    out = Path(path)
    target = out.resolve()
    for item in inputs:
        source = Path(item).resolve()
        if source == target or target in source.parents:
            raise ValueError(f"{flag} {out}: {'is' if source == target else 'holds'} the input {item}; {verb} would "
                             "replace what it reads. Choose another directory")
    here = Path.cwd().resolve()
    if target == here or target in here.parents:
        raise ValueError(f"{flag} {out}: is the current directory or holds it; refusing to replace it as a whole, "
                         "even with --force. Choose a new directory")


def check_output_files(directory: str | os.PathLike, names: Iterable[str], *, force: bool, flag: str) -> Path:
    """A directory named by option ``flag`` into which a verb writes the files ``names``
    (and nothing else), checked before any work is done: the directory may exist (other
    files in it are left alone) or not (its parent must; the verb creates it); it must not
    be a file or a symlink; two outputs may not share a name; and each ``directory/name``
    follows :func:`check_output_file` (an existing file or link refused unless ``force``,
    then replaced atomically). Missing directories are made by the writer."""
    out = Path(directory)
    _refuse_link_or_file(out, flag)
    if not out.exists():
        _check_ancestors(out, flag)
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{flag} {out}: two outputs would both be written as {name}; give inputs "
                             "with different file names")
        seen.add(name)
        if out.is_dir():
            check_output_file(out / name, force=force, flag=flag)
    return out


# --------------------------------------------------------------------------- #
# Lock
# --------------------------------------------------------------------------- #
class OutputLock:
    """An exclusive lock on an output directory, held while a run writes into it.

    ``with OutputLock(out):`` creates ``out`` if needed and takes an ``flock`` on
    ``out/.attnlab.lock``, whose contents name the holder (PID, host, command). A second
    writer is refused with a ValueError naming the holder. The kernel releases the lock
    when its process dies, so a lock file left by a killed run is stale and taken over
    (:attr:`stale_holder` says whose it was).
    """

    def __init__(self, directory: str | os.PathLike, *, purpose: str = "") -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_FILE
        self.purpose = purpose
        self.stale_holder: str | None = None
        self.created = False
        self._fd: int | None = None

    def acquire(self) -> OutputLock:
        import fcntl

        if self.directory.exists() and not self.directory.is_dir():
            raise ValueError(f"{self.directory}: exists and is not a directory; give a directory for the output")
        self.created = not self.directory.exists()
        self.directory.mkdir(parents=True, exist_ok=True)
        key = os.path.realpath(self.directory)
        if key in _HELD:  # this process holds it already (a CLI verb, then its Trainer): nest
            _HELD[key][1] += 1
            self._fd = -1
            return self
        if self.path.is_symlink():
            raise ValueError(f"{self.path}: is a symlink; remove it (attnlab writes its lock file itself)")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise ValueError(f"{self.directory}: another attnlab run is writing here ({holder}); wait for it to "
                             f"finish or choose another output directory") from None
        previous = _read_holder(fd)
        if previous != "holder unknown":
            self.stale_holder = previous
        me = {"pid": os.getpid(), "host": socket.gethostname(), "purpose": self.purpose}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
        self._fd = fd
        _HELD[key] = [fd, 1]
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        key = os.path.realpath(self.directory)
        _HELD[key][1] -= 1
        if _HELD[key][1] > 0:
            self._fd = None
            return
        del _HELD[key]
        os.ftruncate(self._fd, 0)  # the file stays (deleting it would race a waiting writer)...
        if self.created and [p.name for p in self.directory.iterdir()] == [LOCK_FILE]:
            # ...unless this lock made the directory and nothing else was written: a refused
            # run leaves no trace.
            with contextlib.suppress(OSError):
                self.path.unlink()
                self.directory.rmdir()
        os.close(self._fd)  # closing drops the flock
        self._fd = None

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


_HELD: dict[str, list[int]] = {}  # realpath -> [fd, nesting depth] of the locks this process holds


def _read_holder(fd: int) -> str:
    try:
        data = os.pread(fd, 4096, 0).decode("utf-8", "replace")
        holder = json.loads(data) if data.strip() else None
    except (OSError, ValueError):
        holder = None
    if not isinstance(holder, dict):
        return "holder unknown"
    text = f"PID {holder.get('pid')} on host {holder.get('host')}"
    return text + (f", {holder['purpose']}" if holder.get("purpose") else "")
