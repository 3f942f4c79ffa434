"""int8 inference on CPU: PyTorch's dynamic quantisation of every ``nn.Linear``.

    model = quantize_model(BertForSequenceClassification.from_pretrained(d), "int8")

Dynamic int8 (``torch.ao.quantization.quantize_dynamic``): each Linear's weight is stored as int8 with one scale per
output channel; at run time each activation matrix is quantised on the fly (one scale per row batch) and the
matmul runs in int8 with int32 accumulation (fbgemm: AVX2 / AVX512-VNNI kernels), then goes back to fp32.
Embeddings, LayerNorm, softmax and the attention matmuls stay fp32. A quantised model is for inference only:
training it or saving it is refused (:func:`check_not_quantized`), since its weights are no longer the model's.
"""

from __future__ import annotations

import logging
import warnings

import torch
from torch import nn

from bertkit.errors import InputError

log = logging.getLogger(__name__)

QUANTIZATIONS = ("int8",)


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


def quantize_model(model: nn.Module, method: str | None = "int8", device: str | torch.device = "cpu") -> nn.Module:
    """Return ``model`` with every ``nn.Linear`` replaced by a dynamic int8 Linear (in place; eval mode; CPU).

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
    engines = torch.backends.quantized.supported_engines
    if "fbgemm" in engines or "x86" in engines:
        torch.backends.quantized.engine = "x86" if "x86" in engines else "fbgemm"
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    with warnings.catch_warnings():  # torch.ao.quantization warns that it moves to torchao; its kernels stay
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*quantize_per.*deprecated", category=UserWarning)
        qconfig = torch.ao.quantization.per_channel_dynamic_qconfig  # one weight scale per output row: closer
        quantized = torch.ao.quantization.quantize_dynamic(model, {nn.Linear: qconfig}, dtype=torch.qint8,
                                                           inplace=True)
    # per-instance guards: Module.train / save_pretrained are looked up on the instance first
    quantized._bertkit_quantized = method
    quantized.train = _refuse_training.__get__(quantized)
    quantized.save_pretrained = _refuse_saving.__get__(quantized)
    n = sum(1 for m in quantized.modules() if type(m).__name__ == "Linear" and "quantized" in type(m).__module__)
    log.info("quantised %d Linear layers to dynamic int8 (engine %s)", n, torch.backends.quantized.engine)
    return quantized
