"""Model FLOPs per pre-training step and model FLOPs utilisation (MFU): the FLOPs a step needs, over what the device
could do in the same time at its dense peak for the precision in use.

The count (a multiply-add is 2 FLOPs; B sequences of real, non-padding lengths L_b, H hidden, I intermediate, V vocab,
ℓ layers, M masked positions):

- per token and layer: Q, K, V and output projections ``4 * 2*H*H``, the feed-forward ``2 * 2*H*I``;
- per sequence and layer: attention scores ``Q K^T`` and values ``P V``, ``2 * 2*L_b^2*H``;
- MLM head, at masked positions only (bertkit's sparse head): transform ``2*H*H`` and decoder ``2*H*V`` per position;
- NSP: pooler ``2*H*H`` and classifier ``2*H*2`` per sequence;
- training is 3x the forward (backward: gradients of inputs and of weights, each as much as the forward).

Embedding look-ups, LayerNorm, softmax, GELU, dropout and the optimizer are not counted (no matmuls; a few percent).
For ModernBERT (``model_type`` "modernbert") the GeGLU feed-forward is ``3 * 2*H*I`` (its input projection is H x
2I) and its sliding-window layers are counted as full attention (the same at seq 128 and a 128-token window).
Padding is not counted either: a step that pads wastes its FLOPs, and MFU shows it. This is the count of NVIDIA's and
Megatron's papers (``6 * params * tokens`` plus attention), restricted to what BERT computes.

Peaks: :data:`GPU_PEAKS` lists dense (no sparsity) tensor-core FLOP/s of common GPUs from their vendors' data sheets;
on a CPU the peak is measured by a short matmul probe (:func:`cpu_peak`), once in each of the first few processes
that ask for it, and cached under ``~/.cache/bertkit`` (the highest figure seen).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import platform
import time
from pathlib import Path

from bertkit import models
from bertkit.files import write_json

logger = logging.getLogger(__name__)


def _get(config, name: str) -> int:
    return int(config[name] if isinstance(config, dict) else getattr(config, name))


def _ffn_matmuls(config) -> int:
    """H x I matmuls in a feed-forward block: 2 for BERT's; 3 for ModernBERT's GeGLU (input projection to 2I)."""

    return models.of_config(config).ffn_matmuls


def forward_flops(config, lengths, masked: int, nsp: bool) -> float:
    """Forward FLOPs of BertForPreTraining on sequences of ``lengths`` (real tokens each) with ``masked`` MLM
    positions. ``config`` is a BertConfig or its dict."""
    h, i, v, n_layers = (
        _get(config, k) for k in ("hidden_size", "intermediate_size", "vocab_size", "num_hidden_layers")
    )
    lengths = [int(x) for x in lengths]
    tokens, squares = sum(lengths), sum(x * x for x in lengths)
    per_layer = tokens * (4 * 2 * h * h + _ffn_matmuls(config) * 2 * h * i) + squares * 2 * 2 * h
    mlm = masked * (2 * h * h + 2 * h * v)
    nsp_flops = len(lengths) * (2 * h * h + 2 * h * 2) if nsp else 0
    return float(n_layers * per_layer + mlm + nsp_flops)


def train_flops(config, lengths, masked: int, nsp: bool) -> float:
    """FLOPs of one training pass (forward and backward) over the same batch: 3x the forward."""
    return 3.0 * forward_flops(config, lengths, masked, nsp)


def flops_per_token(config, mean_length: float, masked_per_token: float, nsp: bool) -> float:
    """Training FLOPs per real token, for sequences of ``mean_length`` tokens with ``masked_per_token`` MLM positions
    per token (what a log line knows: its token rate and its masking rate)."""
    length = max(1.0, float(mean_length))
    h, i, v, n_layers = (
        _get(config, k) for k in ("hidden_size", "intermediate_size", "vocab_size", "num_hidden_layers")
    )
    per_token = n_layers * (4 * 2 * h * h + _ffn_matmuls(config) * 2 * h * i + length * 2 * 2 * h)
    per_token += masked_per_token * (2 * h * h + 2 * h * v)
    if nsp:
        per_token += (2 * h * h + 2 * h * 2) / length
    return 3.0 * per_token


# Dense tensor-core peak FLOP/s (no 2:4 sparsity) from the vendors' data sheets; fp32 is the plain FP32 rate
# (PyTorch leaves TF32 off for matmuls by default). Matched against torch.cuda.get_device_name(), first match wins.
GPU_PEAKS: list[tuple[str, dict[str, float]]] = [
    ("H200", {"bf16": 989e12, "fp16": 989e12, "fp32": 67e12}),
    ("H100 PCIe", {"bf16": 756e12, "fp16": 756e12, "fp32": 51e12}),
    ("H100 NVL", {"bf16": 835e12, "fp16": 835e12, "fp32": 60e12}),
    ("H100", {"bf16": 989e12, "fp16": 989e12, "fp32": 67e12}),  # SXM
    ("H800", {"bf16": 989e12, "fp16": 989e12, "fp32": 67e12}),
    ("GH200", {"bf16": 989e12, "fp16": 989e12, "fp32": 67e12}),
    ("A100", {"bf16": 312e12, "fp16": 312e12, "fp32": 19.5e12}),
    ("A800", {"bf16": 312e12, "fp16": 312e12, "fp32": 19.5e12}),
    ("L40S", {"bf16": 362e12, "fp16": 362e12, "fp32": 91.6e12}),
    ("L40", {"bf16": 181e12, "fp16": 181e12, "fp32": 90.5e12}),
    ("L4", {"bf16": 121e12, "fp16": 121e12, "fp32": 30.3e12}),
    ("A10G", {"bf16": 70e12, "fp16": 70e12, "fp32": 31.2e12}),
    ("A10", {"bf16": 125e12, "fp16": 125e12, "fp32": 31.2e12}),
    ("A6000", {"bf16": 155e12, "fp16": 155e12, "fp32": 38.7e12}),
    ("V100", {"fp16": 125e12, "fp32": 15.7e12}),  # no bf16 tensor cores
    ("T4", {"fp16": 65e12, "fp32": 8.1e12}),
    ("RTX 4090", {"bf16": 165e12, "fp16": 165e12, "fp32": 82.6e12}),  # fp32 accumulation
    ("RTX 3090", {"bf16": 71e12, "fp16": 71e12, "fp32": 35.6e12}),
]


def gpu_peak(name: str, precision: str) -> float | None:
    """Dense peak FLOP/s of the GPU called ``name`` at ``precision`` (bf16/fp16/fp32), or None when unlisted. A
    precision the GPU has no tensor cores for falls back to its fp32 rate (what autocast then really runs at)."""
    for key, peaks in GPU_PEAKS:
        if key.lower() in name.lower():
            return peaks.get(precision, peaks["fp32"])
    return None


def _cache_path() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "bertkit" / "cpu_peak.json"


@functools.cache
def _cpu_model() -> str:
    """The CPU's model name with its family and model numbers (one name, "AMD EPYC", covers Zen 3 without bf16 units
    and Zen 4 with them): read once a process."""
    name, ids = platform.processor() or platform.machine(), []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            field, _, value = line.partition(":")
            field = field.strip()
            if field == "model name":
                name = value.strip()
            elif field in ("cpu family", "model") and len(ids) < 2:
                ids.append(f"{field} {value.strip()}")
            elif not line.strip():  # the first processor's block is enough
                break
    except OSError:
        pass
    return ", ".join([name, *ids])


def _cpu_name() -> str:
    """:func:`_cpu_model` and the instruction-set caps in the environment (an AVX2 cap takes the bf16 units away)."""
    return ", ".join([_cpu_model(), *(f"{v}={os.environ[v]}" for v in CPU_CAPS if os.environ.get(v))])


# the environment's caps on the instruction sets ATen, oneDNN and MKL use: part of the probe's cache key
CPU_CAPS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")
# a cached figure is measured again by the first few processes that read it, each keeping the highest: one probe on a
# busy machine measured half the peak (235 against 439 GFLOP/s of bf16 on two Zen 4 cores) and, cached for good,
# made the budget choose the smaller model in every run after it
PROBES = 3
_MEASURED: dict[str, float] = {}  # this process's figures: each key measured at most once a process


def cpu_peak(precision: str, seconds: float = 1.0, refresh: bool = False) -> float:
    """This CPU's measured matmul FLOP/s at ``precision`` with torch's current thread count: the best of a few
    timed square matmuls (1024, or smaller where that is slow) over about ``seconds``, cached per CPU (model, family,
    instruction-set caps), thread count, torch version and precision. A busy machine measures low, so the cache
    keeps the highest figure seen, and the first ``PROBES`` processes to read a figure measure it again (once each);
    ``refresh`` measures again whatever the cache holds (benchmarks/bench_pretrain.py refreshes it)."""
    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[precision]
    key = f"{_cpu_name()}|threads={torch.get_num_threads()}|torch={torch.__version__}|{precision}"
    if key in _MEASURED and not refresh:
        return _MEASURED[key]
    path = _cache_path()
    cache: dict = {}
    if path.is_file():
        try:
            cache = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            cache = {}
    if key in cache and int(cache.get(f"{key}|probes", PROBES)) >= PROBES and not refresh:
        _MEASURED[key] = float(cache[key])
        return _MEASURED[key]
    # the probe's numbers come from its own generator: it runs at a training run's first log line (when the cache
    # misses), and drawing them from the default generator shifted the run's dropout stream from there on, so a run
    # that measured and one that found the cache (a resumed run, another process) trained differently
    g = torch.Generator().manual_seed(0)
    for n in (256, 512, 1024):  # as large as a quick probe allows (fp16 matmuls on a CPU can be 100x slower)
        a, b = torch.randn(n, n, generator=g).to(dtype), torch.randn(n, n, generator=g).to(dtype)
        t = time.perf_counter()
        torch.matmul(a, b)  # also the warm-up (oneDNN picks its kernel)
        if time.perf_counter() - t > 0.02 * seconds:
            break
    best, deadline = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < deadline or best == float("inf"):
        t = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - t)
    peak = max(2 * n**3 / best, float(cache.get(key, 0.0)))
    cache[key], cache[f"{key}|probes"] = peak, int(cache.get(f"{key}|probes", 0)) + 1
    _MEASURED[key] = peak
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, cache)
    except OSError as e:  # an unwritable home only costs a re-measure
        logger.debug("cannot cache the CPU peak in %s: %s", path, e)
    return peak


def model_shapes(config, tokens: int, masked: int) -> list[tuple[int, int, int]]:
    """The (m, k, n) matrix products of one pre-training step of ``config`` over ``tokens`` token rows with
    ``masked`` MLM rows: the forward's (attention projections, the feed-forward's two, the MLM decoder) and the
    backward's weight gradients (the same products transposed: k x m by m x n)."""
    h, i, v = (_get(config, k) for k in ("hidden_size", "intermediate_size", "vocab_size"))
    wide = i * (_ffn_matmuls(config) - 1)  # the feed-forward's input projection: I, or GeGLU's 2I
    forward = [(tokens, h, h), (tokens, h, wide), (tokens, i, h), (max(1, masked), h, v)]
    return forward + [(k, m, n) for m, k, n in forward]


def shapes_peak(shapes: list[tuple[int, int, int]], precision: str, device="cpu", seconds: float = 1.0) -> float:
    """The best matmul FLOP/s measured on ``shapes`` ((m, k, n) products) at ``precision`` on ``device`` with
    torch's current thread count: issue 56's peak, the rate the model's own products can reach. Not cached."""
    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[precision]
    device = torch.device(device)
    g = torch.Generator().manual_seed(0)  # its own generator: a caller's random stream is untouched
    best = 0.0
    for m, k, n in shapes:
        a = torch.randn(m, k, generator=g).to(device, dtype)
        b = torch.randn(k, n, generator=g).to(device, dtype)
        torch.matmul(a, b)  # the warm-up (the library picks its kernel)
        deadline = time.perf_counter() + seconds / len(shapes)
        while True:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t = time.perf_counter()
            torch.matmul(a, b)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            best = max(best, 2 * m * k * n / (time.perf_counter() - t))
            if time.perf_counter() > deadline:
                break
    return best


def device_peak(device, precision: str) -> float | None:
    """Dense peak FLOP/s of ``device`` (a torch.device or string) at ``precision``: the table for GPUs, the probe
    for CPUs; None for a GPU the table does not list."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return gpu_peak(torch.cuda.get_device_name(device), precision)
    if device.type == "cpu":
        return cpu_peak(precision)
    return None


def mfu(flops_per_second: float, peak: float | None) -> float | None:
    """Model FLOPs utilisation: achieved model FLOP/s over the peak (None without a peak)."""
    return flops_per_second / peak if peak else None


_RUNS: dict[str, tuple[dict, str]] = {}


def log_fields(ctx, out: str | os.PathLike, tokens_per_s_per_rank: float, sums: dict[str, float]) -> dict[str, float]:
    """What a pre-training log line adds: model TFLOP/s (all ranks) and MFU (per device), from the window's meter
    sums (``tokens``, ``mlm_n``, ``nsp_n``) and the run's ``run.json`` (model config, precision, seq_len). Rank 0
    only (the others return nothing); an unknown device peak gives no ``mfu``."""
    if not ctx.is_main or not sums.get("tokens"):
        return {}
    key = str(out)
    if key not in _RUNS:
        try:
            record = json.loads((Path(out) / "run.json").read_text(encoding="utf-8"))
            _RUNS[key] = (record["model_config"], record["precision"], record["config"].get("seq_len", 128))
        except (OSError, ValueError, KeyError, TypeError):
            return {}
    config, precision, seq_len = _RUNS[key]
    tokens = sums["tokens"]
    nsp = bool(sums.get("nsp_n"))
    # the window's own sequences (a ramp's stage, not the run's final --seq-len), where the meter counted them
    count = sums.get("sequences") or (sums["nsp_n"] if nsp else 0.0)
    mean_length = tokens / count if count else float(seq_len)
    try:
        per_token = flops_per_token(config, mean_length, sums.get("mlm_n", 0.0) / tokens, nsp)
    except (KeyError, TypeError, ValueError, AttributeError):  # a model config without BERT's size fields
        return {}
    achieved = per_token * tokens_per_s_per_rank
    fields = {"model_tflops": round(achieved * ctx.world_size / 1e12, 4)}
    peak = device_peak(ctx.device, precision)
    if peak and achieved <= peak:
        fields["mfu"] = round(achieved / peak, 4)
    elif peak and key not in _OVER_PEAK:  # the CPU probe ran on a busy machine: no MFU rather than one over 100%
        _OVER_PEAK.add(key)
        logger.warning(
            "MFU left out: the run achieves %.1f GFLOP/s, above the %.1f GFLOP/s this device's peak probe "
            "measured (a busy machine measures low; bertkit.recipes.pretrain.flops.cpu_peak(refresh=True) on a "
            "quiet one fixes the cache)",
            achieved / 1e9,
            peak / 1e9,
        )
    return fields


_OVER_PEAK: set[str] = set()
