"""The explorer's JSON API and its HTML: shapes, normalisation, padding excluded, pair
search, summaries against direct formulas, 4xx JSON for bad requests over real HTTP,
and self-contained pages (no external URL)."""

import base64
import json
import math
import re
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest
import torch

from attnlab.viz.explorer import explorer_html, load_source
from attnlab.viz.explorer.maps import Analysis, AttentionGroup
from attnlab.viz.explorer.payload import (QUANT, decode_weights, head_entropy, mean_distance, search_pair,
                                          thumbnails)
from attnlab.viz.explorer.server import Binary, ExplorerApp, make_server


@pytest.fixture(scope="module")
def app(translation_dir):
    return ExplorerApp(load_source(translation_dir))


def test_analyse_then_every_layer(app):
    status, ov = app.handle("POST", "/api/analyse", json.dumps({"text": "eine frau liest ein buch"}).encode())
    assert status == 200 and [g["name"] for g in ov["groups"]] == ["encoder self", "decoder self", "cross"]
    analysis = app.analyses[ov["id"]]
    for entry, group in zip(ov["groups"], analysis.groups):
        layers, heads, queries, keys = group.weights.shape
        assert (entry["layers"], entry["heads"], entry["queries"], entry["keys"]) == (layers, heads, queries, keys)
        assert entry["query_tokens"] == group.query_tokens and len(entry["key_tokens"]) == keys
        # padding excluded: the source has exactly its pieces + </s>, no pad columns
        assert "<pad>" not in entry["key_tokens"] + entry["query_tokens"]
        assert "thumbnails" not in entry and "summaries" not in entry  # asked for when shown
        status, thumbs = app.handle("GET", f"/api/thumbnails?id={ov['id']}&group={entry['name']}")
        expected = thumbnails(group.weights)
        assert status == 200 and (thumbs["height"], thumbs["width"]) == tuple(expected.shape[2:])
        assert base64.b64decode(thumbs["data"]) == expected.numpy().tobytes()
        status, summary = app.handle("GET", f"/api/summary?id={ov['id']}&group={entry['name']}")
        assert status == 200 and np.array(summary["entropy"]).shape == np.array(summary["distance"]).shape == (
            layers, heads)
        assert np.allclose(summary["entropy"], head_entropy(group.weights).numpy(), atol=1e-4)
        for layer in range(layers):
            status, data = app.handle("GET", f"/api/layer?id={ov['id']}&group={entry['name']}&layer={layer}")
            assert status == 200 and data["scale"] == QUANT
            weights = decode_weights(data["data"], (heads, queries, keys))
            assert np.abs(weights.sum(-1) - 1).max() <= keys / QUANT  # rows sum to 1 (rounding of each cell)
            assert np.abs(weights - group.weights[layer].double().numpy()).max() <= 0.5 / QUANT + 1e-7
            status, raw = app.handle("GET", f"/api/layer.bin?id={ov['id']}&group={entry['name']}&layer={layer}")
            assert status == 200 and isinstance(raw, Binary) and len(raw) == 2 * heads * queries * keys
            assert np.array_equal(np.frombuffer(raw, dtype="<u2").reshape(heads, queries, keys) / QUANT, weights)


def test_summaries_match_direct_formulas():
    torch.manual_seed(0)
    w = torch.softmax(torch.randn(2, 3, 5, 7, dtype=torch.float64), -1)
    entropy = head_entropy(w)
    distance = mean_distance(w)
    for layer, head in [(0, 0), (1, 2)]:
        rows = w[layer, head]
        assert math.isclose(float(entropy[layer, head]),
                            sum(-sum(float(p) * math.log(float(p)) for p in row) for row in rows) / 5, rel_tol=1e-12)
        assert math.isclose(float(distance[layer, head]),
                            sum(float(rows[q, k]) * abs(q - k) for q in range(5) for k in range(7)) / 5, rel_tol=1e-12)
    one_hot = torch.zeros(1, 1, 4, 4)
    one_hot[0, 0, :, 0] = 1
    assert head_entropy(one_hot).abs().max() < 1e-12
    thumbs = thumbnails(torch.rand(2, 3, 100, 30), size=48)
    assert thumbs.shape == (2, 3, 48, 30) and thumbs.dtype == torch.uint8 and int(thumbs.amax()) == 255


def test_pair_search_ranks_heads():
    w = torch.full((2, 2, 3, 3), 1 / 3)
    w[1, 0, 2] = torch.tensor([0.9, 0.05, 0.05])  # layer 1 head 0: query 2 -> key 0
    w[0, 1, 2] = torch.tensor([0.5, 0.4, 0.1])
    group = AttentionGroup("self", w, list("abc"), list("abc"))
    result = search_pair(group, 2, 0)
    assert [(h["layer"], h["head"], h["rank"]) for h in result["heads"][:2]] == [(1, 0, 1), (0, 1, 1)]
    assert result["heads"][0]["weight"] == 0.9
    with pytest.raises(ValueError, match="query=3"):
        search_pair(group, 3, 0)


@pytest.fixture(scope="module")
def base_url(translation_dir):
    server = make_server(load_source(translation_dir), "127.0.0.1", 0, quiet=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("method, path, body, status, message", [
    ("GET", "/api/layer?id=nope&group=cross&layer=0", None, 404, "unknown or expired"),
    ("GET", "/api/layer?group=cross&layer=0", None, 400, "exactly one 'id'"),
    ("GET", "/api/layer.bin?id=nope&group=cross&layer=0", None, 404, "unknown or expired"),
    ("GET", "/etc/passwd", None, 404, "no such page"),
    ("GET", "/../../config.json", None, 404, "no such page"),
    ("PUT", "/api/analyse", b"{}", 405, "not allowed"),
    ("POST", "/api/analyse", b"not json", 400, "not JSON"),
    ("POST", "/api/analyse", b"[1]", 400, "JSON object"),
    ("POST", "/api/analyse", b'{"text": 5}', 400, "string 'text'"),
    ("POST", "/api/analyse", b'{"text": "  "}', 400, "empty"),
    ("POST", "/api/analyse", json.dumps({"text": "ein " * 400}).encode(), 400, "limit is 256"),
    ("POST", "/api/analyse", b"x" * 70000, 413, "limit is 65536"),
])
def test_bad_requests_get_json_errors_over_http(base_url, method, path, body, status, message):
    request = urllib.request.Request(base_url + path, data=body, method=method,
                                     headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(request, timeout=30)
    assert error.value.code == status
    assert error.value.headers["Content-Type"] == "application/json"
    payload = json.loads(error.value.read())
    assert message in payload["error"] and "Traceback" not in payload["error"]
    # the server is still up and well afterwards
    with urllib.request.urlopen(base_url + "/api/info", timeout=30) as ok:
        assert json.loads(ok.read())["family"] == "transformer"


def test_layer_bytes_over_http(base_url):
    request = urllib.request.Request(base_url + "/api/analyse", data=json.dumps({"text": "ein hund"}).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        ov = json.loads(response.read())
    entry = ov["groups"][2]
    with urllib.request.urlopen(f"{base_url}/api/layer?id={ov['id']}&group=cross&layer=1", timeout=30) as response:
        expected = decode_weights(json.loads(response.read())["data"], (entry["heads"], entry["queries"], entry["keys"]))
    with urllib.request.urlopen(f"{base_url}/api/layer.bin?id={ov['id']}&group=cross&layer=1", timeout=30) as response:
        assert response.headers["Content-Type"] == "application/octet-stream"
        raw = response.read()
    assert np.array_equal(np.frombuffer(raw, dtype="<u2").reshape(expected.shape) / QUANT, expected)


def test_server_binds_localhost_by_default(translation_dir):
    server = make_server(load_source(translation_dir), port=0, quiet=True)
    try:
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.server_close()


def _no_external_urls(page: str) -> None:
    assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", page, flags=re.I), "the page refers to another site"
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=[\"'](?!data:)", page), "external resource"


def test_exported_html_is_self_contained(minilm_dir):
    page = explorer_html(minilm_dir)
    _no_external_urls(page)
    data = json.loads(re.search(r'<script type="application/json" id="attnlab-data">(.*?)</script>', page,
                                flags=re.S).group(1))
    (group,) = data["groups"]
    assert group["query_tokens"][:3] == ["[CLS]", "the", "animal"] and len(group["layer_data"]) == 6
    weights = decode_weights(group["layer_data"][0], (12, group["queries"], group["keys"]))
    assert np.abs(weights.sum(-1) - 1).max() <= group["keys"] / QUANT


def test_token_text_cannot_break_out_of_the_page(lm_dir):
    page = explorer_html(lm_dir, "</script><script>alert(1)</script>")
    assert page.count("</script>") == 2  # the embedded data's and the explorer script's own
    _no_external_urls(page)


def test_server_page_is_self_contained(app):
    status, page = app.handle("GET", "/")
    assert status == 200
    _no_external_urls(page.decode())
