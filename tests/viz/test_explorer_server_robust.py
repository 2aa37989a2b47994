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


def _ask(server, request: bytes, timeout: float = 30) -> bytes:
    """Send one raw request and read the whole answer (b"" if the connection ends without one)."""
    try:
        with socket.create_connection(server.server_address[:2], timeout=timeout) as client:
            client.sendall(request)
            return _read_all(client)
    except OSError as error:
        return f"no answer: {error!r}".encode()


def _post(body: bytes) -> bytes:
    return (b"POST /api/analyse HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


def test_a_deeply_nested_body_under_the_size_limit_is_a_400(server, capsys):
    # Issue 39, 16: json.loads raised RecursionError -> 500 with a traceback-like log line.
    body = b"[" * 30_000 + b"]" * 30_000  # 60,000 bytes: under MAX_BODY
    reply = _ask(server, _post(body))
    assert reply.startswith(b"HTTP/1.0 400"), reply[:80]
    assert b"nested too deeply" in reply
    assert "internal error" not in capsys.readouterr().err


class _SlowSource(_Source):
    """Each analysis waits for ``gate`` (at most 20 s) and then refuses the text (a 400)."""

    def __init__(self):
        self.gate = threading.Event()

    def analyse(self, text, **options):
        self.gate.wait(20)
        raise ValueError("this test source analyses nothing")


def test_every_one_of_200_concurrent_requests_gets_an_answer_from_a_bounded_pool():
    # Issue 39, 16: of 200 concurrent requests 21 got no HTTP answer (a thread per connection,
    # a listen queue of 5). Now: a fixed pool answers, the connections past its queue get 503
    # with Retry-After at once, and every connection gets a status line.
    from attnlab.viz.explorer.server import PENDING, WORKERS

    source = _SlowSource()
    server = make_server(source, "127.0.0.1", 0, quiet=True, read_timeout=5)
    server.daemon_threads = False
    serving = threading.Thread(target=server.serve_forever, name="serving", daemon=True)
    serving.start()
    count, replies = 200, {}
    start = threading.Barrier(count)

    def client(i):
        start.wait(30)
        replies[i] = _ask(server, _post(b'{"text": "hello"}'))

    baseline = {t.ident for t in threading.enumerate()}
    clients = [threading.Thread(target=client, args=(i,), name=f"client-{i}", daemon=True) for i in range(count)]
    try:
        for thread in clients:
            thread.start()
        deadline = time.monotonic() + 60
        while len(replies) < count - WORKERS - PENDING and time.monotonic() < deadline:
            time.sleep(0.05)
        # The model is still busy: the server has not started a thread per waiting connection.
        server_threads = [t for t in threading.enumerate() if t.ident not in baseline
                          and not t.name.startswith("client-")]
        early = dict(replies)
    finally:
        source.gate.set()
        for thread in clients:
            thread.join(60)
        server.shutdown()
        server.server_close()
        serving.join(10)
    assert len(server_threads) <= WORKERS, [t.name for t in server_threads]
    assert len(early) >= count - WORKERS - PENDING
    assert all(reply.startswith(b"HTTP/1.0 503") and b"\r\nRetry-After: 1\r\n" in reply for reply in early.values())
    assert len(replies) == count
    statuses = sorted({reply[:12] for reply in replies.values()})
    assert statuses == [b"HTTP/1.0 400", b"HTTP/1.0 503"], statuses
    assert sum(reply.startswith(b"HTTP/1.0 400") for reply in replies.values()) >= WORKERS
