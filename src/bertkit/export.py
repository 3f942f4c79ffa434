"""ONNX export of a model directory (``bertkit export --onnx DIR OUT``), for ONNX Runtime and other runtimes.

The graph takes ``input_ids``, ``attention_mask`` and ``token_type_ids`` (int64, [batch, sequence], both axes
dynamic; a ModernBERT graph takes no ``token_type_ids``: it has no segment embeddings) and returns the head's
outputs under transformers' names:

    BertForSequenceClassification / BertForTokenClassification    logits
    BertForQuestionAnswering                                       start_logits, end_logits
    anything else (BertModel, BertForPreTraining, BertForMaskedLM) last_hidden_state, pooler_output (if trained)

and the same for a ModernBERT directory (``ModernBertFor*``; its bare encoder has no pooler). A ModernBERT graph holds
its sliding-window layers as a band mask over the whole sequence, so one graph is exact at every length (PyTorch
switches to the O(T * W) blocked path on long inputs; the graph's local layers cost O(T^2) there).

OUT is a directory (``model.onnx`` + the directory's config.json, vocab.txt, tokenizer and task files, so that it is
self-contained: ``load_pipeline(OUT, backend="onnx")`` runs it with no PyTorch weights there) or a file name ending in
``.onnx``. With ONNX Runtime installed (``pip install bertkit[onnx]``), the export is checked: the graph's outputs on
a padded batch are compared with PyTorch's. ``quantize="int8"`` also writes ONNX Runtime's dynamic int8 quantisation
of the graph (int8 MatMul weights) under its own name, ``model.int8.onnx`` (``encoder.int8.onnx``), beside the fp32
``model.onnx``: a backend asked for fp32 never runs an int8 graph (:func:`bertkit.runtime.onnx_file` refuses one).

Export only writes files: it changes no model or object it is given. Running a graph is ``bertkit.runtime``'s job
(``backend="onnx"`` of the Encoder and the pipelines: :class:`bertkit.runtime.OnnxRuntimeModel`).
"""

from __future__ import annotations

import logging
import os
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from bertkit import models
from bertkit.config import check_vocabulary_fits, opened_dir, read_model_config
from bertkit.errors import InputError, RunError
from bertkit.files import atomic_write
from bertkit.quantize import resolve_quantize
from bertkit.tokenization import load_tokenizer

log = logging.getLogger(__name__)

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
HEAD_OUTPUTS = {  # head role (bertkit.models.ROLES) -> its graph's outputs, in every architecture
    "sequence_classification": ("logits",),
    "token_classification": ("logits",),
    "question_answering": ("start_logits", "end_logits"),
}
QUANTIZED_OPS = {
    "DynamicQuantizeLinear",
    "MatMulInteger",
    "QuantizeLinear",
    "DequantizeLinear",
    "QLinearMatMul",
    "DynamicQuantizeMatMul",
    "MatMulIntegerToFloat",
    "QAttention",
}


# the lowest opset bertkit's graphs export at: attention is torch's scaled_dot_product_attention (opset 14)
MIN_OPSET = 14


def opset_range() -> tuple[int, int]:
    """(lowest, highest) ``opset`` ``export_onnx`` writes: from :data:`MIN_OPSET` to the installed torch exporter's
    highest (and no higher than the installed onnx package knows)."""
    try:
        from torch.onnx import _constants

        high = int(_constants.ONNX_MAX_OPSET)
    except (ImportError, AttributeError):  # an exporter without the table: its long-standing TorchScript range
        high = 20
    try:
        import onnx

        high = min(high, int(onnx.defs.onnx_opset_version()))
    except ImportError:
        pass
    return MIN_OPSET, high


def check_opset(opset: int, flag: str = "--opset") -> None:
    """Refuse, in one line naming ``flag``, an opset outside :func:`opset_range`."""
    low, high = opset_range()
    if not low <= opset <= high:
        raise InputError(
            f"{flag} {opset}: this exporter writes opsets {low} to {high} ({low}: attention's "
            "scaled_dot_product_attention; the highest: the installed torch and onnx)"
        )


def head_outputs(class_name: str) -> tuple[str, ...]:
    """The outputs of the graph exported for a model class named ``class_name`` (``BertForQuestionAnswering``:
    start_logits, end_logits); a class without a head of :data:`HEAD_OUTPUTS` gives the bare encoder's."""
    found = models.of_class_name(class_name)
    return HEAD_OUTPUTS.get(found[1] if found else "", ("last_hidden_state",))


def onnx_name(quantize: str | None = None, hidden_states: bool = False) -> str:
    """The graph's file name in a model directory: ``model.onnx`` (a head, or the bare encoder's last layer),
    ``encoder.onnx`` (every layer's output, for Encoder), with ``.int8`` before ``.onnx`` for the int8 graph."""
    return ("encoder" if hidden_states else "model") + (".int8.onnx" if quantize else ".onnx")


COPIED_FILES = (
    "config.json",
    "vocab.txt",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "finetune_config.json",
)


@dataclass
class ExportReport:
    path: str
    architecture: str
    outputs: list[str]
    opset: int
    max_abs_diff: float | None = None  # ONNX Runtime vs PyTorch on a padded batch; None without onnxruntime
    quantized: str | None = None
    files: list[str] = field(default_factory=list)


def graph_inputs(config) -> tuple[str, ...]:
    """The graph's inputs for a model of ``config``: ``INPUT_NAMES``, without ``token_type_ids`` for ModernBERT (no
    segment embeddings: the input would be unused)."""

    return models.of_config(config).inputs


def _feeds(session, values: dict) -> dict:
    """The ``values`` (name -> array) that the ONNX Runtime ``session``'s graph takes as inputs."""
    names = {i.name for i in session.get_inputs()}
    return {k: v for k, v in values.items() if k in names}


class _Graph(nn.Module):
    """The model's forward with positional inputs (``inputs``: their names) and a tuple of named outputs (what the
    exporter traces)."""

    def __init__(self, model: nn.Module, outputs: tuple[str, ...], inputs: tuple[str, ...] = INPUT_NAMES):
        super().__init__()
        self.model = model
        self.outputs = outputs
        self.inputs = inputs
        self.hidden_states = any(name.startswith("hidden_states.") for name in outputs)

    def forward(self, input_ids, *rest):
        kwargs = dict(zip(self.inputs[1:], rest))
        if self.hidden_states:
            kwargs["output_hidden_states"] = True
        out = self.model(input_ids, **kwargs)
        return tuple(
            out.hidden_states[int(name.split(".")[1])] if name.startswith("hidden_states.") else getattr(out, name)
            for name in self.outputs
        )


def load_for_export(
    directory: str | os.PathLike, hidden_states: bool = False
) -> tuple[nn.Module, str, tuple[str, ...]]:
    """(model in eval mode, architecture, output names) of a model directory: its head if it has one of
    ``HEAD_OUTPUTS``, else the bare encoder. ``hidden_states``: the bare encoder with every layer's output
    (``hidden_states.0`` = embeddings .. ``hidden_states.L``) and ``pooler_output``, for ``Encoder``. A ModernBERT
    directory (``model_type: modernbert``) gives its ``ModernBertFor*`` head or ``ModernBertModel`` (no pooler).
    ``directory`` may be a :class:`bertkit.modeldir.ModelDir`: its config, weights and tokenizer, not read again."""

    opened = opened_dir(directory)
    directory = Path(directory)
    data = read_model_config(opened or directory)
    arch = models.of_config(data)
    roles = {name: role for role, name in arch.classes.items()}
    heads = [a for a in data.get("architectures") or [] if roles.get(a) in HEAD_OUTPUTS]
    architecture = arch.classes["base"] if hidden_states or not heads else heads[0]
    if (directory / "tagger_config.json").is_file():
        raise InputError(f"{directory}: a feature-based tagger (BiLSTM on frozen BERT) cannot be exported to ONNX")
    # one of HEAD_OUTPUTS or the bare encoder: no import by name from files
    model_class = arch.model_class(roles[architecture])
    model, info = model_class.from_pretrained(opened or directory, output_loading_info=True)
    if any((directory / name).is_file() for name in ("vocab.txt", "tokenizer.json")):
        # copied beside the graph: read as every loader of the export will read it (a graph alone needs none)
        tokenizer = opened.tokenizer() if opened is not None else load_tokenizer(directory)
        check_vocabulary_fits(directory, len(tokenizer), model.config.vocab_size)
    outputs = HEAD_OUTPUTS.get(roles[architecture])
    if outputs is None:
        initialised = info.initialised
        pooler = getattr(model, "pooler", None)
        has_pooler = pooler is not None and not any(k.startswith("pooler.") for k in initialised)
        outputs = ("last_hidden_state", "pooler_output") if has_pooler else ("last_hidden_state",)
        if hidden_states:
            layers = tuple(f"hidden_states.{i}" for i in range(model.config.num_hidden_layers + 1))
            outputs = layers + outputs[1:]
    return model.eval(), architecture, outputs


def _sample_inputs(vocab_size: int) -> dict[str, torch.Tensor]:
    """A padded batch of two: the traced graph keeps the attention-mask path (an unpadded trace would drop it)."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(min(5, vocab_size - 1), vocab_size, (2, 11), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    ids[1, 7:] = 0
    types = torch.zeros_like(ids)
    types[:, 6:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types * mask}


def graph_paths(out: str | os.PathLike, quantize: str | None = None, hidden_states: bool = False) -> dict:
    """The graph files an export to ``out`` writes, by precision (None: fp32, "int8"): a ``.onnx`` file name is the
    one file asked for; a directory gets the fp32 graph and, when asked, the int8 one under its own name
    (:func:`onnx_name`). What ``export_onnx`` writes and what ``bertkit export`` refuses to replace."""
    out, quantize = Path(out), resolve_quantize(quantize)
    if out.suffix == ".onnx":
        return {quantize: out}
    targets = {None: out / onnx_name(None, hidden_states)}
    if quantize:
        targets[quantize] = out / onnx_name(quantize, hidden_states)
    return targets


def export_onnx(
    directory: str | os.PathLike,
    out: str | os.PathLike,
    opset: int = 17,
    quantize: str | None = None,
    check: bool = True,
    hidden_states: bool = False,
) -> ExportReport:
    """Export the model of ``directory`` to ONNX at ``out`` (a directory, or a ``.onnx`` file). See the module
    docstring. Returns what was written and, when ONNX Runtime is installed and ``check``, the largest difference
    between its outputs and PyTorch's on a padded batch (RunError above 1e-3, or 0.5 for int8)."""

    quantize = resolve_quantize(quantize)
    check_opset(opset)
    opened, directory, out = opened_dir(directory), Path(directory), Path(out)
    model, architecture, outputs = load_for_export(opened or directory, hidden_states)
    targets = graph_paths(out, quantize, hidden_states)
    (out.parent if out.suffix == ".onnx" else out).mkdir(parents=True, exist_ok=True)
    inputs = graph_inputs(model.config)
    sample = {k: v for k, v in _sample_inputs(model.config.vocab_size).items() if k in inputs}
    dynamic = {name: {0: "batch", 1: "sequence"} for name in inputs}
    per_token = {"last_hidden_state", "start_logits", "end_logits", *(o for o in outputs if o.startswith("hidden"))}
    if architecture.endswith("ForTokenClassification"):
        per_token.add("logits")
    for name in outputs:
        dynamic[name] = {0: "batch", 1: "sequence"} if name in per_token else {0: "batch"}

    def trace(tmp: Path) -> None:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # tracer warnings on the padding test, the exporter's deprecation notes
            torch.onnx.export(
                _Graph(model, outputs, inputs).eval(),
                tuple(sample[n] for n in inputs),
                str(tmp),
                input_names=list(inputs),
                output_names=list(outputs),
                dynamic_axes=dynamic,
                opset_version=opset,
                dynamo=False,
            )

    def quantized(tmp: Path) -> None:
        root = logging.getLogger()
        level, handlers = root.level, list(root.handlers)
        root.setLevel(logging.ERROR)  # the quantiser logs a generic "consider pre-processing" warning on root
        fp32 = tmp.with_name(tmp.name + ".fp32")
        try:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            if None in targets:
                shutil.copyfile(targets[None], fp32)
            else:
                trace(fp32)
            quantize_dynamic(str(fp32), str(tmp), weight_type=QuantType.QInt8, per_channel=True)
        finally:
            root.setLevel(level)
            for handler in [h for h in root.handlers if h not in handlers]:  # its logging.basicConfig: every later
                root.removeHandler(handler)  # warning was printed twice ("WARNING:bertkit.features:bertkit: ...")
            fp32.unlink(missing_ok=True)

    try:
        import onnx  # noqa: F401  (the exporter needs it)
    except ImportError:
        raise RunError("ONNX export needs the onnx package: pip install 'bertkit[onnx]' (onnx, onnxruntime)") from None
    if None in targets:
        atomic_write(targets[None], trace)
    if quantize:
        atomic_write(targets[quantize], quantized)
    written = list(targets.values())
    report = ExportReport(
        str(targets.get(quantize, written[0])),
        architecture,
        list(outputs),
        opset,
        quantized=quantize,
        files=[str(t) for t in written],
    )
    if out.suffix != ".onnx":
        for name in COPIED_FILES:
            if (directory / name).is_file() and (directory / name).resolve() != (out / name).resolve():
                atomic_write(out / name, lambda t, src=directory / name: shutil.copyfile(src, t))
                report.files.append(str(out / name))
    if check:
        for q, target in targets.items():
            diff = check_onnx(target, model, outputs, sample, limit=0.5 if q else 1e-3)
            if q == quantize:
                report.max_abs_diff = diff
    return report


def check_onnx(
    path: str | os.PathLike,
    model: nn.Module,
    outputs: tuple[str, ...],
    sample: dict[str, torch.Tensor],
    limit: float = 1e-3,
) -> float | None:
    """Largest |ONNX Runtime - PyTorch| over ``outputs`` on ``sample`` (padding masked out); None without
    onnxruntime; RunError above ``limit``."""
    try:
        import onnxruntime as ort
    except ImportError:
        log.info("onnxruntime is not installed: the exported graph was not checked")
        return None
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    inputs = graph_inputs(model.config)
    got = session.run(list(outputs), _feeds(session, {k: v.numpy() for k, v in sample.items()}))
    with torch.no_grad():
        want = _Graph(model, outputs, inputs)(*(sample[n] for n in inputs))
    mask = sample["attention_mask"].bool()
    worst = 0.0
    for a, b in zip(got, want):
        diff = (torch.from_numpy(a) - b.float()).abs()
        if diff.dim() >= 2 and diff.shape[1] == mask.shape[1]:
            diff = diff[mask]  # padded positions are not outputs anyone reads
        worst = max(worst, float(diff.max()))
    if worst > limit:
        raise RunError(f"{path}: the exported graph differs from PyTorch by {worst:.3g} (over {limit})")
    return worst


def graph_is_quantized(path: str | os.PathLike) -> bool:
    """Whether an ONNX graph holds quantised operators (what ``quantize_dynamic`` writes)."""
    import onnx

    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception as e:  # noqa: BLE001 (protobuf's DecodeError, onnx's own: each means "not a graph")
        raise InputError(f"{path}: not a readable ONNX graph ({type(e).__name__}); export it again") from None
    return any(node.op_type in QUANTIZED_OPS for node in graph.node)
