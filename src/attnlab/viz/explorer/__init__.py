"""The local attention explorer: head view, model view, matrix view and summaries of any
attnlab model's attention, served on 127.0.0.1 or written as one self-contained HTML file.

``explorer_html(model_dir_or_source, text)`` returns that file's HTML (for Jupyter:
``IPython.display.HTML(explorer_html(..., notebook=True))``); ``attnlab explore`` serves or
writes it. Models show their attention through :func:`~attnlab.viz.explorer.maps.attention_maps`
(the function each family's registration names, attnlab.families).
"""

from __future__ import annotations

import os

from attnlab.viz.explorer.maps import AttentionGroup, AttentionSource, Analysis, attention_maps, load_source
from attnlab.viz.explorer.page import notebook_html, render_page
from attnlab.viz.explorer.payload import full_payload

__all__ = ["AttentionGroup", "AttentionSource", "Analysis", "attention_maps", "explorer_html", "load_source"]

MAX_FILE_TOKENS = 1024  # a self-contained file holds every layer; keep it a sensible size


def explorer_html(model: str | os.PathLike | AttentionSource, text: str | None = None, *, device: str = "cpu",
                  notebook: bool = False, **options) -> str:
    """The self-contained explorer page for ``text`` (default: the source's example
    sentence) with ``model`` (a model directory or an :class:`AttentionSource`).
    ``notebook=True`` wraps it in an iframe for a Jupyter cell. ``options`` go to the
    source's ``analyse`` (e.g. ``generate=20`` for a language or music model); an image
    family's ``text`` may be an image file (``files=True``, the default here: the caller
    names it), ``example:N`` or a data URI (:mod:`attnlab.viz.explorer.inputs`)."""
    source = load_source(model, device=device) if isinstance(model, (str, os.PathLike)) else model
    options.setdefault("files", True)  # the caller names the file an image or MIDI source reads
    analysis = source.analyse(source.default_text if text is None else text, **options)
    longest = max(max(g.weights.shape[-2:]) for g in analysis.groups)
    if longest > MAX_FILE_TOKENS:
        raise ValueError(f"{longest} tokens are too many for one self-contained file (limit {MAX_FILE_TOKENS}); "
                         f"serve them with attnlab explore instead")
    page = render_page(mode="file", title=f"attnlab explorer — {analysis.text[:60]}", description=source.description,
                       data=full_payload(analysis))
    return notebook_html(page) if notebook else page
