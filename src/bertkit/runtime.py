"""The one inference runtime: what computes a forward pass (PyTorch, its int8 form, or ONNX Runtime), and the one
batch loop. The front doors only prepare inputs and read outputs around it: the ``Encoder`` (``bertkit.features``:
layers x pooling, fill-mask) and the task pipelines (``bertkit.pipelines`` and the tasks' predictions, through
``bertkit.tasks.run_inference``: windows, head decoding).

    loaded = load(model, device="cpu", precision="auto", quantize="int8")    # a PyTorch module, here made int8
    loaded = load(directory=d, config=config, backend="onnx")               # the directory's ONNX graph
    out = loaded.model(input_ids=ids, attention_mask=mask, token_type_ids=types)   # a head's outputs, either way
    forward = EncoderForward(loaded.model)  # (ids, types, mask, depth, pooler) -> (hidden states 0..depth, pooled)
    rows = in_input_order(n, batch_loop(lengths, run, batch_size, max_tokens, device=..., precision=...))

The loop plans length-sorted batches with ``bertkit.batches``, runs them under ``torch.inference_mode`` and the
precision's autocast (entered once around all batches), one after the other or, on the CPU and when asked, side by
side on the torch threads, and hands each batch's result back with its input indices.

ONNX graphs come from the model directory (``model.onnx`` for a head, ``encoder.onnx`` with every layer's output
for the Encoder, ``.int8.onnx`` for int8) when there and not older than its PyTorch weights, else they are exported
from the weights into a temporary directory that is removed as soon as ONNX Runtime holds the graph
(:func:`onnx_model`). Exporting itself (``bertkit.export``) only writes files.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from bertkit import models
from bertkit import quantize as int8  # the module: its quantize_model is looked up when called
from bertkit.batches import plan_batches
from bertkit.checkpoint import find_weights
from bertkit.errors import InputError, RunError
from bertkit.export import INPUT_NAMES, export_onnx, graph_is_quantized, onnx_name
from bertkit.precision import autocast, check_device, resolve_precision
from bertkit.quantize import resolve_quantize

log = logging.getLogger(__name__)

BACKENDS = ("torch", "onnx")


# --------------------------------------------------------------------------------------------- the batch loop


def cpu_forward_tokens(intermediate_size: int = 3072) -> int:
    """Padded tokens per forward pass that keep a CPU forward fast: the feed-forward activations ([tokens,
    intermediate] floats) at about 3 MB per torch thread, i.e. 256 tokens per thread for bert-base (512 on 2 cores,
    where bert-base measured fastest between 384 and 1024 tokens, in int8, bf16 and fp32 alike), 768 for bert-mini
    (whose small layers lose more to per-batch overhead than to cache misses)."""
    return 256 * max(1, torch.get_num_threads()) * 3072 // max(1, intermediate_size)


def forward_tokens(config: Any, device: torch.device | str) -> int | None:
    """The padded-token cap per forward pass of a model of ``config`` on ``device``: :func:`cpu_forward_tokens` on
    the CPU (larger CPU batches run slower), None (no cap) elsewhere."""
    if torch.device(device).type != "cpu":
        return None
    return cpu_forward_tokens(getattr(config, "intermediate_size", 3072))


def batch_loop(
    lengths: Sequence[int],
    run: Callable[[list[int]], Any],
    batch_size: int,
    max_tokens: int | None = None,
    *,
    device: torch.device | str = "cpu",
    precision: str = "fp32",
    longest_first: bool = True,
    parallel: bool = False,
    progress: bool = False,
    desc: str = "",
    unit: str = "input",
    leave: bool = True,
) -> Iterator[tuple[list[int], Any]]:
    """Yield ``(batch, run(batch))`` for input indices cut into length-sorted batches of at most ``batch_size``
    inputs and ``max_tokens`` padded tokens (:func:`bertkit.batches.plan_batches`; longest first, or shortest), in
    batch order.

    ``run`` computes under ``torch.inference_mode`` and the autocast of ``precision`` on ``device``, entered once
    around the whole loop (so bf16 copies of the weights are cached, not re-made per batch); the caller's code
    between batches runs under them too, so keep it to reading results. ``parallel`` (CPU only): up to
    ``torch.get_num_threads()`` batches run side by side on as many threads with one intra-op thread each (the
    caller's thread count comes back after); the results still come in batch order. ``progress``: a tqdm bar
    counting inputs (``desc``, ``unit``; ``leave``: kept on screen when done)."""
    batches = plan_batches(lengths, batch_size, max_tokens, longest_first)
    device = torch.device(device)
    with (
        torch.inference_mode(),
        autocast(precision, device),
        tqdm(total=len(lengths), desc=desc, unit=unit, disable=not progress, leave=leave) as bar,
    ):
        results = _parallel(run, batches, precision, device) if parallel and device.type == "cpu" else map(run, batches)
        for batch, result in zip(batches, results):
            bar.update(len(batch))
            yield batch, result


def _parallel(run: Callable[[list[int]], Any], batches: list[list[int]], precision: str, device: torch.device):
    """``run(batch)`` for each batch, in order, ``torch.get_num_threads()`` batches at a time on as many threads
    with one intra-op thread each (the caller's thread count is restored after)."""
    threads = torch.get_num_threads()
    workers = min(threads, len(batches))
    if workers < 2:
        yield from map(run, batches)
        return
    from concurrent.futures import ThreadPoolExecutor

    def work(batch: list[int]) -> Any:
        torch.set_num_threads(1)  # this thread's own OpenMP count too (oneDNN reads it)
        with torch.inference_mode(), autocast(precision, device):  # both are per-thread states
            return run(batch)

    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(workers, thread_name_prefix="bertkit-batch") as pool:
            yield from pool.map(work, batches)
    finally:
        torch.set_num_threads(threads)


def in_input_order(n: int, results: Iterable[tuple[list[int], Sequence[Any]]]) -> list[Any]:
    """The per-input results of ``n`` inputs in input order, from ``(batch indices, one result per index)`` pairs
    such as :func:`batch_loop` yields."""
    out: list[Any] = [None] * n
    for batch, rows in results:
        for j, i in enumerate(batch):
            out[i] = rows[j]
    return out


# --------------------------------------------------------------------------------------------- the loader


@dataclass(frozen=True)
class Loaded:
    """What :func:`load` gives: ``model`` computes the forward pass (a PyTorch module in eval mode on its device,
    int8 or not, or an :class:`OnnxRuntimeModel`), called as the PyTorch head is; ``precision`` is the one it runs
    under (fp32 for int8 and ONNX: their kernels take fp32 activations)."""

    model: Any
    precision: str
    backend: str
    quantize: str | None = None


def _onnx_device(device: torch.device | str) -> None:
    if torch.device(device).type != "cpu":
        raise InputError("backend 'onnx' runs on the CPU (onnxruntime's CPU provider): use device='cpu'")


def check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise InputError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    return backend


def load(
    model: torch.nn.Module | None = None,
    *,
    directory: str | os.PathLike | None = None,
    config: Any = None,
    backend: str = "torch",
    quantize: str | None = None,
    precision: str = "auto",
    device: torch.device | str = "cpu",
    hidden_states: bool = False,
    outputs: Sequence[str] = (),
) -> Loaded:
    """The forward pass of a model on a backend, precision and device.

    ``backend="torch"``: ``model`` (a PyTorch module), with ``quantize="int8"`` its Linear layers swapped for
    dynamic int8 ones (CPU; :mod:`bertkit.quantize`), moved to ``device`` in eval mode; ``precision`` "auto" is
    resolved for the device. ``backend="onnx"``: ONNX Runtime (CPU) on ``directory``'s graph for a model of
    ``config`` (:func:`onnx_model`; ``hidden_states``: the every-layer encoder graph), the int8 graph with
    ``quantize``. InputError for an unknown backend or an ONNX model asked for on a GPU."""

    check_backend(backend)
    quantize = resolve_quantize(quantize)
    check_device(device, "device")  # the library's callers too: one line naming it, never torch's AssertionError
    resolved = resolve_precision(precision, device)  # validates the name on either backend
    if backend == "onnx":
        _onnx_device(device)
        return Loaded(onnx_model(directory, config, quantize, hidden_states, outputs), "fp32", "onnx", quantize)
    if quantize:
        model = int8.quantize_model(model, quantize, device)
        resolved = "fp32"  # the int8 kernels take fp32 activations; bf16 autocast around them would only add casts
    return Loaded(model.to(device).eval(), resolved, "torch", quantize)


class EncoderForward:
    """The Encoder's forward pass on either backend: ``forward(input_ids, token_type_ids, attention_mask, depth,
    pooler)`` -> (hidden states 0..depth, each [B, T, H]; the pooler's output [B, H], or None when not asked for or
    absent). Runs the embeddings and layers 1..depth only (depth -1: all).

    ``model``: a bare encoder module (``BertModel``, ``ModernBertModel``; int8 or not), or an
    :class:`OnnxRuntimeModel` of an every-layer graph (``encoder.onnx``: outputs ``hidden_states.0..L``)."""

    def __init__(self, model: Any):
        self.model = model
        self.backend = "onnx" if isinstance(model, OnnxRuntimeModel) else "torch"
        self.num_layers = model.config.num_hidden_layers
        if self.backend == "onnx":
            self.has_pooler = "pooler_output" in model.output_names
        else:  # the architecture's forward takes output_pooler only where it has a pooler (the registry says)
            self.has_pooler = models.of_config(model.config).has_pooler and getattr(model, "pooler", None) is not None
        self.path = getattr(model, "path", None)

    def __repr__(self) -> str:
        return f"EncoderForward({self.backend}, {type(self.model).__name__})"

    def __call__(self, input_ids, token_type_ids, attention_mask, depth: int, pooler: bool = False):
        depth = self.num_layers if depth < 0 else depth
        if self.backend == "onnx":
            wanted = [f"hidden_states.{i}" for i in range(depth + 1)]
            if pooler and self.has_pooler:
                wanted.append("pooler_output")
            values = self.model.run(wanted, input_ids, attention_mask, token_type_ids)
            return tuple(values[: depth + 1]), (values[depth + 1] if len(values) > depth + 1 else None)
        asked = {"output_pooler": pooler} if self.has_pooler else {}  # only an architecture with a pooler takes it
        out = self.model(
            input_ids, attention_mask, token_type_ids, output_hidden_states=True, num_layers=depth, **asked
        )
        return out.hidden_states, out.pooler_output if self.has_pooler else None


# --------------------------------------------------------------------------------------------- ONNX Runtime


class OnnxRuntimeModel:
    """An exported graph run by ONNX Runtime (CPU), called like the PyTorch head model it came from:
    ``model(input_ids=..., attention_mask=..., token_type_ids=...)`` -> an object whose attributes are the graph's
    outputs (``logits`` or ``start_logits`` / ``end_logits``) as float32 CPU tensors; :meth:`run` computes named
    outputs only (what :class:`EncoderForward` asks of an every-layer graph). Inference only."""

    backend = "onnx"

    def __init__(self, path: str | os.PathLike, config, threads: int | None = None):
        try:
            import onnxruntime as ort
        except ImportError:
            raise RunError("backend 'onnx' needs onnxruntime: pip install 'bertkit[onnx]'") from None
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or torch.get_num_threads()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.path = str(path)
        try:
            self.session = ort.InferenceSession(self.path, options, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 (onnxruntime's InvalidProtobuf, Fail...: the file is not a graph it runs)
            first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
            raise InputError(
                f"{self.path}: not an ONNX graph ONNX Runtime can run ({first}); export it again"
            ) from None
        self.config = config
        self.input_names = {i.name for i in self.session.get_inputs()}  # ModernBERT's graphs take no token_type_ids
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.training = False
        unknown = sorted(self.input_names - set(INPUT_NAMES))
        if unknown or "input_ids" not in self.input_names:
            raise InputError(
                f"{self.path}: a graph taking {sorted(self.input_names)}, not one bertkit exported (inputs "
                f"{', '.join(INPUT_NAMES)}); export the model again with `bertkit export --onnx`"
            )

    def expect(self, outputs: dict[str, int | None]) -> OnnxRuntimeModel:
        """Refuse (InputError naming the file) a graph that is not the model asked for: one without each of
        ``outputs`` (name -> the size of its last axis, None: any), or whose last axis has another fixed size (a
        graph of another model, or of another head, saved under this name)."""
        shapes = {o.name: o.shape for o in self.session.get_outputs()}
        for name, size in outputs.items():
            if name not in shapes:
                raise InputError(
                    f"{self.path}: the graph has no output {name!r} (it has {', '.join(shapes) or 'none'}): not "
                    f"the graph of this model's {'encoder' if name.startswith('hidden_states.') else 'head'}; export "
                    "it again with `bertkit export --onnx`"
                )
            last = shapes[name][-1] if shapes[name] else None
            if size is not None and isinstance(last, int) and last != size:
                raise InputError(
                    f"{self.path}: output {name!r} has {last} values per position, the model's config.json gives "
                    f"{size}: the graph of another model; export it again with `bertkit export --onnx`"
                )
        return self

    def __repr__(self) -> str:
        return f"OnnxRuntimeModel({self.path}, outputs={self.output_names})"

    def eval(self) -> OnnxRuntimeModel:
        return self

    def train(self, mode: bool = True) -> OnnxRuntimeModel:
        if mode:
            raise InputError("an ONNX Runtime model is for inference only: load the PyTorch model to train")
        return self

    def to(self, device) -> OnnxRuntimeModel:
        _onnx_device(device)
        return self

    def run(self, names: Sequence[str], input_ids, attention_mask=None, token_type_ids=None) -> list[torch.Tensor]:
        """The graph's outputs ``names`` (float32 CPU tensors) for [B, T] inputs (mask: all ones when None; segment
        ids: all zeros when None and the graph takes them)."""
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        feeds = {"input_ids": input_ids.cpu().numpy(), "attention_mask": mask.cpu().numpy()}
        if "token_type_ids" in self.input_names:
            types = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
            feeds["token_type_ids"] = types.cpu().numpy()
        return [torch.from_numpy(v) for v in self.session.run(list(names), feeds)]

    def __call__(self, input_ids, attention_mask=None, token_type_ids=None, **_):
        from types import SimpleNamespace

        values = self.run(self.output_names, input_ids, attention_mask, token_type_ids)
        return SimpleNamespace(**dict(zip(self.output_names, values)))


def onnx_file(
    directory: str | os.PathLike, cache: str | os.PathLike, quantize: str | None = None, hidden_states: bool = False
) -> Path:
    """The graph a backend runs: ``DIR/model.onnx`` (``encoder.onnx`` with ``hidden_states``; ``model.int8.onnx`` /
    ``encoder.int8.onnx`` for int8) when it is there and not older than the directory's PyTorch weights (an exported
    directory has none: its graph is used as it is), else one exported (and checked) from the weights into the
    directory ``cache``. Raises InputError when the graph's precision is not the one asked for (an int8 graph named
    ``model.onnx``, as ``export --quantize`` used to write it) or when there is neither graph nor weights. A
    :class:`bertkit.modeldir.ModelDir` is passed on to the export (its config and weights, not read again)."""

    source, directory = directory, Path(directory)
    quantize = resolve_quantize(quantize)
    name = onnx_name(quantize, hidden_states)
    found = directory / name
    try:
        weights: Path | None = find_weights(directory)
    except FileNotFoundError:
        weights = None
    if found.is_file() and (weights is None or found.stat().st_mtime >= weights.stat().st_mtime):
        try:
            is_int8 = graph_is_quantized(found)
        except ImportError:
            raise RunError("backend 'onnx' needs onnx and onnxruntime: pip install 'bertkit[onnx]'") from None
        if is_int8 != bool(quantize):
            raise InputError(
                f"{found} is an {'int8' if is_int8 else 'fp32'} graph but {'int8' if quantize else 'fp32'} was asked "
                f"for: "
                + (
                    f"load it with quantize='int8' (--quantize int8), or re-export with `bertkit export "
                    f"--onnx` (int8 graphs are now written as {onnx_name('int8', hidden_states)})"
                    if is_int8
                    else f"an int8 graph is {onnx_name('int8', hidden_states)}"
                )
            )
        return found
    if weights is None:
        flags = (" --all-layers" if hidden_states else "") + (" --quantize int8" if quantize else "")
        raise InputError(
            f"{directory}: no {name} and no PyTorch weights to export it from (export it with "
            f"`bertkit export --onnx MODEL_DIR {directory}{flags}`)"
        )
    found = Path(cache) / name
    log.info("exporting %s to %s for ONNX Runtime", directory, found)
    export_onnx(source, found, quantize=quantize, hidden_states=hidden_states)
    return found


def onnx_model(
    directory: str | os.PathLike,
    config,
    quantize: str | None = None,
    hidden_states: bool = False,
    outputs: Sequence[str] = (),
) -> OnnxRuntimeModel:
    """ONNX Runtime on the directory's graph (see :func:`onnx_file` for which), checked to be this model's: with
    ``hidden_states`` every layer's output at the config's width (no more layers), else the head's ``outputs``
    (``logits`` with ``num_labels`` values...). A graph exported now goes to a temporary directory that is removed
    once the session is built: ONNX Runtime holds the graph in memory from then on (its ``path`` then names a file
    that is gone)."""
    with tempfile.TemporaryDirectory(prefix="bertkit-onnx-") as cache:
        model = OnnxRuntimeModel(onnx_file(directory, cache, quantize, hidden_states), config)
    layers = config.num_hidden_layers
    if hidden_states:
        depth = sum(name.startswith("hidden_states.") for name in model.output_names) - 1
        if depth != layers:  # counted first: a config of 10**9 layers asks for no 10**9 names
            raise InputError(
                f"{model.path}: a graph of {max(depth, 0)} layers, config.json gives {layers}: the graph of another "
                "model; export it again with `bertkit export --onnx --all-layers`"
            )
        return model.expect({f"hidden_states.{i}": config.hidden_size for i in range(layers + 1)})
    widths = {"logits": getattr(config, "num_labels", None), "last_hidden_state": config.hidden_size}
    return model.expect({name: widths.get(name) for name in outputs})
