"""Running a fine-tuned model on a file, as ``bertkit evaluate`` (labelled: metrics too) and ``bertkit predict``
do (their flags: ``bertkit.tasks.options.InferenceFiles``): the model directory's task, the model on the PyTorch or
ONNX Runtime backend (int8 or not), its predictions written in the task's format. The commands only parse and
print."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from pathlib import Path
from typing import Any

from bertkit import models, runtime
from bertkit.checkpoint import find_weights
from bertkit.config import check_vocabulary_fits
from bertkit.export import head_outputs, onnx_name
from bertkit.files import write_json
from bertkit.modeldir import ModelDir
from bertkit.options import from_args
from bertkit.outputs import check_output, removed_on_failure
from bertkit.precision import resolve_device
from bertkit.tasks.options import InferenceFiles, RunOptions, load_finetuned, load_model, task_of_directory

log = logging.getLogger(__name__)


def run(args: argparse.Namespace, labelled: bool = True) -> dict[str, Any]:
    """Run ``args.model`` on ``args.data``; write the predictions (and, ``labelled``, metrics.json): the summary."""
    files: InferenceFiles = from_args(InferenceFiles, args)
    run_options: RunOptions = from_args(RunOptions, args)
    kind = "eval" if labelled else "predict"
    output = Path(files.output or Path(files.model) / f"{kind}-{Path(files.data).stem}")
    # a directory of its own: never the model or the data (an existing one is written into, as a rerun does); the
    # default, MODEL/eval-DATA, lies inside the model's directory by design: only the one the user names is checked
    # against --model
    inputs = {"--model": files.model, "--data": files.data} if files.output else {"--data": files.data}
    check_output(output, inputs, overwrite=None, figures=True)  # never into a model directory (its metrics.json)
    backend, note = _backend_for(Path(files.model), files.backend)
    files = dataclasses.replace(files, backend=backend)
    if files.backend == "onnx":
        device = resolve_device(run_options.device, cpu_only=True)  # ONNX Runtime's CPU provider
        task, loaded, tokenizer = _load_onnx(files, args, device)
        if note:  # said once the graph loaded: a refusal stays the one line
            log.warning("%s", note)
    else:
        task, model, tokenizer = load_finetuned(files.model, args.task, args)
        # int8 kernels are CPU-only: --quantize without --device runs on the CPU even where a GPU is present
        device = resolve_device(run_options.device, cpu_only=bool(files.quantize))
        loaded = runtime.load(model, quantize=files.quantize, precision=run_options.precision, device=device)
    model, precision = loaded.model, loaded.precision
    examples = task.read(files.data, labelled=labelled, skip_bad_rows=run_options.skip_bad_rows)
    features = task.featurize(examples, tokenizer)
    with removed_on_failure(output):  # a failed run leaves no directory it made
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
    return result


def _backend_for(model_dir: Path, backend: str) -> tuple[str, str | None]:
    """(``onnx``, a note for stderr) for a directory that holds an ONNX graph and no PyTorch weights (``bertkit
    export --onnx``'s: nothing else there can run); else (``backend`` as given, None)."""
    if backend == "onnx" or not model_dir.is_dir():
        return backend, None
    try:
        find_weights(model_dir)
    except FileNotFoundError:
        graphs = [n for n in (onnx_name(), onnx_name("int8")) if (model_dir / n).is_file()]
        if graphs:
            note = f"bertkit: {model_dir} holds no PyTorch weights, only {graphs[0]}: running it with ONNX Runtime"
            return "onnx", note + " (--backend onnx)"
    return backend, None


def _load_onnx(files: InferenceFiles, args: argparse.Namespace, device: str):
    """(task, ONNX Runtime model as ``bertkit.runtime.load`` gives it, tokenizer) of a fine-tuned or exported
    directory: the task as the PyTorch path reads it (finetune_config.json, then the command's task flags), no
    PyTorch weights needed. The directory is read once (:class:`bertkit.modeldir.ModelDir`)."""
    model_dir = ModelDir.open(files.model)
    task = task_of_directory(model_dir, args.task, args)
    try:
        model_dir.weights()
    except FileNotFoundError:
        pass  # an exported directory: its graph is checked against the task's head as it loads
    else:  # the graph comes from these weights: a directory without the task's head is refused as on PyTorch
        load_model(task, model_dir, finetuned=True)
    config = models.of_directory(model_dir).config_class().from_pretrained(model_dir)  # every graph runs alike
    if task.labels is None and config.id2label and not getattr(task, "regression", False):
        task.labels = [config.id2label[i] for i in range(len(config.id2label))]
    tokenizer = model_dir.tokenizer()
    check_vocabulary_fits(model_dir, len(tokenizer), config.vocab_size)
    loaded = runtime.load(
        directory=model_dir,
        config=config,
        backend="onnx",
        quantize=files.quantize,
        device=device,
        outputs=head_outputs(task.model_class.__name__),  # the task's head: a bare encoder's graph is refused
    )
    return task, loaded, tokenizer
