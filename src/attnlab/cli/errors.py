"""What the CLI prints for an exception: one line that names the file or argument, never a traceback.

``attnlab --debug VERB ...`` (or ``ATTNLAB_DEBUG=1``) prints the traceback as well.
"""

from __future__ import annotations

__all__ = ["describe_error"]


def describe_error(error: BaseException) -> tuple[str, int]:
    """``(message, exit code)`` for an exception that ended a verb: 2 for bad input
    (ValueError, a missing or unreadable file), 1 for anything else, which is a failure
    of attnlab itself and says how to see the traceback."""
    from attnlab.files import is_disk_full

    if is_disk_full(error) and not (isinstance(error, OSError) and error.filename):
        # a writer that did not go through attnlab.files (which names the file and the space)
        return f"no space left on the device ({error})", 2
    if isinstance(error, UnicodeError):
        return f"{error} (is the input a text file in UTF-8?)", 2
    if isinstance(error, ValueError):
        return str(error), 2
    if isinstance(error, OSError):
        where = " -> ".join(str(name) for name in (error.filename, error.filename2) if name is not None)
        reason = error.strerror or str(error)
        return (f"{where}: {reason}" if where and where not in reason else reason), 2
    if isinstance(error, EOFError):
        return f"{error} (a truncated file?)", 2
    if isinstance(error, MemoryError):
        return "out of memory (try smaller sizes or batches)", 1
    if isinstance(error, RecursionError):
        return "input nested too deeply to read", 2
    name = f"{type(error).__module__}.{type(error).__name__}".removeprefix("builtins.")
    return f"{name}: {error} (an internal error; run with --debug for the traceback and please report it)", 1
