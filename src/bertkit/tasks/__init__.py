"""Fine-tuning task families: head wiring, example -> features, metric, prediction writer.

Every family (``classification``, ``squad``, ``tagging``, ``multiple_choice``) is a class with the same small
surface, used by ``bertkit.recipes.finetune`` and the ``finetune`` / ``evaluate`` / ``predict`` commands:

- ``read(path, labelled)`` -> examples (readers in ``bertkit.data.tasks``; errors name the file and line);
- ``fit_labels(train_examples)`` / ``task_config()`` / ``from_task_config(cfg)``: the label set, saved with the model;
- ``model_class`` and ``model_overrides()`` (``num_labels``, ``id2label``...) for ``BertFor*.from_pretrained``;
- ``featurize(examples, tokenizer, training)`` -> features (plain dicts of int lists; ``len`` for bucketing);
- ``collate(features)`` -> the model's keyword tensors, padded to the longest in the batch;
- ``predict(model, examples, features, ...)`` -> predictions; ``metrics(examples, predictions)``;
- ``write_predictions(directory, examples, predictions)`` in the task's official format.

Shared helpers here: length-bucketed training batches, and batched inference (``run_inference``: the features'
collate around the one batch loop, ``bertkit.runtime``); batches and padding come from the one planner and collate,
``bertkit.batches``.

Meters of a pre-trained model's masked LM live here too, below the recipes that probe with them: ``mlm`` (held-out
masked-LM accuracy), ``cloze``, and ``blimp`` (BLiMP's minimal pairs by pseudo-log-likelihood: ``bertkit evaluate
--task blimp`` and the pre-training loop's ``--blimp`` probe).
"""

from __future__ import annotations

import importlib
import inspect
import random
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from bertkit.config import read_config_file  # one reader of JSON objects (deep nesting, huge numbers...)
from bertkit.data.tasks.glue import GLUE_TASKS
from bertkit.errors import InputError
from bertkit.models import for_directory

LABEL_KEYS = ("labels", "start_positions", "end_positions")

# A fine-tuned model directory's task and its options (labels, columns...): written by ``recipes.finetune``, read by
# the inference commands and ``bertkit.pipelines``.
TASK_CONFIG_NAME = "finetune_config.json"

# The one task registry: ``--task`` name -> (module, class). A new task is one entry here; its class takes
# ``(name, **task_options)`` and implements the ``TaskBase`` surface. GLUE's names come from its own registry,
# ``bertkit.data.tasks.glue.GLUE_TASKS`` (aliases such as ``diagnostic`` left out of the choices).
TASKS: dict[str, tuple[str, str]] = {
    **{
        name: ("bertkit.tasks.classification", "ClassificationTask")
        for name, spec in GLUE_TASKS.items()
        if spec.name == name
    },
    "classification": ("bertkit.tasks.classification", "ClassificationTask"),
    "squad": ("bertkit.tasks.squad", "SquadTask"),
    "squad_v2": ("bertkit.tasks.squad", "SquadTask"),
    "conll2003": ("bertkit.tasks.tagging", "TaggingTask"),
    "tagging": ("bertkit.tasks.tagging", "TaggingTask"),
    "swag": ("bertkit.tasks.multiple_choice", "MultipleChoiceTask"),
    "rerank": ("bertkit.tasks.rerank", "RerankTask"),
}
TASK_NAMES = tuple(TASKS)


def read_task_config(directory: str | Path) -> dict[str, Any]:
    """The saved task config of a fine-tuned model directory, ``{}`` where it has none. A file that is not a JSON
    object is an :class:`InputError` naming it (``bertkit.tasks.options.saved_task_config`` checks its values)."""
    path = Path(directory) / TASK_CONFIG_NAME
    if not path.is_file():
        return {}
    return read_config_file(path)


def get_task(name: str, **options: Any):
    """The task object for a ``--task`` name; ``options`` are the command's task flags (columns, strides...)."""
    if name not in TASKS:
        raise InputError(f"--task: unknown task {name!r}; choose one of {', '.join(TASK_NAMES)}")
    module, cls = TASKS[name]
    return getattr(importlib.import_module(module), cls)(name, **options)


# a GLUE task's files have fixed columns and labels (data.tasks.glue): the generic files' settings do not apply
GLUE_FIXED = ("text_column", "pair_column", "label_column", "regression", "data_format")
# settings of the feature-based tagger, which --feature-based turns on
FEATURE_BASED = ("feature_layers", "tagger", "tagger_hidden")


def check_task_flags(name: str, given: dict[str, Any], flags: dict[str, str]) -> None:
    """Refuse, in one line naming the flag, a task setting given on the command line (``given``: field -> value;
    ``flags``: field -> its flag) that ``--task name`` does not use, where it would be silently ignored (issue 54,
    item 10): ``--doc-stride`` for sst2, ``--text-column`` for a GLUE task, ``--tagger`` without
    ``--feature-based``; and the same column named twice (the label read from the text)."""
    module, cls = TASKS[name]
    params = inspect.signature(getattr(importlib.import_module(module), cls).__init__).parameters
    used = {p for p in params if params[p].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD} - {"self", "name"}
    used -= set(GLUE_FIXED) if name in GLUE_TASKS else set()
    used -= set() if given.get("feature_based") else set(FEATURE_BASED)
    for field in given:
        if field not in used:
            who = "only --feature-based uses it" if field in FEATURE_BASED else f"--task {name} does not use it"
            raise InputError(f"{flags[field]}: {who}; leave the flag out")
    columns = [f for f in ("text_column", "pair_column", "label_column") if f in given]
    for i, a in enumerate(columns):
        for b in columns[i + 1 :]:
            if given[a] == given[b]:
                raise InputError(f"{flags[b]} {given[b]!r}: the same column as {flags[a]}; name another")


def check_flags_for_model(
    model_dir: str | Path, name: str | None, given: dict[str, Any], flags: dict[str, str]
) -> None:
    """:func:`check_task_flags` for the task of a fine-tuned directory (``--task``, else its task config's): what
    ``evaluate``, ``predict`` and ``distill`` run. Without a task it passes; the loader says to pass ``--task``."""
    name = name or read_task_config(model_dir).get("task")
    if name in TASKS:
        check_task_flags(name, given, flags)


def check_length_fits(length: int | None, model_dir: str | Path, default: int | None = None) -> None:
    """``--max-seq-length`` given past the positions of the model in ``model_dir`` (its config.json's
    ``max_position_embeddings``) is refused in one line naming the flag, before anything is written; ``default`` (the
    command's own, cut to a shorter model) and None pass. For the commands that read no task (the embedding tasks,
    embedding distillation); ``tasks.options.task_for_model`` fits a task's."""
    config = Path(model_dir) / "config.json"
    positions = read_config_file(config).get("max_position_embeddings") if config.is_file() else None
    if isinstance(positions, int) and length is not None and length != default and 0 < positions < length:
        raise InputError(
            f"--max-seq-length {length}: the model in {model_dir} has {positions} positions "
            f"(max_position_embeddings); give at most {positions}"
        )


# --------------------------------------------------------------------------------------------- batching helpers


def length_batches(
    lengths: Sequence[int], batch_size: int, shuffle: bool, seed: int = 0, bucket: int = 50
) -> list[list[int]]:
    """Index batches of similar length, so that padding to the longest in each batch wastes little.

    Training (``shuffle``): shuffle, sort within chunks of ``bucket`` batches, cut, then shuffle the batches,
    so each epoch sees a different order while lengths stay grouped. Inference: one global sort by length.
    """
    # torch: `bertkit evaluate -h` and every task's flags import this package without it
    from bertkit.batches import cut_batches, plan_batches

    if not shuffle:
        return plan_batches(lengths, batch_size, longest_first=False)
    order = list(range(len(lengths)))
    rng = random.Random(seed)
    rng.shuffle(order)
    chunk = batch_size * bucket
    batches = []
    for c in range(0, len(order), chunk):
        batches += cut_batches(sorted(order[c : c + chunk], key=lambda i: lengths[i]), lengths, batch_size, None)
    rng.shuffle(batches)
    return batches


def feature_length(feature: dict) -> int:
    """Tokens of a feature, for length bucketing (multiple choice stores its longest choice in ``length``)."""
    return feature.get("length") or len(feature["input_ids"])


def pad(seqs: Sequence[Sequence[int]], value: int = 0, multiple_of: int = 8):
    """[B, T] long tensor of ``seqs`` right-padded with ``value`` to the longest, rounded up to ``multiple_of``
    (:func:`bertkit.batches.pad`; the task models' batches round to 8)."""
    # torch: kept out of this package's import (see length_batches)
    from bertkit.batches import pad as pad_sequences

    return pad_sequences(seqs, value, multiple_of)


def collate_inputs(features: Sequence[dict], pad_id: int = 0) -> dict[str, Any]:
    """input_ids / token_type_ids / attention_mask [B, T] padded to the batch's longest, rounded up to 8
    (:func:`bertkit.batches.collate`)."""
    # torch: kept out of this package's import (see length_batches)
    from bertkit.batches import collate

    input_ids, token_type_ids, attention_mask = collate(
        [f["input_ids"] for f in features], [f["token_type_ids"] for f in features], pad_id, multiple_of=8
    )
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}


def run_inference(
    model,
    features: Sequence[dict],
    collate: Callable[[Sequence[dict]], dict],
    batch_size: int,
    precision: str = "fp32",
    device: str = "cpu",
    progress: bool = False,
) -> Iterator[tuple[list[int], Any]]:
    """Yield (feature indices, model output) over length-sorted batches (shortest first; on a CPU under the token
    cap the Encoder uses), in eval mode, without gradients: :func:`bertkit.runtime.batch_loop` over ``model`` (a
    PyTorch head or an ONNX Runtime model) with the features collated and their labels left out."""
    # torch: kept out of this package's import (see length_batches)
    from bertkit import runtime

    model.eval()

    def run(idx: list[int]) -> Any:
        batch = collate([features[i] for i in idx])
        return model(**{k: v.to(device) for k, v in batch.items() if k not in LABEL_KEYS})

    yield from runtime.batch_loop(
        [feature_length(f) for f in features],
        run,
        batch_size,
        runtime.forward_tokens(getattr(model, "config", None), device),
        device=device,
        precision=precision,
        longest_first=False,
        progress=progress,
        desc="eval",
        leave=False,
    )


def load_trained(model_class, model_dir, task_name: str):
    """A fine-tuned model of ``model_class`` from ``model_dir``, refused if its weights lack the task head
    (``classifier.*``, ``qa_outputs.*``, the pooler the head reads...): loading would initialise it at random, and
    predictions from it mean nothing. Only ``finetune`` may create a head."""

    model, info = for_directory(model_class, model_dir).from_pretrained(model_dir, output_loading_info=True)
    missing = info.initialised
    if missing:
        raise InputError(
            f"{model_dir}: no trained {task_name} head: the weights lack {', '.join(missing[:4])}"
            + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
            + f". Fine-tune it first (bertkit finetune --task {task_name} --model {model_dir} ...); evaluate and "
            "predict never use a freshly initialised head"
        )
    return model


class TaskBase:
    """Defaults shared by the task families (see the module docstring for the surface)."""

    name = ""
    family = ""
    head = ""  # the BertFor* class name of the family's head (its ModernBERT counterpart is chosen per directory)
    labels: list[str] | None = None

    @property
    def model_class(self) -> type:
        # torch: kept out of this package's import (see length_batches)
        from bertkit import modeling

        return getattr(modeling, self.head)

    def fit_labels(self, train_examples: Sequence) -> None:
        return None

    def model_overrides(self) -> dict[str, Any]:
        return {}

    def load_model(self, model_dir, finetuned: bool):
        """The head model from a directory: a pre-trained encoder (head initialised, ``model_overrides`` applied)
        or, with ``finetuned``, a fine-tuned model whose ``id2label`` restores the label set if unknown."""
        if not finetuned:
            return for_directory(self.model_class, model_dir).from_pretrained(model_dir, **self.model_overrides())
        model = load_trained(self.model_class, model_dir, self.name)
        id2label = model.config.id2label
        if self.labels is None and id2label and not getattr(self, "regression", False):
            self.labels = [id2label[i] for i in range(len(id2label))]
        return model
