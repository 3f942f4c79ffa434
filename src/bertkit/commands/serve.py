"""``bertkit serve``: the HTTP embedding service (FastAPI + uvicorn) with dynamic batching.

    bertkit serve --model runs/my-bert                       # http://127.0.0.1:8000
    bertkit serve --model runs/my-bert --port 9000 --api-key secret --layers -1 --pooling cls
"""

from __future__ import annotations

import argparse
import os
import re
import sys


def configure(parser: argparse.ArgumentParser) -> None:
    # let "--layers -1,-2,-3,-4" parse: argparse otherwise takes "-1,-2,..." for an option
    parser._negative_number_matcher = re.compile(r"^-\d+(,\s*-?\d+)*$|^-\d*\.\d+$")
    parser.add_argument("--model", required=True, help="model directory: config.json, weights, vocab.txt")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key", default=os.environ.get("BERTKIT_API_KEY"),
                        help="require this key (Authorization: Bearer KEY or X-API-Key); default $BERTKIT_API_KEY")
    parser.add_argument("--layers", default=None, help="default layer(s) for /embed, /v1/embeddings, /encode "
                        "(comma-separated, concatenated; default: the model's saved setting, else -2)")
    parser.add_argument("--pooling", default=None, help="default pooling (mean, max, mean_max, cls, cls_pooled, "
                        "first, last/sep); default: the model's saved pooling, else mean")
    parser.add_argument("--model-id", default=None, help="name reported by /info and /v1/embeddings")
    parser.add_argument("--precision", default="auto", choices=["auto", "bf16", "fp16", "fp32"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--max-length", type=int, default=None, help="tokens per input, specials included "
                        "(default: the model's max_seq_length, else 512)")
    parser.add_argument("--auto-truncate", action="store_true",
                        help="truncate over-long inputs on /embed and /v1/embeddings instead of answering 413")
    parser.add_argument("--max-inputs", type=int, default=256, help="inputs per request (more: 422)")
    parser.add_argument("--max-input-chars", type=int, default=50_000, help="characters per input (more: 413)")
    parser.add_argument("--max-payload-bytes", type=int, default=4 * 1024 * 1024, help="request body size (413)")
    parser.add_argument("--max-batch-tokens", type=int, default=8192, help="padded tokens per forward pass")
    parser.add_argument("--max-batch-size", type=int, default=128, help="inputs per forward pass")
    parser.add_argument("--max-wait-ms", type=float, default=2.0, help="linger for more inputs before a batch")
    parser.add_argument("--max-pending", type=int, default=20_000, help="queued inputs beyond which requests get 503")
    parser.add_argument("--request-timeout", type=float, default=60.0, help="seconds a request may wait (then 503)")
    parser.add_argument("--log-level", default="info")


def run(args: argparse.Namespace) -> int:
    import torch
    import uvicorn

    from bertkit.features import Encoder
    from bertkit.serve.app import ServeSettings, create_app, parse_layers

    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        encoder = Encoder.from_pretrained(args.model, device=args.device, precision=args.precision)
        settings = ServeSettings(
            model_id=args.model_id or os.path.basename(os.path.normpath(args.model)),
            layers=parse_layers(args.layers) if args.layers else list(encoder.defaults.layers),
            pooling=args.pooling or encoder.defaults.pooling, max_length=args.max_length or encoder.defaults.max_length,
            auto_truncate=args.auto_truncate, max_inputs=args.max_inputs, max_input_chars=args.max_input_chars,
            max_payload_bytes=args.max_payload_bytes, max_batch_tokens=args.max_batch_tokens,
            max_batch_size=args.max_batch_size, max_wait_ms=args.max_wait_ms, max_pending=args.max_pending,
            request_timeout_s=args.request_timeout, api_key=args.api_key or None,
        )
        app = create_app(encoder, settings)
    except (OSError, ValueError, TypeError) as exc:
        print(f"bertkit serve: {exc}", file=sys.stderr)
        return 2
    if args.host not in ("127.0.0.1", "localhost", "::1") and not settings.api_key:
        print(f"bertkit serve: warning: listening on {args.host} without --api-key", file=sys.stderr)
    print(f"bertkit serve: {args.model} ({encoder.num_layers} layers, hidden {encoder.hidden_size}, "
          f"{encoder.precision}) on http://{args.host}:{args.port}", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, timeout_graceful_shutdown=10)
    return 0
