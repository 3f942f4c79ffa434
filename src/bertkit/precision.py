"""Precision: ``auto`` | ``bf16`` | ``fp16`` | ``fp32`` resolved for a device, and the matching autocast context."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

from bertkit.errors import InputError
from bertkit.options import PRECISIONS  # defined once, with the flag that takes it

# oneDNN's ISA caps (``ONEDNN_MAX_CPU_ISA``) below AVX512_CORE_BF16: under one of them oneDNN has no bf16 dot
# products, and a bf16 matrix product runs about 150x slower than fp32 (measured on a Zen 4 EPYC capped to AVX2).
ISA_CAPS_WITHOUT_BF16 = frozenset(
    "SSE41 AVX AVX2 AVX2_VNNI AVX2_VNNI_2 AVX512_CORE AVX512_CORE_VNNI AVX512_MIC AVX512_MIC_4OPS".split()
)


def cpu_flags() -> set[str]:
    """This CPU's instruction-set flags (``/proc/cpuinfo``'s first ``flags`` line); empty where it cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_supports_bf16(flags: set[str] | None = None, isa_cap: str | None = None) -> bool:
    """True where the CPU has native bf16 arithmetic (AVX512-BF16 or AMX), so bf16 autocast is a speed-up: its
    ``flags`` (default :func:`cpu_flags`) name ``avx512_bf16`` or ``amx_bf16`` and oneDNN is not capped below them
    (``isa_cap``, default ``$ONEDNN_MAX_CPU_ISA``, as a container or a user pins an older ISA)."""
    if isa_cap is None:
        isa_cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "")
    if isa_cap.strip().upper() in ISA_CAPS_WITHOUT_BF16:
        return False
    return bool((cpu_flags() if flags is None else flags) & {"avx512_bf16", "amx_bf16"})


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


def uses_master_weights(precision: str, device: torch.device | str) -> bool:
    """True where ``precision`` trains a pure-bf16 model over fp32 master weights (:class:`MasterWeights`): bf16
    on a CPU. There autocast's per-step casts of every weight (and of its gradient back) cost more than the bf16
    units save; a bf16 model computes without them. GPUs keep autocast over fp32 weights."""
    return precision == "bf16" and torch.device(device).type == "cpu"


class MasterWeights:
    """A pure-bf16 model with fp32 master weights: the model's parameters are cast to bf16 (the weights it computes
    with; its buffers stay as they are), and fp32 copies of them, taken before the cast, are what the optimizer
    steps. Per optimizer step: :meth:`grads_to_masters` (the bf16 gradients as the masters' fp32 gradients),
    the optimizer's step on the masters, :meth:`masters_to_model` (the masters rounded into the model).

        masters = MasterWeights(model)          # model now bf16; masters.params fp32
        optimizer = build_optimizer(model)      # groups and options as for any model ...
        masters.adopt(optimizer)                # ... stepping the masters in place of the model's parameters

    What a checkpoint and the saved model hold are the masters (:meth:`state_dict`, :meth:`restore`), so a resumed
    run continues from the same fp32 numbers and the saved model loads as any fp32 one."""

    dtype = torch.bfloat16

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.names: dict[int, str] = {}
        self.pairs: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
        for name, param in model.named_parameters():  # tied parameters once
            if id(param) in self.names:
                continue
            self.names[id(param)] = name
            self.pairs.append((param, param.detach().float().clone()))
        with torch.no_grad():
            for param, _ in self.pairs:
                param.data = param.data.to(self.dtype)
        self._master = {id(p): m for p, m in self.pairs}
        self._grads: list[torch.Tensor | None] = [None] * len(self.pairs)  # the masters' gradient buffers

    @property
    def params(self) -> list[torch.Tensor]:
        """The fp32 masters of the parameters that train (what the optimizer steps and the clipping measures)."""
        return [m for p, m in self.pairs if p.requires_grad]

    def adopt(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """``optimizer`` (built over the model, with no step taken yet) stepping the masters in its groups' places."""
        if optimizer.state:
            raise ValueError("MasterWeights.adopt needs an optimizer that has not stepped yet")
        for group in optimizer.param_groups:
            group["params"] = [self._master.get(id(p), p) for p in group["params"]]
        return optimizer

    def grads_to_masters(self) -> None:
        """Each bf16 gradient as its master's fp32 gradient (None where the parameter got none), in fp32 buffers
        kept from step to step (a fresh [30522, H] allocation per step costs its page faults)."""
        for i, (param, master) in enumerate(self.pairs):
            if param.grad is None:
                master.grad = None
                continue
            if self._grads[i] is None:
                self._grads[i] = torch.empty_like(master)
            master.grad = self._grads[i].copy_(param.grad)

    @torch.no_grad()
    def masters_to_model(self) -> None:
        """The masters, rounded to bf16, into the model's parameters; the model's gradients cleared."""
        for param, master in self.pairs:
            param.copy_(master)
            param.grad = None

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The model's state dict with the fp32 masters in place of its bf16 parameters (what a checkpoint holds)."""
        state = self.model.state_dict()
        for name, tensor in list(state.items()):
            if tensor.dtype == self.dtype:
                state[name] = tensor.float()
        for name, param in self.model.named_parameters(remove_duplicate=False):  # tied: under each of its names
            if id(param) in self._master:
                state[name] = self._master[id(param)].detach().clone()
        return state

    @torch.no_grad()
    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """A checkpoint's weights (fp32) as the masters, and rounded into the model."""
        self.model.load_state_dict(state)  # rounded into the bf16 parameters
        for param, master in self.pairs:
            master.copy_(state[self.names[id(param)]])

    @torch.no_grad()
    def restore(self) -> torch.nn.Module:
        """The model back in fp32 holding the masters exactly (to save it, or to go on in fp32); returns it."""
        for param, master in self.pairs:
            param.data = master.detach().clone()
        return self.model
