"""``bertkit export --onnx DIR OUT``: write a model directory as an ONNX graph (for ONNX Runtime and others)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from bertkit.errors import InputError
from bertkit.options import option, overwrite_option, quantize_option
from bertkit.outputs import removed_on_failure


@dataclass(frozen=True, kw_only=True)
class ExportConfig:
    """What ``bertkit export`` reads and writes."""

    onnx: list[str] = option(
        required=True,
        nargs=2,
        metavar=("DIR", "OUT"),
        default_factory=list,
        help="model directory -> OUT: a directory (model.onnx + config, vocabulary and task files) or a file name "
        "ending in .onnx",
    )
    opset: int = option(17, help="ONNX opset version")
    quantize: str | None = quantize_option(
        "also write the graph with int8 weights (ONNX Runtime's dynamic quantisation): into a directory as "
        "model.int8.onnx (encoder.int8.onnx) beside the fp32 model.onnx, which backend='onnx' runs unless int8 is "
        "asked for; to a .onnx file name, that file only"
    )
    all_layers: bool = option(
        False,
        help="the encoder (no head) with every layer's output: the graph Encoder(backend='onnx') reads as "
        "DIR/encoder.onnx (or encoder.int8.onnx)",
    )
    overwrite: bool = overwrite_option("replace graph files that OUT already holds (default: refused)")
    check: bool = option(True, flag="--no-check", help="skip running the graph with ONNX Runtime against PyTorch")


CONFIG = ExportConfig


def run(cfg: ExportConfig) -> int:
    # torch: kept out of `bertkit export -h`
    from bertkit.export import export_onnx, graph_paths
    from bertkit.training.rundir import check_writable

    directory, out = cfg.onnx
    target = Path(out)
    # the graph files it writes (a directory may hold the model it is exported from, and the other graphs: kept);
    # export_onnx checks --opset itself, before it loads anything
    for graph in graph_paths(target, cfg.quantize, cfg.all_layers).values():
        if graph.exists() and not cfg.overwrite:
            raise InputError(f"--onnx OUT {graph}: already exists; pass --overwrite to replace it")
    where = target.parent if target.suffix == ".onnx" else target
    with removed_on_failure(where):  # a failed export leaves no directory it made
        check_writable(where, "--onnx")  # before the export, not after
        report = export_onnx(
            directory, out, opset=cfg.opset, quantize=cfg.quantize, check=cfg.check, hidden_states=cfg.all_layers
        )
    print(json.dumps(asdict(report), sort_keys=True))
    return 0
