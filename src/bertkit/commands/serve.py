"""``bertkit serve``: the HTTP embedding service (FastAPI + uvicorn; docs/serving.md) with dynamic batching.

    bertkit serve --model runs/my-bert                       # http://127.0.0.1:8000
    bertkit serve --model runs/my-bert --port 9000 --api-key secret --layers -1 --pooling cls
    bertkit serve --model base=runs/my-bert --model sst2=runs/sst2     # several models: ?model=NAME picks one

Every limit is a flag (``bertkit serve -h``); docs/serving.md lists the routes and docs/serving.md#limits what each
refusal means.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

from bertkit.errors import BertkitError, InputError, RunError
from bertkit.features import Encoder
from bertkit.modeldir import ModelDir
from bertkit.options import (
    backend_option,
    device_option,
    narrow,
    option,
    precision_option,
    quantize_option,
    threads_option,
)
from bertkit.pipelines import NoHeadError, load_pipeline
from bertkit.precision import resolve_device
from bertkit.serve.app import ServeSettings, create_app  # its flags are ServeSettings': FastAPI and torch at -h too
from bertkit.serve.http.server import bind_socket, settings_limits, uvicorn_config


def _api_key(text: str) -> str:
    """``--api-key``: an empty key (``--api-key "$KEY"`` with KEY unset) would turn authentication off in silence."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "is empty: an empty key would turn authentication off; leave --api-key out to serve without a key"
        )
    return text


def _host(text: str) -> str:
    """``--host``: an empty one (``--host "$HOST"`` with HOST unset) would listen on every interface."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: it would listen on every interface; give 0.0.0.0 to mean that")
    return text


def _env_api_key() -> str | None:
    return os.environ.get("BERTKIT_API_KEY") or None  # an empty variable: no key, as if unset


@dataclass(frozen=True, kw_only=True)
class ServeConfig(ServeSettings):
    """What ``bertkit serve`` serves, where, and how: its own flags and the server's settings (``ServeSettings``)."""

    model: list[str] = option(
        required=True,
        repeat=True,
        metavar="[NAME=]DIR",
        default_factory=list,
        help="model directory (config.json, weights, vocab.txt); repeat as NAME=DIR to serve several "
        "(the first is the default; ?model=NAME or OpenAI's 'model' field picks one)",
    )
    host: str = option("127.0.0.1", parse=_host, help="address to bind (127.0.0.1: this machine only)")
    port: int = option(8000, help="port to listen on")
    api_key: str | None = option(
        default_factory=_env_api_key,
        parse=_api_key,
        repr=False,
        help="require this key (Authorization: Bearer KEY or X-API-Key); default $BERTKIT_API_KEY",
    )
    quantize: str | None = quantize_option(
        "dynamic int8 Linear layers (CPU; see bertkit.quantize): faster, within ~1%% of fp32"
    )
    backend: str = backend_option(
        "onnx: ONNX Runtime (CPU; fp32, int8 with --quantize) on DIR/model.onnx (model.int8.onnx) and "
        "DIR/encoder.onnx, exported from the weights when absent; see docs/inference.md"
    )
    log_level: str = option(
        "info", choices=("critical", "error", "warning", "info", "debug", "trace"), help="the server's log level"
    )
    device: str | None = device_option()  # default: cuda when available; cpu for int8 / onnx
    precision: str = precision_option()
    threads: int | None = threads_option(group=None)


CONFIG = ServeConfig


def run(cfg: ServeConfig) -> int:
    import torch
    import uvicorn

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    raise_fd_limit()
    specs = parse_model_specs(cfg.model, cfg.model_id)
    settings = narrow(cfg, ServeSettings, api_key=cfg.api_key or None, model_id=next(iter(specs)))
    device = resolve_device(cfg.device, cpu_only=cfg.quantize is not None or cfg.backend == "onnx")
    models = {}
    for name, directory in specs.items():
        try:
            models[name] = load_model(directory, device, cfg.precision, cfg.quantize, cfg.backend)
        except InputError as exc:  # the loader names the file; say which flag gave it
            raise InputError(f"--model: {exc}") from None
        except BertkitError:
            raise
        except (OSError, ValueError, TypeError, KeyError, RuntimeError) as exc:
            raise InputError(f"--model {directory}: {exc}") from None
    try:
        app = create_app(models, settings)
    except (ValueError, TypeError) as exc:
        raise InputError(str(exc)) from None
    try:
        sock = bind_socket(cfg.host, cfg.port)
    except OSError as exc:
        raise RunError(f"cannot listen on {cfg.host}:{cfg.port}: {exc.strerror or exc}") from None
    if cfg.host not in ("127.0.0.1", "localhost", "::1") and not settings.api_key:
        print(f"bertkit serve: warning: listening on {cfg.host} without --api-key", file=sys.stderr)
    for name, svc in app.state.services.items():
        enc = svc.encoder
        print(
            f"bertkit serve: {name} = {specs[name]} ({enc.num_layers} layers, hidden {enc.hidden_size}, "
            f"{enc.precision}{', ' + svc.pipeline.kind if svc.pipeline is not None else ''})",
            file=sys.stderr,
        )
    print(f"bertkit serve: on http://{cfg.host}:{cfg.port}", file=sys.stderr)
    config = uvicorn_config(app, log_level=cfg.log_level, timeout_graceful_shutdown=10, **settings_limits(settings))
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def parse_model_specs(values: list[str], model_id: str | None = None) -> dict[str, str]:
    """``--model`` values -> {name: directory}: ``NAME=DIR``, or ``DIR`` named by ``--model-id`` (one model) or by
    the directory's base name. Names must be unique."""
    out: dict[str, str] = {}
    for value in values:
        name, sep, directory = value.partition("=")
        if not sep or os.path.isdir(value) or not name or "/" in name:
            name, directory = "", value
        if not directory.strip():  # "--model ''" or "--model NAME=": no directory (it was read as '.')
            raise InputError(f"--model {value!r}: names no model directory")
        if not name:
            name = model_id if model_id and len(values) == 1 else os.path.basename(os.path.normpath(directory))
        if name in out:
            raise InputError(
                f"--model {value}: the name '{name}' is already taken by --model {out[name]} "
                "(name them: --model NAME=DIR)"
            )
        out[name] = directory
    return out


def load_model(directory: str, device: str, precision: str, quantize: str | None = None, backend: str = "torch"):
    """What ``--model DIR`` serves: the task pipeline when ``config.json`` names a fine-tuned head (its
    ``.encoder()`` also serves the encoder routes), else the directory's encoder; ``backend`` "torch" or "onnx".
    The directory is opened once (:class:`bertkit.modeldir.ModelDir`): either loader reads it from there."""
    if os.path.isdir(directory):
        directory = ModelDir.open(directory)
    try:
        return load_pipeline(directory, device=device, precision=precision, quantize=quantize, backend=backend)
    except NoHeadError:
        return Encoder.from_pretrained(
            directory, device=device, precision=precision, quantize=quantize, backend=backend
        )


def raise_fd_limit() -> None:
    """Raise the open-file limit to its hard maximum: each connection holds a descriptor."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass
