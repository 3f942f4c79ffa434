"""The flags ``finetune``, ``evaluate`` and ``predict`` share, each defined once (``bertkit.options``).

- ``--task``: a name of the task registry (``bertkit.tasks.TASKS``); required by ``finetune``, read from the
  fine-tuned model's ``finetune_config.json`` by ``evaluate`` / ``predict``.
- ``RunOptions``: device, precision, progress output, bad-row handling.
- ``TaskOptions``: the task family's settings (sequence length, columns, SQuAD windows...). ``None`` means "the
  task's default" for ``finetune`` and "the value saved with the fine-tuned model" for ``evaluate`` / ``predict``.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.config import check_vocabulary_fits
from bertkit.errors import InputError
from bertkit.modeldir import ModelDir
from bertkit.options import (
    add_options,
    check_bounds,
    device_option,
    from_args,
    model_option,
    option,
    output_option,
    output_path,
    precision_option,
    quiet_option,
)
from bertkit.tasks import TASK_CONFIG_NAME, TASK_NAMES, get_task, read_task_config

GENERIC = "generic files (--task classification / tagging)"
SQUAD = "SQuAD"
FEATURE_BASED = "feature-based tagging (--task conll2003 / tagging)"
# the feature-based tagger is chosen at fine-tuning time; evaluate / predict read it from the model directory
FILES = "files and data"  # the help group of the files flags
FINETUNE_ONLY = ("feature_based", "feature_layers", "tagger", "tagger_hidden")


def task_option(required: bool, extra: tuple[str, ...] = (), help: str | None = None) -> Any:
    """``task``: ``--task`` with the registry's names as choices, and ``extra``: the other tasks the command runs
    (distill's embeddings; those ``evaluate`` hands to its variants, cli.VARIANTS), so that an unknown task's
    "invalid choice" names every task the command runs."""
    default_help = "task family or GLUE task: " + ", ".join(TASK_NAMES)
    default_help += "" if required else " (default: the fine-tuned model's)"
    return option(None, choices=(*TASK_NAMES, *extra), required=required, metavar="TASK", help=help or default_help)


@dataclass(frozen=True)
class RunOptions:
    """How a fine-tuning, evaluation or prediction run computes: shared by the three commands."""

    device: str | None = device_option()
    precision: str = precision_option()
    quiet: bool = quiet_option("no progress bar or per-evaluation lines")
    skip_bad_rows: bool = option(False, help="skip and count malformed rows instead of stopping at the first")


@dataclass(frozen=True)
class TaskOptions:
    """A task family's settings; ``None`` = the task's default, or the value saved with a fine-tuned model."""

    max_seq_length: int | None = option(
        None, help="tokens per input (default 128, SQuAD 384; evaluate / predict: the fine-tuning value)"
    )
    text_column: str | None = option(None, group=GENERIC, help="column (or JSONL field) with the text (default 'text')")
    pair_column: str | None = option(None, group=GENERIC, help="column with the second text of a pair")
    label_column: str | None = option(None, group=GENERIC, help="column with the label (default 'label')")
    regression: bool = option(False, group=GENERIC, help="labels are numbers (MSE head)")
    data_format: str | None = option(
        None,
        flag="--format",
        choices=("csv", "tsv", "jsonl"),
        group=GENERIC,
        help="file format (default: from the extension)",
    )
    tag_column: int | None = option(None, group=GENERIC, help="CoNLL column holding the tag (default -1)")
    doc_stride: int | None = option(None, group=SQUAD, help="tokens between window starts (default 128)")
    max_query_length: int | None = option(None, group=SQUAD, help="question tokens kept (default 64)")
    n_best_size: int | None = option(None, group=SQUAD, help="start/end candidates per window (default 20)")
    max_answer_length: int | None = option(None, group=SQUAD, help="longest answer in tokens (default 30)")
    null_score_diff_threshold: float | None = option(
        None, group=SQUAD, help="v2.0: predict no answer when null score - best span score > this (default 0.0)"
    )
    answer_text: str | None = option(
        None,
        group=SQUAD,
        choices=("google", "chars", "words"),
        help="how a predicted token span becomes answer text: google = run_squad.py's get_final_text (the "
        "de-tokenized word pieces projected onto the original words; default), chars = the context's "
        "characters from the first piece's start to the last piece's end, words = chars widened to whole words",
    )
    feature_based: bool = option(
        False, group=FEATURE_BASED, help="freeze BERT; train a small tagger on the concatenation of --feature-layers"
    )
    feature_layers: str | None = option(
        None, group=FEATURE_BASED, help="comma-separated layer indices (default -1,-2,-3,-4)"
    )
    tagger: str | None = option(
        None, group=FEATURE_BASED, choices=("bilstm", "mlp"), help="tagger on the features (default bilstm)"
    )
    tagger_hidden: int | None = option(None, group=FEATURE_BASED, help="tagger hidden size (default 256)")

    def given(self) -> dict[str, Any]:
        """The options set on the command line: not None, and bools only when switched on (they have no
        --no- form, so False means "not given" and must not override a saved True)."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None and getattr(self, f.name) is not False
        }


def task_options(args: argparse.Namespace, saved: dict[str, Any] | None = None) -> dict[str, Any]:
    """Task flags given on the command line, over the ones saved with a fine-tuned model."""
    options: dict[str, Any] = dict(saved or {})
    options.pop("family", None)
    options.pop("task", None)
    options.update(from_args(TaskOptions, args).given())
    return options


def task_for_model(name: str, options: dict[str, Any], model_dir: str | Path):
    """``get_task(name, **options)`` whose ``max_seq_length`` fits the model of ``model_dir``: a length given
    (``--max-seq-length``, or saved with a fine-tuned model) past its ``max_position_embeddings`` is refused in one
    line naming the flag, before anything is written; the task's default (128, SQuAD 384) is cut to the positions
    the model has. (The low end, [CLS] + a token + [SEP], is ``bertkit.options.BOUNDS``'.)"""
    task = get_task(name, **options)
    config = ModelDir.open(model_dir).config_json
    positions = config.get("max_position_embeddings") if config is not None else None
    length = getattr(task, "max_seq_length", None)
    if isinstance(positions, int) and positions > 0 and isinstance(length, int) and length > positions:
        if "max_seq_length" in options:
            raise InputError(
                f"--max-seq-length {length}: the model in {model_dir} has {positions} positions "
                f"(max_position_embeddings); give at most {positions}"
            )
        task = get_task(name, **{**options, "max_seq_length": positions})
    return task


# the saved keys that are no TaskOptions flag: their types (None: any of them may be null)
_SAVED_TYPES: dict[str, tuple[type, ...]] = {
    "task": (str,),
    "family": (str, type(None)),
    "version": (str, type(None)),
    "group_size": (int, type(None)),
    "eval_candidates": (int, type(None)),
    "feature_layers": (list, str, type(None)),  # saved as the list of layer indices the tagger was trained on
}


def saved_task_config(model_dir: str | Path) -> dict[str, Any]:
    """The task config saved with a fine-tuned model (``finetune_config.json``; ``{}`` where there is none), each
    value checked against its flag's type (``TaskOptions``; ``labels``: a list of names), the task against the
    registry: a hand-edited file is refused naming it and the key (a list where a column name goes, an unknown task)
    instead of failing deep inside the task. Keys no task reads are left out."""
    import typing

    saved = read_task_config(model_dir)
    path = Path(model_dir) / TASK_CONFIG_NAME
    hints = typing.get_type_hints(TaskOptions)
    types = {f.name: _flag_types(hints[f.name]) for f in dataclasses.fields(TaskOptions)} | _SAVED_TYPES
    out: dict[str, Any] = {}
    for key, value in saved.items():
        if key == "labels":
            names = isinstance(value, list) and all(isinstance(v, str | int) and not isinstance(v, bool) for v in value)
            if value is not None and not names:
                raise InputError(f"{path}: labels must be a list of label names, got {value!r}"[:300])
        elif key == "feature_layers" and isinstance(value, list):
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
                raise InputError(f"{path}: feature_layers must be a list of layer indices, got {value!r}"[:300])
        elif key in types:
            want = types[key]
            if not isinstance(value, want) or (isinstance(value, bool) and bool not in want):  # True is an int
                names = " or ".join("null" if t is type(None) else t.__name__ for t in want)
                raise InputError(f"{path}: {key} must be {names}, got {value!r}"[:300])
        else:
            continue
        out[key] = value
    if "task" in out and out["task"] not in TASK_NAMES:
        raise InputError(f"{path}: task {out['task']!r} is not one bertkit knows ({', '.join(TASK_NAMES)})"[:300])
    flags = {f.name for f in dataclasses.fields(TaskOptions)}
    # the numbers meet the flags' ranges (bertkit.options.BOUNDS), as on the command line
    check_bounds(TaskOptions(**{k: v for k, v in out.items() if k in flags}), lambda m: InputError(f"{path}: {m}"))
    return out


def _flag_types(tp: Any) -> tuple[type, ...]:
    """The JSON types a ``TaskOptions`` field's saved value may have: its base type (a float also takes an int),
    and null."""
    import typing

    args = [a for a in typing.get_args(tp) if a is not type(None)] or [tp]
    base = args[0]
    return (int, float, type(None)) if base is float else (base, type(None))


def task_of_directory(model_dir: Path | ModelDir, task_name: str | None, args: argparse.Namespace):
    """The task of a fine-tuned model directory: ``--task``, else the one its task config names, built with the
    saved options under the command's task flags."""
    if not Path(model_dir).is_dir():
        raise InputError(f"--model {model_dir}: no such directory")
    saved = saved_task_config(model_dir)
    name = task_name or saved.get("task")
    if not name:
        raise InputError(f"{model_dir}: no {TASK_CONFIG_NAME}; pass --task")
    return task_for_model(name, task_options(args, saved), model_dir)


@dataclass(frozen=True, kw_only=True)
class FinetuneFiles:
    """What ``bertkit finetune`` reads and writes."""

    train: str = option(required=True, group=FILES, help="training file")
    dev: str | None = option(None, group=FILES, help="dev file: evaluated each epoch; the best checkpoint is kept")
    model: str = model_option(
        "bertkit or Hugging Face BERT or ModernBERT directory (config.json + model.safetensors or "
        "pytorch_model.bin + vocab.txt or tokenizer.json)",
        group=FILES,
    )
    output: str = output_option(group=FILES, help="output directory (model, vocab, metrics.json, predictions)")
    max_train_examples: int = option(0, group=FILES, help="use only the first N training examples (0 = all)")
    max_eval_examples: int = option(0, group=FILES, help="use only the first N dev examples (0 = all)")
    dropout: float | None = option(
        None, help="set every dropout probability (default: the model's config.json, 0.1 for Google's models)"
    )

    def read(self, task, skip_bad_rows: bool) -> tuple[list, list | None]:
        """(training examples, dev examples or None) read by ``task``, cut to --max-train/eval-examples."""
        train = task.read(self.train, labelled=True, skip_bad_rows=skip_bad_rows)
        dev = task.read(self.dev, labelled=True, skip_bad_rows=skip_bad_rows) if self.dev else None
        if self.max_train_examples:
            del train[self.max_train_examples :]
        if dev is not None and self.max_eval_examples:
            del dev[self.max_eval_examples :]
        return train, dev


def load_model(task, model_dir: str | Path, finetuned: bool):
    """``task.load_model``, with a missing directory or weights file reported as bad input naming it."""
    try:
        return task.load_model(model_dir, finetuned=finetuned)
    except FileNotFoundError as e:
        raise InputError(str(e)) from None


def load_finetuned(model_dir: str | Path, task_name: str | None, args: argparse.Namespace):
    """(task, model, tokenizer) of a fine-tuned OUTPUT directory, read once (:class:`bertkit.modeldir.ModelDir`)."""
    model_dir = ModelDir.open(model_dir)
    task = task_of_directory(model_dir, task_name, args)
    tokenizer = model_dir.tokenizer()
    model = load_model(task, model_dir, finetuned=True)
    check_vocabulary_fits(model_dir, len(tokenizer), model.config.vocab_size)
    return task, model, tokenizer


@dataclass(frozen=True, kw_only=True)
class InferenceFiles:
    """What ``evaluate`` and ``predict`` read and write."""

    model: str = model_option("a fine-tuned OUTPUT directory of `bertkit finetune`")
    data: str = option(required=True, help="file in the task's format (evaluate needs its labels, predict does not)")
    output: str | None = option(
        None,
        parse=output_path,  # a path that cannot be written is refused when the command line is parsed
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


@dataclass(frozen=True, kw_only=True)
class InferenceConfig(TaskOptions, RunOptions, InferenceFiles):
    """What ``bertkit evaluate`` and ``bertkit predict`` read, write and how they run: the files, ``--task`` (default:
    the fine-tuned model's), the run's options and the task's (those saved with the model unless given)."""

    task: str | None = task_option(required=False)
    # chosen at fine-tuning time: evaluate / predict read them from the model directory
    feature_based: bool = option(False, skip=True)
    feature_layers: str | None = option(None, skip=True)
    tagger: str | None = option(None, skip=True)
    tagger_hidden: int | None = option(None, skip=True)


def configure_inference(parser: argparse.ArgumentParser) -> None:
    """The flags of ``evaluate`` and ``predict`` (``InferenceConfig``'s), for a caller that builds its own parser."""
    add_options(parser, InferenceConfig)
