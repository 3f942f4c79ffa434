"""Precision: ``auto`` | ``bf16`` | ``fp16`` | ``fp32`` resolved for a device, and the matching autocast context."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from bertkit.errors import InputError
from bertkit.options import PRECISIONS  # defined once, with the flag that takes it


def cpu_supports_bf16() -> bool:
    """True where the CPU has native bf16 arithmetic (AVX512-BF16 or AMX), so bf16 autocast is a speed-up."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = f.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_device(name: str | None, cpu_only: bool = False) -> str:
    """``--device``: the name given, else ``cuda`` where a GPU is available, else ``cpu``. ``cpu_only``: what was
    asked for runs on the CPU alone (int8 kernels, ONNX Runtime's CPU provider), so no name means ``cpu``.

    A name that is not a device, or one this machine lacks (``cuda`` on a CPU-only torch, ``cuda:3`` with two GPUs,
    ``mps`` off a Mac), is an ``InputError`` naming ``--device``, before anything is loaded: the one check of every
    ``--device`` flag."""
    if name is not None:  # given, even empty ("--device $DEV" with DEV unset): checked, never taken as auto
        check_device(name)
        return name
    return "cuda" if torch.cuda.is_available() and not cpu_only else "cpu"


def check_device(name: str | torch.device, flag: str = "--device") -> torch.device:
    """``torch.device(name)``, refused in one line naming ``flag`` (the library's loaders: ``device``) when it is not
    one this machine has."""
    if isinstance(name, torch.device):
        device = name
    elif not str(name).strip():
        raise InputError(f"{flag} is empty; use cpu, cuda, cuda:N or mps (or leave it out: cuda when available)")
    else:
        try:
            device = torch.device(name)
        except (RuntimeError, ValueError, TypeError):
            raise InputError(f"{flag} {name}: not a device name; use cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            why = "this torch is built without CUDA" if torch.version.cuda is None else "no GPU is visible"
            raise InputError(f"{flag} {name}: {why}; use {flag} cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise InputError(f"{flag} {name}: only {torch.cuda.device_count()} GPU(s) are visible")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise InputError(f"{flag} {name}: MPS is not available on this machine; use {flag} cpu")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise InputError(f"{flag} {name}: bertkit runs on cpu, cuda or mps")
    elif device.type in ("cpu", "mps") and device.index not in (None, 0):  # torch takes cpu:7 and runs on the CPU
        raise InputError(f"{flag} {name}: there is one {device.type} device; use {flag} {device.type}")
    return device


def resolve_precision(precision: str, device: torch.device | str) -> str:
    """``auto`` -> ``bf16`` where the CPU or GPU supports it (``fp16`` on a GPU without bf16), else ``fp32``.
    Validates the name. ``fp16`` asked for explicitly is honoured on CPU too (torch.amp supports it there, slowly;
    useful to test the loss-scaled path); ``auto`` never picks it on CPU."""
    if precision not in PRECISIONS:
        raise InputError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    device = torch.device(device)
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "bf16" if device.type == "cpu" and cpu_supports_bf16() else "fp32"


@contextlib.contextmanager
def autocast(precision: str, device: torch.device | str) -> Iterator[None]:
    """Autocast for a resolved precision (``bf16``/``fp16``); a no-op for ``fp32``."""
    device = torch.device(device)
    if precision == "fp32":
        yield
        return
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    with torch.autocast(device_type=device.type, dtype=dtype):
        yield


def grad_scaler(precision: str, device: torch.device | str) -> torch.amp.GradScaler:
    """A loss scaler, enabled for fp16 only: fp16 gradients of small losses underflow to zero without one (bf16 has
    fp32's exponent range and needs none). A disabled scaler passes ``scale``/``step``/``update`` straight through, and
    its ``state_dict()`` is empty."""
    device = torch.device(device)
    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")
