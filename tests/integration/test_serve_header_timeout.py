"""Why bertkit keeps its own uvicorn protocol class (``bertkit.serve.http.server.TimedH11Protocol``): uvicorn's own
settings leave a connection that never sends its request headers open. ``timeout_keep_alive`` starts only after a
response, ``limit_concurrency`` refuses requests rather than closing idle sockets (and counts them: /health would
answer 503), and ``h11_max_incomplete_event_size`` bounds a partial header's bytes, not its time. If this test fails,
uvicorn has learnt to close such connections: drop the subclass and use that setting. That bertkit's class does close
them (with one log line each, within ``--header-timeout``) is tests/integration/test_serve_limits.py's
``test_slow_headers_are_cut_and_health_answers``."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn

from bertkit.serve.http.server import bind_socket

WAIT = 2.5  # seconds: well past every timeout set below (1 s)


async def ok_app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def test_uvicorns_own_settings_leave_a_silent_connection_open():
    sock = bind_socket("127.0.0.1", 0)
    config = uvicorn.Config(
        ok_app,
        http="h11",
        lifespan="off",
        timeout_keep_alive=1,
        limit_concurrency=1000,
        h11_max_incomplete_event_size=1024,
        log_level="warning",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        port = sock.getsockname()[1]
        silent = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        partial = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        partial.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # half a request: no blank line
        time.sleep(WAIT)
        for s in (silent, partial):
            s.settimeout(0.2)
            try:
                data = s.recv(1024)
            except TimeoutError:
                data = None  # nothing came and the connection is still open
            assert data is None, f"uvicorn closed or answered it ({data!r}): TimedH11Protocol may have become needless"
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as s:  # the server itself is fine
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(1024).startswith(b"HTTP/1.1 200")
        silent.close()
        partial.close()
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()
