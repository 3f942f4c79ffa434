"""``bertkit evaluate``: run a fine-tuned model on a labelled file; write metrics.json and the predictions."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def configure(parser: argparse.ArgumentParser) -> None:
    from bertkit.commands.finetune import add_task_options

    parser.add_argument("--model", required=True, help="a fine-tuned OUTPUT directory of `bertkit finetune`")
    parser.add_argument("--data", required=True, help="labelled file in the task's format")
    parser.add_argument("--output", default=None, help="where metrics.json and the predictions go "
                        "(default: MODEL/eval-<data file name>)")
    parser.add_argument("--batch-size", type=int, default=64)
    add_task_options(parser, task_required=False)


def run(args: argparse.Namespace, labelled: bool = True) -> int:
    from bertkit.commands.finetune import load_finetuned, resolve_device
    from bertkit.data.readers import DataError
    from bertkit.files import write_json
    from bertkit.precision import resolve_precision

    command = "evaluate" if labelled else "predict"
    try:
        task, model, tokenizer = load_finetuned(args.model, args.task, args)
        examples = task.read(args.data, labelled=labelled, skip_bad_rows=args.skip_bad_rows)
        device = resolve_device(args.device)
        precision = resolve_precision(args.precision, device)
        model.to(device)
        features = task.featurize(examples, tokenizer)
    except (DataError, FileNotFoundError, ValueError) as e:
        print(f"bertkit {command}: error: {e}", file=sys.stderr)
        return 2
    output = Path(args.output or Path(args.model) / f"{'eval' if labelled else 'predict'}-{Path(args.data).stem}")
    output.mkdir(parents=True, exist_ok=True)
    preds = task.predict(model, examples, features, args.batch_size, precision, device,
                         progress=not args.quiet and sys.stderr.isatty())
    written = task.write_predictions(output, examples, preds)
    result = {"output": str(output), "examples": len(examples), "skipped_rows": examples.skipped,
              "predictions": [str(p) for p in written]}
    if labelled:
        metrics = task.metrics(examples, preds)
        write_json(output / "metrics.json", metrics)
        result["metrics"] = {k: v for k, v in metrics.items() if not isinstance(v, dict)}
    print(json.dumps(result, sort_keys=True))
    return 0
