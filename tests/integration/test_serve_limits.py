"""Hostile and careless clients against a real `bertkit serve` subprocess: slow headers and bodies, idle connections,
huge answers, deep JSON. Throughout, a concurrent /health must answer within a second, each refusal is one log line
and no traceback reaches the log."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from tinymodels import make_model_dir

WORDS = "the a cat dog sat on mat bank river money went to i we big small red blue hello world".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
HEALTH_LIMIT = 1.0  # seconds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`bertkit serve` in a subprocess, its log in a file."""

    def __init__(self, model_dir: Path, log: Path, *flags: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        cmd = [
            str(Path(sys.executable).with_name("bertkit")),
            "serve",
            "--model",
            str(model_dir),
            "--port",
            str(self.port),
            "--threads",
            "1",
            "--precision",
            "fp32",
            "--log-level",
            "warning",
            *flags,
        ]
        self.log = open(log, "w")
        self.proc = subprocess.Popen(
            cmd, stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, "BERTKIT_API_KEY": ""}
        )
        deadline = time.monotonic() + 90
        while True:
            assert self.proc.poll() is None, log.read_text()
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "server did not come up within 90 s"
                time.sleep(0.2)

    def stop(self) -> str:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        return self.log_path.read_text()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("limits-model"), VOCAB, max_position_embeddings=512)


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    srv = Server(
        model_dir,
        tmp_path_factory.mktemp("log") / "serve.log",
        "--header-timeout",
        "1",
        "--body-timeout",
        "1.5",
        "--keep-alive-timeout",
        "2",
        "--max-inputs",
        "256",
        "--max-output-values",
        "2000000",
    )
    yield srv
    log = srv.stop()
    assert "Traceback" not in log, log[-3000:]


class HealthWatch:
    """Polls /health on fresh connections while a test runs; records every latency (and failures)."""

    def __init__(self, url: str):
        self.url, self.latencies, self.failures = url, [], []
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop_flag.is_set():
            start = time.monotonic()
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=10) as r:
                    r.read()
                    ok = r.status == 200
            except OSError as exc:
                ok = False
                self.failures.append(repr(exc))
            self.latencies.append(time.monotonic() - start)
            if not ok and not self.failures:
                self.failures.append("not 200")
            time.sleep(0.05)

    def __enter__(self) -> HealthWatch:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_flag.set()
        self.thread.join(15)
        assert self.latencies, "no /health call completed"
        assert self.failures == []
        assert max(self.latencies) < HEALTH_LIMIT, f"/health took {max(self.latencies):.2f} s"


def post(url: str, path: str, body: dict, timeout: float = 120) -> tuple[int, object]:
    req = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_slow_headers_are_cut_and_health_answers(server):
    """Clients that connect and send nothing, or half a request line, or headers without their end, are closed
    after --header-timeout, each with one log line; /health answers within a second meanwhile."""
    host, port = "127.0.0.1", server.port
    partial = [b"", b"POST /embed HTTP/1.1\r\n", b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: 1"]
    socks = []
    with HealthWatch(server.url):
        for k in range(30):
            s = socket.create_connection((host, port), timeout=10)
            if partial[k % 3]:
                s.sendall(partial[k % 3])
            socks.append(s)
        start = time.monotonic()
        closed = 0
        for s in socks:
            s.settimeout(10)
            try:
                closed += s.recv(1024) == b""  # the server closed it
            except OSError:
                closed += 1
        waited = time.monotonic() - start
    for s in socks:
        s.close()
    assert closed == 30
    assert waited < 8  # closed by the header timeout (1 s), not by anything slower
    time.sleep(0.3)
    log = server.log_path.read_text()
    assert log.count("no complete request headers within 1.0 s") >= 30


def test_declared_body_never_sent_gets_408_and_is_closed(server):
    """Content-Length: 3 MB with a short body: 408 after --body-timeout, connection closed, one log line."""
    with HealthWatch(server.url):
        s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        s.sendall(
            b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 3000000\r\n\r\n{"inputs": "the cat'
        )
        start = time.monotonic()
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        waited = time.monotonic() - start
    assert data.startswith(b"HTTP/1.1 408"), data[:200]
    assert b"not received within 1.5 s" in data
    assert waited < 8
    assert "body not received within 1.5 s" in server.log_path.read_text()


def test_big_outputs_are_bounded_before_computing(server):
    """Answers past --max-output-values / --max-predictions / --max-request-tokens are refused (422 naming the
    limit) before any compute: fast."""
    long = " ".join(WORDS * 30)  # > 512 tokens: truncated to 512
    cases = [
        (
            "/encode",
            {"texts": [long] * 256, "pooling_strategy": "NONE", "pooling_layer": [-1, -2, -3, 0]},
            "--max-output-values",
        ),
        ("/embed_all", {"inputs": [long] * 256, "truncate": True}, "--max-output-values"),
        ("/fill-mask", {"inputs": ["the [MASK] " * 500] * 64, "top_k": 100}, "--max-predictions"),
        ("/tokenize", {"inputs": ["a b c " * 8000] * 14}, "--max-request-tokens"),
    ]
    with HealthWatch(server.url):
        for path, body, flag in cases:
            start = time.monotonic()
            status, out = post(server.url, path, body)
            assert status == 422, (path, out)
            assert flag in out["error"] and out["error_type"] == "Validation"
            if path != "/tokenize":  # tokenizing is how the count is known; the others refuse before any work
                assert time.monotonic() - start < 5


def test_largest_allowed_answer_leaves_health_responsive(server):
    """A token-level answer just under the limit (~2M numbers, tens of MB of JSON) is built and serialised off
    the event loop: /health keeps answering within a second."""
    long = " ".join(WORDS * 30)
    body = {"texts": [long] * 30, "pooling_strategy": "NONE", "pooling_layer": [-1, -2, -3, 0]}
    req = urllib.request.Request(
        server.url + "/encode", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with HealthWatch(server.url) as watch:
        with urllib.request.urlopen(req, timeout=300) as r:
            status, raw = r.status, r.read()
    out = json.loads(raw)  # parsed after the watch: tens of MB of JSON would hold this process's GIL
    assert status == 200, out
    assert out["shape"][0] == [512, 128] and len(out["embeddings"]) == 30 and len(out["embeddings"][29]) == 512
    assert len(watch.latencies) > 5  # health really was polled while it ran


def test_deep_json_and_huge_integers_get_422_on_a_kept_connection(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        bodies = [
            b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            b'{"inputs": "the cat", "dimensions": ' + b"7" * 5000 + b"}",
            b'{"inputs": "the cat", "truncate": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        ]
        for body in bodies:
            conn.request("POST", "/embed", body=body, headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            out = json.loads(r.read())
            assert r.status == 422 and out["error_type"] == "Validation", out
            assert r.getheader("connection", "").lower() != "close"
        sock = conn.sock
        conn.request(
            "POST", "/embed", body=json.dumps({"inputs": "the cat"}), headers={"Content-Type": "application/json"}
        )
        r = conn.getresponse()
        assert r.status == 200 and len(json.loads(r.read())[0]) == 32
        assert conn.sock is sock  # the same keep-alive connection served all four
    finally:
        conn.close()


def test_idle_connections_do_not_count_and_health_is_never_refused(model_dir, tmp_path):
    """600 connections that send nothing count against no limit: /health (GET and HEAD) answers 200 within a second
    and a real request is served. Requests in flight past --limit-concurrency get 503 with one log line each,
    while /health still answers."""
    srv = Server(
        model_dir, tmp_path / "serve.log", "--limit-concurrency", "3", "--header-timeout", "20", "--body-timeout", "20"
    )
    idle, slow = [], []
    try:
        idle = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(600)]
        time.sleep(0.5)
        for method in ("GET", "HEAD"):
            start = time.monotonic()
            with urllib.request.urlopen(urllib.request.Request(srv.url + "/health", method=method), timeout=10) as r:
                assert r.status == 200 and (r.read() == b"") == (method == "HEAD")
            assert time.monotonic() - start < HEALTH_LIMIT
        assert post(srv.url, "/embed", {"inputs": "the cat"})[0] == 200  # the idle 600 hold no slot
        for _ in range(3):  # three requests in flight: each waits for the rest of its body
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            s.sendall(
                b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
            )
            slow.append(s)
        time.sleep(0.5)
        status, out = post(srv.url, "/embed", {"inputs": "the cat"})
        assert status == 503 and "--limit-concurrency" in out["error"]
        start = time.monotonic()
        with urllib.request.urlopen(srv.url + "/health", timeout=10) as r:
            assert r.status == 200 and time.monotonic() - start < HEALTH_LIMIT  # probes are never refused
        for s in slow:
            s.close()
        slow = []
        time.sleep(0.5)
        assert post(srv.url, "/embed", {"inputs": "the cat"})[0] == 200  # served again once they are gone
    finally:
        for s in idle + slow:
            s.close()
        log = srv.stop()
    assert log.count("Exceeded concurrency limit.") == 1
    assert "Traceback" not in log


def test_startup_errors_are_one_line(model_dir, tmp_path, capsys):
    """A missing model and an unknown pooling are refused before the server starts: in-process through
    ``bertkit.cli.main`` (what the ``bertkit`` script calls); a port already taken, found only when the server
    starts, through a real ``bertkit serve`` process."""
    from bertkit.cli import main

    assert main(["serve", "--model", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err and last.startswith("bertkit serve: error: ") and "nope" in last
    assert main(["serve", "--model", str(model_dir), "--pooling", "AVERAGE"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "unknown pooling" in err
    bertkit = str(Path(sys.executable).with_name("bertkit"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        r = subprocess.run(
            [bertkit, "serve", "--model", str(model_dir), "--port", str(taken.getsockname()[1])],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert r.returncode == 1 and "Traceback" not in r.stderr and "cannot listen on 127.0.0.1" in r.stderr
