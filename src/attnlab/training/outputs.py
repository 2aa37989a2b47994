"""The one check every training verb makes of its ``--out`` before it reads data or writes.

A training run writes ``OUT/checkpoints``, ``OUT/metrics.jsonl`` and, at its end,
``OUT/model``. :func:`check_run_output` refuses an OUT that would lose something:

* a file where the directory should be;
* checkpoints of an earlier run without ``--resume`` (the runs would interleave);
* an existing ``OUT/model`` (a finished model, or a directory of the user's files) that
  the run would overwrite: allowed only with ``--resume`` when there is a run to continue
  (its model is the run's own), or with ``--force`` (the new model then replaces it);
  a file named ``OUT/model`` or a symlink there is refused always.

The message says what is there: an attnlab model (``config.json`` + ``model.safetensors``)
or other files, named.
"""

from __future__ import annotations

import os
from pathlib import Path

from attnlab.training.checkpoint import latest_checkpoint

__all__ = ["check_run_output", "describe_model_directory", "save_run_model"]

MODEL_SUBDIR = "model"


def describe_model_directory(directory: Path) -> str:
    """What ``directory`` holds, for a message: "a trained attnlab model (with
    char_tokenizer.json, README.md)" or "files attnlab did not write (notes.txt, ...)"."""
    names = sorted(entry.name for entry in directory.iterdir())
    model = {"config.json", "model.safetensors"} <= set(names)
    others = [name for name in names if name not in ("config.json", "model.safetensors")] if model else names
    shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
    if model:
        return "a trained attnlab model" + (f" (with {shown})" if others else "")
    return f"files attnlab did not write ({shown})"


def check_run_output(out: str | os.PathLike, *, resume: bool, force: bool = False,
                     flag: str = "--out") -> Path | None:
    """Check a training verb's output directory ``out`` (see the module docstring) before
    anything is read or written; return the checkpoint ``--resume`` continues (None for a
    fresh run). Raises ValueError naming ``flag``."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{flag} {out}: exists and is not a directory")
    checkpoint = latest_checkpoint(out / "checkpoints") if out.is_dir() else None
    if checkpoint is not None and not resume:
        raise ValueError(f"{flag} {out}: already holds checkpoints (latest {checkpoint.name}); pass --resume to "
                         "continue that run, or choose another directory")
    model = out / MODEL_SUBDIR
    if model.is_symlink():
        raise ValueError(f"{flag} {out}: {model} is a symlink (to {os.readlink(model)}); attnlab does not write "
                         "through symlinks; remove it or choose another directory")
    if model.exists() and not model.is_dir():
        raise ValueError(f"{flag} {out}: {model} is a file, not a model directory; move it away or choose another "
                         "directory")
    if not model.is_dir() or not any(model.iterdir()):
        return checkpoint
    if (resume and checkpoint is not None) or force:
        return checkpoint  # continuing the run that wrote it, or asked to replace it
    what = describe_model_directory(model)
    why = " and no checkpoints to resume" if resume else ""
    raise ValueError(f"{flag} {out}: {model} already holds {what}{why}; a new run would overwrite it. Pass --force "
                     "to replace it, or choose another directory")


def save_run_model(model, directory: str | os.PathLike, *, extra_files: dict[str, bytes] | None = None,
                   replace: bool = False) -> Path:
    """Write a run's final model to ``directory`` (``OUT/model``): built in a temporary
    directory and swapped in (:func:`attnlab.files.atomic_directory`), so a crash leaves the
    old directory or the new one, never a mix.

    ``replace`` (``--force``): what was there goes as a whole. Otherwise (a resumed run
    replacing its own model) entries of the old directory that the new model does not write
    (a README you added) are copied into the new one: nothing of yours is lost."""
    import shutil

    from attnlab.files import atomic_directory

    directory = Path(directory)
    with atomic_directory(directory) as temporary:
        model.save_pretrained(temporary, extra_files=extra_files)
        if not replace and directory.is_dir():
            for entry in directory.iterdir():
                target = temporary / entry.name
                if target.exists() or target.is_symlink():
                    continue
                if entry.is_symlink():
                    os.symlink(os.readlink(entry), target)
                elif entry.is_dir():
                    shutil.copytree(entry, target, symlinks=True)
                else:
                    shutil.copy2(entry, target)
    return directory
