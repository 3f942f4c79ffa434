"""BertClient without the model stack: import hygiene (subprocess), payloads, decoding, chunking, errors.

The client talks to a stdlib ``http.server`` fake here; tests/integration/test_serve.py runs it against the real
server."""

from __future__ import annotations

import base64
import json
import re
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from bertkit.serve.client import BertClient, BertClientError


def test_client_imports_neither_torch_nor_the_server_stack():
    code = (
        "import sys\n"
        "from bertkit import BertClient\n"
        "import bertkit.serve.client\n"
        "BertClient('http://127.0.0.1:1')\n"
        "heavy = [m for m in ('torch', 'fastapi', 'uvicorn', 'starlette', 'pydantic', 'transformers', 'tokenizers')"
        " if m in sys.modules]\n"
        "print(','.join(heavy) or 'clean')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "clean"


class FakeServer:
    """Answers /info and /encode like bertkit serve (vector i = [i, i, i, i] by position in the request)."""

    def __init__(self, status: int = 200, error: object = None):
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def reply(self, code, obj):
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path == "/info":
                    self.reply(200, {"max_client_batch_size": 2, "embedding_dim": 4})
                else:
                    self.reply(200, {"status": "ok"})

            def do_POST(self):
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(
                    {"path": self.path, "payload": payload, "auth": self.headers.get("Authorization")}
                )
                if status != 200:
                    return self.reply(status, error)
                texts = payload["texts"]
                strategy = payload.get("pooling_strategy") or "mean"
                if strategy == "none":
                    arrs = [np.full((len(t.split()) + 2, 4), i, "<f4") for i, t in enumerate(texts)]
                    return self.reply(
                        200,
                        {
                            "pooling_strategy": "none",
                            "shape": [list(a.shape) for a in arrs],
                            "embeddings": [base64.b64encode(a.tobytes()).decode() for a in arrs],
                            "tokens": [["[CLS]", *t.split(), "[SEP]"] for t in texts],
                        },
                    )
                arr = np.stack([np.full(4, float(len(outer.requests) * 10 + i), "<f4") for i in range(len(texts))])
                self.reply(
                    200,
                    {
                        "pooling_strategy": strategy,
                        "shape": list(arr.shape),
                        "embeddings": base64.b64encode(arr.tobytes()).decode(),
                        "tokens": [["[CLS]", *t.split(), "[SEP]"] for t in texts],
                    },
                )

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_encode_chunks_by_server_batch_size_and_keeps_order():
    with FakeServer() as fake:
        bc = BertClient(fake.url, api_key="k", timeout=10)
        vecs, tokens = bc.encode(
            ["a", "b c", "d", "e f g", "h"],
            show_tokens=True,
            pooling_layer=[-1, -2],
            pooling_strategy="REDUCE_MAX",
            normalize=True,
        )
    assert [len(r["payload"]["texts"]) for r in fake.requests] == [2, 2, 1]  # max_client_batch_size from /info
    assert vecs.shape == (5, 4) and vecs.dtype == np.float32
    np.testing.assert_array_equal(vecs[:, 0], [10, 11, 20, 21, 30])  # request k row i -> 10k + i, in order
    assert tokens[3] == ["[CLS]", "e", "f", "g", "[SEP]"]
    first = fake.requests[0]
    assert first["auth"] == "Bearer k"
    assert first["payload"]["pooling_layer"] == [-1, -2] and first["payload"]["pooling_strategy"] == "REDUCE_MAX"
    assert first["payload"]["normalize"] is True and first["payload"]["encoding_format"] == "base64"


def test_per_token_vectors_and_empty_input():
    with FakeServer() as fake:
        bc = BertClient(fake.url, timeout=10, batch_size=10)
        vecs = bc.encode(["a b", "c"], pooling_strategy="none")
        assert [v.shape for v in vecs] == [(4, 4), (3, 4)]
        np.testing.assert_array_equal(vecs[1], np.ones((3, 4)))
        sent = len(fake.requests)
        empty = bc.encode([])
        assert empty.shape == (0, 4) and len(fake.requests) == sent  # nothing to send, the width from /info


@pytest.mark.parametrize(
    "error,expected",
    [
        ({"error": "'texts[0]' is empty", "error_type": "Validation"}, "'texts[0]' is empty"),
        ({"error": {"message": "bad key", "type": "authentication_error"}}, "bad key"),
    ],
)
def test_server_errors_carry_status_and_message(error, expected):
    with FakeServer(status=422, error=error) as fake:
        with pytest.raises(BertClientError, match=re.escape(expected)) as info:
            BertClient(fake.url, timeout=10, batch_size=4).encode(["x"])
    assert info.value.status == 422


def test_unreachable_server_is_a_clear_error_not_a_hang():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    bc = BertClient(f"http://127.0.0.1:{port}", timeout=5, batch_size=4)
    with pytest.raises(BertClientError, match="cannot reach") as info:
        bc.encode(["x"])
    assert info.value.status is None
    assert bc.health() is False


def test_bad_arguments():
    with pytest.raises(ValueError, match="http"):
        BertClient("localhost:8000")
    bc = BertClient("http://127.0.0.1:1", batch_size=4)
    with pytest.raises(TypeError, match="list of strings"):
        bc.encode("a bare string")
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        bc.encode(["a", None])
    with pytest.raises(ValueError, match="pairs"):
        bc.encode(["a", "b"], pairs=["c"])
