"""The explorer page: one HTML document with its stylesheet and script inlined (both
hand-written, shipped in ``static/``), optionally with the data embedded, so it works
from a file, in a notebook and offline. Nothing in it refers to another site."""

from __future__ import annotations

import html
import json
from functools import cache
from importlib.resources import files

__all__ = ["render_page", "notebook_html"]


@cache
def _static(name: str) -> str:
    return files("attnlab.viz.explorer").joinpath("static", name).read_text(encoding="utf-8")


_BODY = """
<div class="attnlab" id="attnlab" data-mode="{mode}">
  <h1>attnlab attention explorer</h1>
  <div class="muted" id="description">{description}</div>
  <div id="input-form">
    <textarea id="text" spellcheck="false" aria-label="text to analyse"></textarea>
    <div class="bar">
      <button id="analyse">Show attention</button>
      <span id="generate-box" style="display:none">then generate <input id="generate" type="number" min="0"
        max="256" value="0" style="width:4em"> tokens</span>
      <label id="image-box" style="display:none">or an image of yours: <input id="image-file" type="file"
        accept="image/png,image/jpeg,image/gif,image/bmp"></label>
    </div>
  </div>
  <div id="text-shown"></div>
  <div id="output"></div>
  <div id="status" class="muted"></div>
  <div class="bar" id="groups"></div>
  <div class="bar">
    <button class="tab on" id="tab-head">head view</button>
    <button class="tab" id="tab-model">model view</button>
    <button class="tab" id="tab-matrix">matrix view</button>
    <button class="tab" id="tab-summary">summaries</button>
    <select id="layer" aria-label="layer"></select>
  </div>
  <div id="image-panel" style="display:none">
    <div class="bar"><span>over the image: the attention of</span>
      <select id="image-query" aria-label="query shown over the image"></select>
      <span class="muted" id="image-caption"></span></div>
    <canvas id="image-canvas"></canvas>
  </div>
  <div id="view-head" class="view on">
    <div class="bar heads"><span>heads:</span><span id="heads"></span>
      <button id="all-heads">all</button><button id="no-heads">none</button>
      <span class="muted">hover a token to isolate its lines</span></div>
    <div class="headview">
      <div class="tokens q" id="tokens-q"></div>
      <canvas id="head-canvas"></canvas>
      <div class="tokens k" id="tokens-k"></div>
    </div>
  </div>
  <div id="view-model" class="view"><div class="muted">each panel: one layer × head (queries down, keys across);
    click to enlarge</div><div class="grid" id="model-grid"></div></div>
  <div id="view-matrix" class="view">
    <div class="bar"><select id="head" aria-label="head"></select><span id="matrix-title"></span></div>
    <div id="matrix-value"></div>
    <div class="matrixwrap"><canvas id="matrix-canvas"></canvas></div>
  </div>
  <div id="view-summary" class="view">
    <table class="summary" id="entropy-table"></table>
    <table class="summary" id="distance-table"></table>
    <div><b>Which heads link</b> <select id="pair-q" aria-label="query token"></select> <b>to</b>
      <select id="pair-k" aria-label="key token"></select> <button id="pair-go">search heads</button></div>
    <ol class="pair-results" id="pair-results"></ol>
  </div>
</div>
"""


def render_page(*, mode: str, title: str = "attnlab explorer", description: str = "", data: dict | None = None) -> str:
    """The whole page. ``mode="server"`` fetches from the JSON API; ``mode="file"`` needs
    ``data`` (:func:`~attnlab.viz.explorer.payload.full_payload`) and is self-contained."""
    if mode not in ("server", "file"):
        raise ValueError(f"mode={mode!r}; choose 'server' or 'file'")
    if (mode == "file") != (data is not None):
        raise ValueError("a file page needs data; a server page must not have it")
    embedded = ""
    if data is not None:
        # JSON inside <script>: escape "<" so no token text can close the element.
        text = json.dumps(data, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c")
        embedded = f'<script type="application/json" id="attnlab-data">{text}</script>\n'
    body = _BODY.format(mode=mode, description=html.escape(description))
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<link rel=\"icon\" href=\"data:,\">\n<title>{html.escape(title)}</title>\n"
            f"<style>\n{_static('explorer.css')}</style>\n</head><body>\n{body}{embedded}"
            f"<script>\n{_static('explorer.js')}</script>\n</body></html>\n")


def notebook_html(page: str, *, height: int = 760) -> str:
    """``page`` inside an ``<iframe srcdoc>``, for a Jupyter cell (``IPython.display.HTML``):
    the iframe keeps the page's ids and script apart from the notebook's and from other
    explorers in the same notebook."""
    return (f'<iframe srcdoc="{html.escape(page, quote=True)}" style="width:100%;height:{int(height)}px;'
            f'border:1px solid #ddd" sandbox="allow-scripts"></iframe>')
