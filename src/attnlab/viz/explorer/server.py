"""The explorer's local web server (stdlib ``http.server``) and its JSON API.

Safe by default: it binds 127.0.0.1; the model directory is fixed when it starts (no
request names a file: the page and its script are served from memory); texts, bodies and
query strings are size-limited; every bad request gets a 4xx JSON error and every failure
a 500 JSON error, never a traceback page; a body nested too deeply for the JSON reader is a
400. A client that stops sending for ``READ_TIMEOUT`` seconds gets 408 and is disconnected
(a half-sent request does not hold a thread), and a client that goes away mid-request is
dropped quietly (no traceback in the terminal). Every connection gets an HTTP answer: the
listening socket queues up to ``BACKLOG`` connections, ``WORKERS`` threads answer them from a
queue of at most ``PENDING``, and a connection past that is answered at once with 503 and
``Retry-After`` (no thread per connection, so a flood cannot exhaust the machine).

API (all JSON):
  GET  /                          the page
  GET  /api/info                  {family, description, default_text, max_tokens, generates, image_input,
                                  hint (what the input may be, where it is not plain text),
                                  default_note (image models: where default_text comes from)}
  POST /api/analyse {text, generate?}   overview: tokens and shapes of each group, id (and, for an
                                  image input, the image: a PNG data URI and the grid of key_cells)
  GET  /api/layer?id=&group=&layer=     one layer's weights (heads, Lq, Lk), uint16 base64
  GET  /api/layer.bin?id=&group=&layer= the same weights as raw little-endian uint16 bytes
                                  (application/octet-stream; what the page reads)
  GET  /api/summary?id=&group=          per-head entropy and mean attention distance
  GET  /api/thumbnails?id=&group=       a small uint8 thumbnail of every layer x head (base64)
  GET  /api/pair?id=&group=&query=&key= heads ranked by weight[query, key]
"""

from __future__ import annotations

import json
import queue
import secrets
import socket
import sys
import threading
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlsplit

from attnlab.viz.explorer.maps import Analysis, AttentionSource
from attnlab.viz.explorer.page import render_page
from attnlab.viz.explorer.payload import (layer_bytes, layer_payload, overview, search_pair, summaries,
                                          thumbnail_payload)

MAX_BODY = 64 * 1024  # bytes of a POST body
READ_TIMEOUT = 10.0  # seconds a connection may stay silent while its request is being read
KEEP = 8  # analyses kept for /api/layer and /api/pair
WORKERS = 8  # threads answering requests (model runs take one lock anyway)
PENDING = 64  # accepted connections waiting for a worker; past it: 503 + Retry-After
BACKLOG = 1024  # the listening socket's queue (the kernel caps it at net.core.somaxconn)
RETRY_AFTER = 1  # seconds, in a 503's Retry-After

__all__ = ["ExplorerApp", "make_server", "serve"]


class RequestError(ValueError):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class ClientGone(Exception):
    """The client closed the connection or stopped sending before its request was whole."""


class Binary(bytes):
    """A response body of raw bytes (``application/octet-stream``), not a page."""


class ExplorerApp:
    """The API without HTTP: ``handle(method, path, body) -> (status, payload dict)``.
    One lock serialises model runs (torch on a small machine gains nothing from two)."""

    def __init__(self, source: AttentionSource):
        self.source = source
        self.analyses: OrderedDict[str, Analysis] = OrderedDict()
        self.lock = threading.Lock()
        self.page = render_page(mode="server", title=f"attnlab explorer — {source.description}").encode()

    @property
    def generates(self) -> bool:
        """Whether the source continues its input (a language or music model: ``generate=N``)."""
        return bool(getattr(self.source, "generates", False))

    def info(self) -> dict:
        s = self.source
        return {"family": s.family, "description": s.description, "default_text": s.default_text,
                "max_tokens": s.max_tokens, "generates": self.generates,
                "image_input": bool(getattr(s, "image_input", False)), "hint": str(getattr(s, "hint", "")),
                "default_note": str(getattr(s, "default_note", ""))}

    def analyse(self, body: dict) -> dict:
        text = body.get("text")
        if not isinstance(text, str):
            raise RequestError(400, "the body must be a JSON object with a string 'text'")
        options = {}
        if "generate" in body and self.generates:
            options["generate"] = body["generate"]
        with self.lock:
            analysis = self.source.analyse(text, **options)
            analysis_id = secrets.token_hex(8)
            self.analyses[analysis_id] = analysis
            while len(self.analyses) > KEEP:
                self.analyses.popitem(last=False)
        return overview(analysis, analysis_id)

    def _group(self, query: dict):
        analysis = self.analyses.get(_one(query, "id"))
        if analysis is None:
            raise RequestError(404, "unknown or expired analysis id; analyse the text again")
        name = _one(query, "group")
        for group in analysis.groups:
            if group.name == name:
                return group
        raise RequestError(404, f"no attention group {name!r}; this model has "
                                f"{[g.name for g in analysis.groups]}")

    def handle(self, method: str, path: str, body: bytes = b"") -> tuple[int, dict | bytes]:
        """``(status, payload)``: a dict (JSON), :class:`Binary` (raw bytes) or other bytes (the page)."""
        url = urlsplit(path)
        if len(path) > 2048:
            raise RequestError(414, "the request line is too long")
        query = parse_qs(url.query, keep_blank_values=True, max_num_fields=10)
        route = (method, url.path)
        if route == ("GET", "/") or route == ("GET", "/index.html"):
            return 200, self.page
        if route == ("GET", "/api/info"):
            return 200, self.info()
        if route == ("POST", "/api/analyse"):
            try:
                values = json.loads(body.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as error:
                raise RequestError(400, f"the body is not JSON ({error})") from None
            except RecursionError:
                raise RequestError(400, "the body is JSON nested too deeply to read") from None
            if not isinstance(values, dict):
                raise RequestError(400, "the body must be a JSON object")
            return 200, self.analyse(values)
        if route == ("GET", "/api/layer"):
            return 200, layer_payload(self._group(query), _integer(query, "layer"))
        if route == ("GET", "/api/layer.bin"):
            return 200, Binary(layer_bytes(self._group(query), _integer(query, "layer")))
        if route == ("GET", "/api/summary"):
            return 200, summaries(self._group(query))
        if route == ("GET", "/api/thumbnails"):
            return 200, thumbnail_payload(self._group(query))
        if route == ("GET", "/api/pair"):
            return 200, search_pair(self._group(query), _integer(query, "query"), _integer(query, "key"))
        if url.path in ("/", "/index.html", "/api/info", "/api/analyse", "/api/layer", "/api/layer.bin",
                        "/api/summary", "/api/thumbnails", "/api/pair"):
            raise RequestError(405, f"{method} is not allowed on {url.path}")
        raise RequestError(404, f"no such page: {url.path}")


def _one(query: dict, name: str) -> str:
    values = query.get(name)
    if not values or len(values) != 1:
        raise RequestError(400, f"give exactly one '{name}' parameter")
    return values[0]


def _integer(query: dict, name: str) -> int:
    text = _one(query, name)
    if not text.isdigit() or len(text) > 6:
        raise RequestError(400, f"'{name}' must be a non-negative integer, got {text[:20]!r}")
    return int(text)


class _Handler(BaseHTTPRequestHandler):
    app: ExplorerApp
    server_version = "attnlab-explorer"
    sys_version = ""
    quiet = False

    def handle(self) -> None:
        # A client that disconnects while a reply is written (BrokenPipeError,
        # ConnectionResetError) or that falls silent (socket.timeout) ends its connection,
        # not the server, and prints no traceback.
        try:
            super().handle()
        except (ConnectionError, socket.timeout, ClientGone):
            self.close_connection = True

    def _read_body(self, length: int) -> bytes:
        """Exactly ``length`` bytes of body, or :class:`ClientGone` (closed early) or
        RequestError 408 (silent for ``timeout`` seconds)."""
        try:
            body = self.rfile.read(length)
        except socket.timeout:
            raise RequestError(408, f"the request body did not arrive within {self.timeout:g} s") from None
        if len(body) < length:
            raise ClientGone()
        return body

    def _send(self, status: int, payload) -> None:
        if isinstance(payload, Binary):
            data, kind = bytes(payload), "application/octet-stream"
        elif isinstance(payload, bytes):
            data, kind = payload, "text/html; charset=utf-8"
        else:
            data, kind = json.dumps(payload, separators=(",", ":")).encode(), "application/json"
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        # The page loads nothing from elsewhere; say so to the browser as well.
        self.send_header("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; "
                                                    "style-src 'unsafe-inline'; img-src data: blob:")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _dispatch(self, method: str) -> None:
        try:
            body = b""
            if method == "POST":
                length = self.headers.get("Content-Length", "")
                if not length.isdigit():
                    raise RequestError(411, "a POST needs a Content-Length")
                if int(length) > MAX_BODY:
                    raise RequestError(413, f"the body has {length} bytes; the limit is {MAX_BODY}")
                body = self._read_body(int(length))
            status, payload = self.app.handle(method, self.path, body)
        except (ClientGone, ConnectionError):  # the client went away: no one to answer
            self.close_connection = True
            return
        except RequestError as error:
            status, payload = error.status, {"error": str(error)}
            if status == 408:
                self.close_connection = True
        except ValueError as error:  # bad input found by the model side (too long, unknown character...)
            status, payload = 400, {"error": str(error)}
        except Exception as error:  # never a traceback page; the server keeps running
            print(f"attnlab explore: internal error on {method} {self.path[:200]}: {error!r}", file=sys.stderr)
            status, payload = 500, {"error": "internal error; see the server's terminal"}
        self._send(status, payload)

    def do_GET(self):  # noqa: N802 (http.server's names)
        self._dispatch("GET")

    def do_POST(self):  # noqa: N802
        self._dispatch("POST")

    def do_PUT(self):  # noqa: N802
        self._dispatch("PUT")

    def do_DELETE(self):  # noqa: N802
        self._dispatch("DELETE")

    def send_error(self, code, message=None, explain=None):
        # http.server's own errors (malformed request lines, over-long headers): JSON too.
        try:
            self._send(code, {"error": message or "bad request"})
        except Exception:
            pass

    def log_message(self, format, *args):
        if not self.quiet:
            sys.stderr.write(f"attnlab explore: {self.address_string()} {format % args}\n")


class BoundedHTTPServer(HTTPServer):
    """An HTTP server that answers every connection with a fixed pool of ``workers`` threads:
    accepted connections wait in a queue of at most ``pending``; one past it is answered
    503 with ``Retry-After`` by the accepting thread and closed. ``server_close()`` stops the
    workers after the connections already queued (``daemon_threads = False``, the default,
    waits for them; True leaves them to end with the process)."""

    request_queue_size = BACKLOG
    daemon_threads = False

    def __init__(self, address, handler, *, workers: int = WORKERS, pending: int = PENDING):
        super().__init__(address, handler)
        self._pending: queue.Queue = queue.Queue(maxsize=pending)
        self._workers = [threading.Thread(target=self._work, name=f"explorer-worker-{i}", daemon=True)
                         for i in range(workers)]
        for worker in self._workers:
            worker.start()
        self._closed = False

    def process_request(self, request, client_address):
        try:
            self._pending.put_nowait((request, client_address))
        except queue.Full:
            self._busy(request)

    def _work(self) -> None:
        while (item := self._pending.get()) is not None:
            request, client_address = item
            try:
                self.finish_request(request, client_address)
            except Exception:
                self.handle_error(request, client_address)
            finally:
                self.shutdown_request(request)

    def _busy(self, request) -> None:
        """503 + Retry-After on a connection no worker can take: its request (what has
        arrived within a moment) is read first, so closing does not reset the answer away."""
        data = json.dumps({"error": f"the server is busy; retry in {RETRY_AFTER} s"}).encode()
        try:
            request.settimeout(0.05)
            try:
                request.recv(MAX_BODY)
            except (socket.timeout, OSError):
                pass
            request.sendall(b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                            b"Retry-After: %d\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                            % (RETRY_AFTER, len(data), data))
        except OSError:
            pass
        finally:
            self.shutdown_request(request)

    def handle_error(self, request, client_address):
        print(f"attnlab explore: internal error on a connection from {client_address[0]}: {sys.exc_info()[1]!r}",
              file=sys.stderr)

    def server_close(self):
        super().server_close()
        if self._closed:
            return
        self._closed = True
        for _ in self._workers:
            self._pending.put(None)
        if not self.daemon_threads:
            for worker in self._workers:
                worker.join()


def make_server(source: AttentionSource, host: str = "127.0.0.1", port: int = 8000, *,
                quiet: bool = False, read_timeout: float = READ_TIMEOUT, workers: int = WORKERS,
                pending: int = PENDING) -> BoundedHTTPServer:
    """A ready (not yet serving) HTTP server for ``source``; ``port=0`` picks a free port;
    a connection silent for ``read_timeout`` seconds mid-request is answered 408 and closed;
    ``workers`` threads answer, ``pending`` connections wait, the rest get 503."""
    handler = type("Handler", (_Handler,), {"app": ExplorerApp(source), "quiet": quiet,
                                            "timeout": read_timeout})
    try:
        server = BoundedHTTPServer((host, port), handler, workers=workers, pending=pending)
    except OSError as error:
        raise ValueError(f"cannot listen on {host}:{port} ({error.strerror or error})") from None
    server.daemon_threads = True
    return server


def serve(source: AttentionSource, host: str = "127.0.0.1", port: int = 8000) -> None:
    server = make_server(source, host, port)
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(f"attnlab explore: warning: listening on {host}: anyone who can reach this address can run the model",
              file=sys.stderr)
    print(f"attnlab explore: {source.description}\n  open http://{host}:{server.server_address[1]}/  (Ctrl-C stops)")
    try:
        server.serve_forever()
    finally:
        server.server_close()
