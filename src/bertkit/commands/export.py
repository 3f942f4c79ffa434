"""``bertkit export --onnx DIR OUT``: write a model directory as an ONNX graph (for ONNX Runtime and others)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from bertkit.errors import InputError
from bertkit.options import number
from bertkit.outputs import removed_on_failure


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--onnx",
        nargs=2,
        metavar=("DIR", "OUT"),
        required=True,
        help="model directory -> OUT: a directory (model.onnx + config, vocabulary and task files) "
        "or a file name ending in .onnx",
    )
    parser.add_argument("--opset", type=number(int, "--opset"), default=17, help="ONNX opset version (default 17)")
    parser.add_argument(
        "--quantize",
        choices=("int8",),
        default=None,
        help="also write the graph with int8 weights (ONNX Runtime's dynamic quantisation): into a "
        "directory as model.int8.onnx (encoder.int8.onnx) beside the fp32 model.onnx, which "
        "backend='onnx' runs unless int8 is asked for; to a .onnx file name, that file only",
    )
    parser.add_argument(
        "--all-layers",
        action="store_true",
        help="the encoder (no head) with every layer's output: the graph Encoder(backend='onnx') "
        "reads as DIR/encoder.onnx (or encoder.int8.onnx)",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace graph files that OUT already holds (default: refused)"
    )
    parser.add_argument(
        "--no-check",
        dest="check",
        action="store_false",
        help="skip running the graph with ONNX Runtime against PyTorch",
    )


def run(args: argparse.Namespace) -> int:
    # torch: kept out of `bertkit export -h`
    from bertkit.export import export_onnx, graph_paths
    from bertkit.training.rundir import check_writable

    directory, out = args.onnx
    target = Path(out)
    # the graph files it writes (a directory may hold the model it is exported from, and the other graphs: kept);
    # export_onnx checks --opset itself, before it loads anything
    for graph in graph_paths(target, args.quantize, args.all_layers).values():
        if graph.exists() and not args.overwrite:
            raise InputError(f"--onnx OUT {graph}: already exists; pass --overwrite to replace it")
    where = target.parent if target.suffix == ".onnx" else target
    with removed_on_failure(where):  # a failed export leaves no directory it made
        check_writable(where, "--onnx")  # before the export, not after
        report = export_onnx(
            directory, out, opset=args.opset, quantize=args.quantize, check=args.check, hidden_states=args.all_layers
        )
    print(json.dumps(asdict(report), sort_keys=True))
    return 0
