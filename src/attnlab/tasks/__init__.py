"""Training tasks: what ties data, a model family, a loss and the Trainer together.

Each CLI training verb is a thin shell over one module here; the next tasks
(classification, image generation, music, captioning) get a module beside these.

* :mod:`attnlab.tasks.translation` — parallel corpora -> joint vocabulary -> Transformer.
* :mod:`attnlab.tasks.lm` — plain text -> character or BPE tokens -> DecoderLM windows.
* :mod:`attnlab.tasks.classification` — images -> shifted batches -> Vision Transformer.

Modules are imported on use (``from attnlab.tasks.lm import lm_loss``): a task pulls in its
data and model code, which a CLI's ``--help`` should not pay for.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

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
    if path.stat().st_size > MAX_TASK_FILE_BYTES:
        raise ValueError(f"{path}: {path.stat().st_size:,d} bytes is too large for a task file")
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None
    except RecursionError:
        raise ValueError(f"{path}: not valid JSON (nested too deeply)") from None
    if not isinstance(values, dict):
        raise ValueError(f"{path}: expected a JSON object, found {type(values).__name__}")
    for name, value in values.items():
        if name not in fields:
            raise ValueError(f"{path}: unknown field {name!r}; known fields: {', '.join(sorted(fields))}")
        check, what = fields[name]
        if value is not None and not check(value):
            raise ValueError(f"{path}: {name}={json.dumps(value)[:80]} is not {what}")
    return values
