"""``bertkit evaluate``: run a fine-tuned model on a labelled file; write metrics.json and the predictions.

``bertkit predict`` is the same run on a file that may have no labels (no metrics)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from bertkit.embeddings import ROUTE_HELP, route
from bertkit.options import add_options, from_args, option
from bertkit.tasks.options import FINETUNE_ONLY, RunOptions, TaskOptions, add_task_flag, task_of_directory

EPILOG = ROUTE_HELP["evaluate"] + "; BLiMP (a pre-trained model): --task blimp (see `bertkit evaluate --task blimp -h`)"
BLIMP = "bertkit.commands.evaluate_blimp"


def delegate(argv: list[str]) -> str | None:
    """The module that runs ``bertkit evaluate ARGV`` when its ``--task`` is a sentence-embedding task or BLiMP."""
    pairs = zip(argv, argv[1:] + [""])
    if "--task=blimp" in argv or ("--task", "blimp") in pairs:
        return BLIMP
    return route("evaluate", argv)


@dataclass(kw_only=True)
class InferenceFiles:
    """What ``evaluate`` and ``predict`` read and write."""

    model: str = option(required=True, help="a fine-tuned OUTPUT directory of `bertkit finetune`")
    data: str = option(required=True, help="file in the task's format (evaluate needs its labels, predict does not)")
    output: str | None = option(
        None,
        help="where metrics.json and the predictions go "
        "(default: MODEL/eval-<data file name> or MODEL/predict-<data file name>)",
    )
    batch_size: int = option(64, help="examples per batch")
    quantize: str | None = option(
        None, choices=("int8",), help="int8: dynamic int8 Linear layers on the CPU (faster; see docs/inference.md)"
    )
    backend: str = option(
        "torch",
        choices=("torch", "onnx"),
        help="torch, or onnx: ONNX Runtime (CPU, fp32; int8 with --quantize) on MODEL/model.onnx "
        "(MODEL/model.int8.onnx), e.g. a `bertkit export --onnx` directory without PyTorch "
        "weights, or on a graph exported now",
    )


def configure(parser: argparse.ArgumentParser) -> None:
    add_options(parser, InferenceFiles)
    add_task_flag(parser, required=False)
    add_options(parser, RunOptions)
    add_options(parser, TaskOptions, exclude=FINETUNE_ONLY)


def run(args: argparse.Namespace, labelled: bool = True) -> int:
    from bertkit import runtime
    from bertkit.commands.finetune import load_finetuned
    from bertkit.files import write_json
    from bertkit.precision import resolve_device

    files: InferenceFiles = from_args(InferenceFiles, args)
    run_options: RunOptions = from_args(RunOptions, args)
    files.backend = _backend_for(Path(files.model), files.backend)
    if files.backend == "onnx":
        device = run_options.device or "cpu"  # a GPU is refused: ONNX Runtime's CPU provider
        task, loaded, tokenizer = _load_onnx(files, args, device)
    else:
        task, model, tokenizer = load_finetuned(files.model, args.task, args)
        # int8 kernels are CPU-only: --quantize without --device runs on the CPU even where a GPU is present
        device = (run_options.device or "cpu") if files.quantize else resolve_device(run_options.device)
        loaded = runtime.load(model, quantize=files.quantize, precision=run_options.precision, device=device)
    model, precision = loaded.model, loaded.precision
    examples = task.read(files.data, labelled=labelled, skip_bad_rows=run_options.skip_bad_rows)
    features = task.featurize(examples, tokenizer)
    kind = "eval" if labelled else "predict"
    output = Path(files.output or Path(files.model) / f"{kind}-{Path(files.data).stem}")
    output.mkdir(parents=True, exist_ok=True)
    preds = task.predict(
        model,
        examples,
        features,
        files.batch_size,
        precision,
        device,
        progress=not run_options.quiet and sys.stderr.isatty(),
    )
    written = task.write_predictions(output, examples, preds)
    # how the numbers were computed (as finetune's metrics.json): precision, backend, device, int8 or not
    record = {
        "precision": precision,
        "backend": "onnxruntime" if files.backend == "onnx" else "pytorch",
        "device": str(device).split(":")[0],
        "quantize": files.quantize,
    }
    result = {
        "output": str(output),
        "examples": len(examples),
        "skipped_rows": examples.skipped,
        "predictions": [str(p) for p in written],
        **record,
    }
    if labelled:
        metrics = task.metrics(examples, preds)
        write_json(output / "metrics.json", {**metrics, **record})
        result["metrics"] = {k: v for k, v in metrics.items() if not isinstance(v, dict)}
    print(json.dumps(result, sort_keys=True))
    return 0


def _backend_for(model_dir: Path, backend: str) -> str:
    """``onnx`` for a directory that holds an ONNX graph and no PyTorch weights (``bertkit export --onnx``'s: nothing
    else there can run), with a note on stderr; else ``backend`` as given."""
    from bertkit.checkpoint import find_weights
    from bertkit.export import onnx_name

    if backend == "onnx" or not model_dir.is_dir():
        return backend
    try:
        find_weights(model_dir)
    except FileNotFoundError:
        graphs = [n for n in (onnx_name(), onnx_name("int8")) if (model_dir / n).is_file()]
        if graphs:
            print(
                f"bertkit: {model_dir} holds no PyTorch weights, only {graphs[0]}: running it with ONNX Runtime "
                "(--backend onnx)",
                file=sys.stderr,
            )
            return "onnx"
    return backend


def _load_onnx(files: InferenceFiles, args: argparse.Namespace, device: str):
    """(task, ONNX Runtime model as ``bertkit.runtime.load`` gives it, tokenizer) of a fine-tuned or exported
    directory: the task as the PyTorch path reads it (finetune_config.json, then the command's task flags), no
    PyTorch weights needed."""
    from bertkit import models, runtime
    from bertkit.tokenization import load_tokenizer

    model_dir = Path(files.model)
    task = task_of_directory(model_dir, args.task, args)
    config = models.of_directory(model_dir).config_class().from_pretrained(model_dir)  # every graph runs alike
    if task.labels is None and config.id2label and not getattr(task, "regression", False):
        task.labels = [config.id2label[i] for i in range(len(config.id2label))]
    tokenizer = load_tokenizer(model_dir)
    loaded = runtime.load(directory=model_dir, config=config, backend="onnx", quantize=files.quantize, device=device)
    return task, loaded, tokenizer
