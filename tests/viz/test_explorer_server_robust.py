"""The explorer's server over a real socket on 127.0.0.1: a client that disconnects
mid-body prints no traceback, and a client that stops sending is answered 408 and
disconnected after the read timeout instead of holding a thread (issue 31)."""

import json
import socket
import struct
import threading
import time
import urllib.request

import pytest

from attnlab.viz.explorer.server import make_server


class _Source:
    """What the server needs of an attention source; these tests never analyse."""

    family, description, default_text, max_tokens = "decoder_lm", "a test source", "hello", 8

    def analyse(self, text, **options):
        raise AssertionError("not used")


@pytest.fixture
def server():
    server = make_server(_Source(), "127.0.0.1", 0, quiet=True, read_timeout=0.5)
    server.daemon_threads = False  # server_close() then waits for every handler to finish
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


def _connect(server) -> socket.socket:
    client = socket.create_connection(server.server_address[:2], timeout=10)
    return client


def _info(server) -> dict:
    url = f"http://127.0.0.1:{server.server_address[1]}/api/info"
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def _read_all(client: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    parts = []
    while chunk := client.recv(4096):
        parts.append(chunk)
    return b"".join(parts)


def test_a_client_gone_mid_body_prints_no_traceback(server, capsys):
    client = _connect(server)
    client.sendall(b"POST /api/analyse HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: 1000\r\n\r\n{\"text\": \"hel")
    time.sleep(0.1)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
    client.close()
    time.sleep(0.2)
    assert _info(server)["description"] == "a test source"  # still serving
    server.shutdown()
    server.server_close()  # waits for the handler of the dropped connection
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Error" not in err and "internal error" not in err, err


def test_a_half_sent_body_is_answered_408_after_the_read_timeout(server):
    client = _connect(server)
    try:
        client.sendall(b"POST /api/analyse HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"te")
        started = time.monotonic()
        client.settimeout(5)
        reply = _read_all(client)
        elapsed = time.monotonic() - started
    finally:
        client.close()
    assert reply.startswith(b"HTTP/1.0 408"), reply[:80]
    assert b"did not arrive" in reply
    assert elapsed < 4  # 0.5 s timeout; generous for a busy machine
    assert _info(server)["family"] == "decoder_lm"


def test_a_half_sent_request_line_is_dropped_after_the_read_timeout(server):
    client = _connect(server)
    try:
        client.sendall(b"GET /api/info HTTP/1.1\r\nHost: x\r\n")  # the headers never end
        started = time.monotonic()
        client.settimeout(5)
        reply = _read_all(client)  # b"" when the server closes the connection without a word
        elapsed = time.monotonic() - started
    finally:
        client.close()
    assert reply == b"" or reply.startswith(b"HTTP/1.0 408"), reply[:80]
    assert elapsed < 4
