"""Training tasks: what ties data, a model family, a loss and the Trainer together.

Each family's own task (loss, training, evaluation) lives in its package,
``attnlab.families.<name>.task``; what stays here is shared by more than one family:
:func:`read_task_file` (the sidecar JSON files of model directories), :mod:`attnlab.tasks.lm`
(opening a language model directory: the lm family and the explorer) and
:mod:`attnlab.tasks.captioning` (the caption vocabulary and loader text-to-image reuses).

Modules are imported on use: a task pulls in its data and model code, which a CLI's
``--help`` should not pay for.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from attnlab.files import read_json_object

__all__ = ["read_task_file", "is_positive_int", "is_text"]

MAX_TASK_FILE_BYTES = 1 << 20


def is_positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def is_text(value: Any) -> bool:
    return isinstance(value, str)


def read_task_file(path: str | Path, fields: Mapping[str, tuple[Callable[[Any], bool], str]]) -> dict[str, Any]:
    """The JSON object a model directory keeps beside its weights (``caption.json``,
    ``text_to_image.json``), checked: ``fields`` maps each allowed name to ``(check,
    what it must be)``. A missing file gives ``{}``; anything else wrong — not JSON, not
    an object, an unknown field, a value that fails its check — raises ValueError naming
    the file and the field."""
    path = Path(path)
    if not path.is_file():
        return {}
    values = read_json_object(path, max_bytes=MAX_TASK_FILE_BYTES, what="a JSON object (a task file)")
    for name, value in values.items():
        if name not in fields:
            raise ValueError(f"{path}: unknown field {name!r}; known fields: {', '.join(sorted(fields))}")
        check, what = fields[name]
        if value is not None and not check(value):
            raise ValueError(f"{path}: {name}={json.dumps(value)[:80]} is not {what}")
    return values
