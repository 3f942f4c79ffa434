"""int8 inference on CPU: PyTorch's dynamic quantisation of every ``nn.Linear``.

    model = quantize_model(BertForSequenceClassification.from_pretrained(d), "int8")

Dynamic int8 (``torch.ao.quantization.quantize_dynamic``): each Linear's weight is stored as int8 with one scale per
output channel; at run time each activation matrix is quantised on the fly (one scale per row batch) and the
matmul runs in int8 with int32 accumulation, then goes back to fp32. Embeddings, LayerNorm, softmax and the
attention matmuls stay fp32. Before quantising, each attention's query, key and value Linears are fused into one
(``fuse_qkv``: one int8 GEMM of width 3H and one activation quantisation instead of three). ModernBERT's models
(``bertkit.modeling_modernbert``) quantise the same way; their attention already projects q, k, v with one Linear
(``Wqkv``), and their Linears have no biases.

The int8 kernels (PyTorch's quantized engine) are picked for the CPU (:func:`pick_engine`): ``onednn`` where the CPU
has int8 dot-product instructions (AVX512-VNNI, AVX-VNNI or AMX; about 1.1x faster than fbgemm there, measured on
bert-base), else ``x86`` (fbgemm). ``BERTKIT_INT8_ENGINE=x86|fbgemm|onednn`` overrides the choice; so does
``quantize_model(..., engine=)``. The weights are packed for that engine when the model is quantised.

A quantised model is for inference only: training it or saving it is refused (:func:`check_not_quantized`), since
its weights are no longer the model's.
"""

from __future__ import annotations

import logging
import os
import warnings

import torch
from torch import nn

from bertkit.errors import InputError, RunError
from bertkit.modeling import BertSelfAttention
from bertkit.precision import cpu_flags

log = logging.getLogger(__name__)

QUANTIZATIONS = ("int8",)
ENGINES = ("x86", "fbgemm", "onednn")
ENGINE_VARIABLE = "BERTKIT_INT8_ENGINE"


class QuantizedModelError(InputError):
    """A quantised (inference-only) model was asked to train or to be saved."""


def resolve_quantize(name: str | None) -> str | None:
    """``None`` / ``"none"`` -> None; ``"int8"`` -> ``"int8"``; anything else: InputError listing the choices."""
    if name is None or (isinstance(name, str) and name.lower() in ("", "none", "fp32")):
        return None
    if not isinstance(name, str) or name.lower() not in QUANTIZATIONS:
        raise InputError(f"quantize must be one of {', '.join(QUANTIZATIONS)} (or none), got {name!r}")
    return name.lower()


def is_quantized(model: nn.Module) -> bool:
    return bool(getattr(model, "_bertkit_quantized", None))


def check_not_quantized(model: nn.Module, action: str) -> None:
    """Raise :class:`QuantizedModelError` when ``model`` is int8: it cannot ``action`` (train, save...)."""
    if is_quantized(model):
        raise QuantizedModelError(
            f"cannot {action} a {model._bertkit_quantized}-quantised model: quantisation is for inference only; "
            "load the fp32 model directory instead (without quantize=)"
        )


def _refuse_training(self: nn.Module, mode: bool = True) -> nn.Module:
    if mode:
        check_not_quantized(self, "train")
    return nn.Module.train(self, False)


def _refuse_saving(self: nn.Module, *args, **kwargs) -> None:
    check_not_quantized(self, "save")


def pick_engine(engine: str | None = None) -> str:
    """The quantized engine for int8 Linear layers: ``engine``, else ``$BERTKIT_INT8_ENGINE``, else ``onednn`` on
    a CPU with int8 dot-product instructions (AVX512-VNNI / AVX-VNNI / AMX) and ``x86`` (fbgemm) elsewhere. Falls
    back to what this PyTorch build supports; InputError for an unknown name."""
    supported = torch.backends.quantized.supported_engines
    engine = engine or os.environ.get(ENGINE_VARIABLE) or None
    if engine is not None:
        engine = engine.strip().lower()
        if engine not in ENGINES:
            raise InputError(f"int8 engine must be one of {', '.join(ENGINES)}, got {engine!r}")
        if engine in supported:
            return engine
        log.warning("int8 engine %s is not in this PyTorch build (%s): picking another", engine, supported)
    if "onednn" in supported and cpu_flags() & {"avx512_vnni", "avx_vnni", "amx_int8"}:
        return "onednn"
    for name in ("x86", "fbgemm", "onednn"):
        if name in supported:
            return name
    raise RunError(f"this PyTorch build has no int8 CPU engine (supported: {supported})")


def fuse_qkv(model: nn.Module) -> int:
    """Fuse each attention's query, key and value Linears into one ``qkv`` Linear [3H, H] (in place, for inference:
    the three Linears go; a fused model is quantised, never saved). Returns how many attentions were fused."""

    n = 0
    for module in model.modules():
        if isinstance(module, BertSelfAttention) and module.qkv is None:
            parts = (module.query, module.key, module.value)
            fused = nn.Linear(
                parts[0].in_features,
                sum(p.out_features for p in parts),
                device=parts[0].weight.device,
                dtype=parts[0].weight.dtype,
            )
            with torch.no_grad():
                fused.weight.copy_(torch.cat([p.weight for p in parts]))
                fused.bias.copy_(torch.cat([p.bias for p in parts]))
            fused.requires_grad_(False)
            del module.query, module.key, module.value
            module.qkv = fused
            n += 1
    return n


def quantize_model(
    model: nn.Module, method: str | None = "int8", device: str | torch.device = "cpu", engine: str | None = None
) -> nn.Module:
    """Return ``model`` with q, k, v fused (:func:`fuse_qkv`) and every ``nn.Linear`` replaced by a dynamic int8
    Linear (in place; eval mode; CPU), its weights packed for ``engine`` (default :func:`pick_engine`).

    The result refuses ``.train()`` and ``.save_pretrained()`` with a :class:`QuantizedModelError`. ``method=None``
    returns the model unchanged. The model must be on the CPU, and stay there (``device``): PyTorch's int8 kernels
    are CPU-only.
    """
    method = resolve_quantize(method)
    if method is None:
        return model
    if is_quantized(model):
        return model
    if torch.device(device).type != "cpu" or any(p.device.type != "cpu" for p in model.parameters()):
        raise InputError("quantize='int8' runs on the CPU only (PyTorch's dynamic int8 kernels): use device='cpu'")
    engine = pick_engine(engine)
    torch.backends.quantized.engine = engine  # the weights are packed for it (the packed weights pick the kernels)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    fuse_qkv(model)
    with warnings.catch_warnings():  # torch.ao.quantization warns that it moves to torchao; its kernels stay
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*quantize_per.*deprecated", category=UserWarning)
        qconfig = torch.ao.quantization.per_channel_dynamic_qconfig  # one weight scale per output row: closer
        quantized = torch.ao.quantization.quantize_dynamic(model, {nn.Linear: qconfig}, dtype=torch.qint8, inplace=True)
    # per-instance guards: Module.train / save_pretrained are looked up on the instance first
    quantized._bertkit_quantized = method
    quantized._bertkit_int8_engine = engine
    quantized.train = _refuse_training.__get__(quantized)
    quantized.save_pretrained = _refuse_saving.__get__(quantized)
    n = sum(1 for m in quantized.modules() if type(m).__name__ == "Linear" and "quantized" in type(m).__module__)
    log.info("quantised %d Linear layers to dynamic int8 (engine %s)", n, engine)
    return quantized
