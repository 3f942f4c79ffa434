"""Running the app under uvicorn with limits on slow and idle clients.

uvicorn's h11 protocol has a keep-alive timeout (idle between requests) and a concurrency limit (503 past it) but no
limit on how long a client may take to send its request headers: a client that connects and sends nothing, or half
a header, holds a connection (and a file descriptor) forever; ``h11_max_incomplete_event_size`` bounds the bytes, not
the time (tests/integration/test_serve_header_timeout.py shows it). :class:`TimedH11Protocol` closes such a
connection after ``header_timeout`` seconds, with one log line. The body has its own timeout in the app
(:class:`bertkit.serve.http.routing.BoundedRequest`). Accept errors (out of file descriptors) are logged as one
line, not a traceback per attempt.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from bertkit.serve.http.errors import Dialect

logger = logging.getLogger("bertkit.serve")
DRAIN_SECONDS = 1.0  # how long a connection answered 400 for a malformed request may still send before it is closed
MALFORMED = (
    "a request line or headers that do not parse as HTTP/1.1, hold raw non-ASCII bytes, or exceed the size limit"
)


class TimedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol plus a deadline for each request's headers (from the connection, or from the end of
    the previous response, whichever is later). Set ``header_timeout`` on a subclass (see :func:`uvicorn_config`)."""

    header_timeout: float = 10.0

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer = self.loop.call_later(self.header_timeout, self._header_timeout_expired)

    def data_received(self, data: bytes) -> None:
        if getattr(self, "_discarding", False):  # after a malformed request's 400 (send_400_response)
            return
        super().data_received(data)
        waiting_for_headers = self.conn.their_state is h11.IDLE and not self.transport.is_closing()
        if not waiting_for_headers:
            self._cancel_header_timer()
        elif self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout, self._header_timeout_expired)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._cancel_header_timer()  # an idle keep-alive connection is the keep-alive timer's business

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def _cancel_header_timer(self) -> None:
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
            self._header_timer = None

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request h11 cannot parse (headers past ``h11_max_incomplete_event_size``, raw
        non-ASCII bytes in the target, a broken request line): a 400 in the JSON shape every other refusal has (TEI's,
        the default dialect), not uvicorn's plain text; then the connection closes, as uvicorn's does."""
        body = json.dumps(Dialect().error_body(400, f"malformed HTTP request: {MALFORMED}", "Validation", None)).encode(
            "utf-8"
        )
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode("ascii")),
            (b"connection", b"close"),
        ]
        try:
            for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"), h11.Data(data=body)):
                self.transport.write(self.conn.send(event))
            self.transport.write(self.conn.send(h11.EndOfMessage()))
        except h11.LocalProtocolError:  # a response had already begun: nothing more can be said on this connection
            pass
        # closing with the rest of a 200 KB header unread would reset the connection, and the client lose the answer:
        # end our side, read and drop what is still coming, and close shortly (or when the client does)
        self._discarding = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(DRAIN_SECONDS, self.transport.close)

    def _header_timeout_expired(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "?"
        logger.warning(
            "closed a connection from %s: no complete request headers within %s s (--header-timeout)",
            client,
            self.header_timeout,
        )
        self.transport.close()


class _OneLineAcceptErrors(logging.Filter):
    """asyncio logs a traceback for each failed accept() (e.g. out of file descriptors); keep one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], OSError) and "accept" in str(record.msg):
            record.msg = f"{record.getMessage()}: {record.exc_info[1]}"
            record.args = None
            record.exc_info = None
        return True


def quiet_accept_errors() -> None:
    """Install the one-line filter on asyncio's logger (idempotent)."""
    log = logging.getLogger("asyncio")
    if not any(isinstance(f, _OneLineAcceptErrors) for f in log.filters):
        log.addFilter(_OneLineAcceptErrors())


def uvicorn_config(
    app: Any,
    *,
    header_timeout: float = 10.0,
    keep_alive_timeout: float = 5.0,
    log_level: str = "warning",
    **kwargs: Any,
) -> uvicorn.Config:
    """A uvicorn config with bertkit's connection limits: ``header_timeout`` per request's headers and
    ``keep_alive_timeout`` idle between requests. uvicorn's own ``limit_concurrency`` stays off: it counts every
    open connection, so idle ones would make /health answer 503; the app's :class:`~bertkit.serve.http.guard.Guard`
    limits the requests in flight instead."""
    protocol = type("TimedH11Protocol", (TimedH11Protocol,), {"header_timeout": float(header_timeout)})
    quiet_accept_errors()
    return uvicorn.Config(
        app,
        http=protocol,
        timeout_keep_alive=int(max(1, round(keep_alive_timeout))),
        log_level=log_level,
        lifespan="on",
        **kwargs,
    )


def settings_limits(settings: Any) -> dict[str, Any]:
    """The :func:`uvicorn_config` limits of a :class:`~bertkit.serve.core.service.ServeSettings`."""
    return {"header_timeout": settings.header_timeout_s, "keep_alive_timeout": settings.keep_alive_timeout_s}


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening-ready socket on host:port (OSError if taken), so that a busy port is a one-line error."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


class ServerThread:
    """Run the app under uvicorn in a background thread (tests, notebooks). Binds its own socket (port 0 = a free
    one), so there is no race for the port. Use as a context manager; ``url`` is the base URL. The connection limits
    come from the app's settings (``app.state.settings``) unless given as keyword arguments of
    :func:`uvicorn_config`."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning", **limits: Any):
        self.socket = bind_socket(host, port)
        self.host, self.port = self.socket.getsockname()[:2]
        self.url = f"http://{self.host}:{self.port}"
        settings = getattr(getattr(app, "state", None), "settings", None)
        if settings is not None:
            limits = {**settings_limits(settings), **limits}
        config = uvicorn_config(app, log_level=log_level, timeout_graceful_shutdown=5, **limits)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.socket]}, name="bertkit-uvicorn", daemon=True
        )

    def start(self, timeout: float = 30.0) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start on {self.url} within {timeout} s")
            time.sleep(0.02)
        return self

    def stop(self, timeout: float = 15.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        self.socket.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
