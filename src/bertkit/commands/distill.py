"""``bertkit distill``: distil a fine-tuned teacher directory into a smaller student on the teacher's task.

    bertkit distill --teacher runs/sst2-base --student bert-mini --train train.tsv --dev dev.tsv \\
        [--unlabeled more.tsv ...] --output runs/sst2-mini

The student is a preset (``bert-tiny`` ... ``modernbert-mini`` ...), a pre-trained directory with the teacher's
vocabulary, or ``layers:K`` (every K-th layer of the teacher). The training flags are ``bertkit finetune``'s; the
output is a fine-tuned model directory like the one ``finetune`` writes.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from bertkit.embeddings.data import read_scored, read_texts
from bertkit.errors import InputError
from bertkit.options import from_args, option, option_flags
from bertkit.outputs import MODEL_FILES, check_output, removed_if_refused
from bertkit.recipes.distill import DistillArgs, distill, without_labels
from bertkit.recipes.distill_embeddings import distill_embeddings, load_teacher
from bertkit.recipes.distill_student import build_student
from bertkit.recipes.finetune import run_in_context, set_seed
from bertkit.tasks import TASK_NAMES, check_flags_for_model, check_length_fits, read_task_config
from bertkit.tasks.options import FILES, FinetuneFiles, TaskOptions, load_finetuned, task_option


@dataclass(frozen=True, kw_only=True)
class DistillFiles(FinetuneFiles):
    """What ``bertkit distill`` reads and writes: ``finetune``'s files, the teacher and student for its model."""

    model: str | None = option(None, skip=True)
    teacher: str = option(required=True, group=FILES, help="fine-tuned teacher directory (bertkit finetune's output)")
    student: str = option(
        required=True,
        group=FILES,
        help="a preset (bert-tiny, bert-mini..., modernbert-tiny...; random, the teacher's vocabulary), a "
        "pre-trained directory with the teacher's vocabulary, or layers:K (every K-th layer of the teacher, "
        "starting with the first: DistilBERT's initialisation)",
    )
    unlabeled: list[str] = option(
        default_factory=list,
        nargs="+",
        group=FILES,
        metavar="FILE",
        help="more training text in the --train format, labels absent or ignored: the teacher labels it",
    )


EMBEDDINGS = "embeddings"  # --task of sentence-embedding distillation (a teacher with sentence-transformers files)


@dataclass(frozen=True, kw_only=True)
class DistillConfig(TaskOptions, DistillArgs, DistillFiles):
    """What ``bertkit distill`` reads, writes and how it trains: ``finetune``'s settings, the teacher's and the
    student's, and the loss's."""

    task: str | None = task_option(
        required=False,
        extra=(EMBEDDINGS,),
        help=f"the teacher's task (default: the one it was fine-tuned on): {', '.join(TASK_NAMES)}; or {EMBEDDINGS} "
        "(default for a teacher with sentence-transformers files): sentence vectors by MSE, --train / --unlabeled "
        "plain text (one per line) or --text-column of a table, --dev STS pairs",
    )


CONFIG = DistillConfig


def run(args: DistillConfig) -> int:
    """One process, or one of ``torchrun --nproc_per_node N -m bertkit.cli distill ...``."""
    return run_in_context(args, _run)


def _run(args: argparse.Namespace, ctx) -> int:
    files: DistillFiles = from_args(DistillFiles, args)
    train_args: DistillArgs = from_args(DistillArgs, args, device=str(ctx.device))
    if files.dropout is not None and not 0.0 <= files.dropout < 1.0:
        raise InputError(f"--dropout must be in [0, 1), got {files.dropout}")
    teacher_dir = Path(files.teacher)
    if not teacher_dir.is_dir():
        raise InputError(f"--teacher {teacher_dir}: no such directory")
    student = Path(files.student) if Path(files.student).exists() else None
    inputs = {"--teacher": teacher_dir, "--student": student, "--train": files.train, "--dev": files.dev}
    check_output(files.output, {**inputs, "--unlabeled": files.unlabeled}, overwrite=None, writes=MODEL_FILES)
    saved_task = read_task_config(teacher_dir).get("task")
    if args.task and saved_task and args.task != saved_task:
        raise InputError(f"--task {args.task}: the teacher {teacher_dir} was fine-tuned on {saved_task}")
    embeddings = args.task == EMBEDDINGS or (not saved_task and (teacher_dir / "modules.json").is_file())
    check_task_flags_of(args, teacher_dir, embeddings)
    read = _embedding_data if embeddings else _task_data
    task, teacher, tokenizer, train, dev, recipe = read(teacher_dir, files, args)
    set_seed(train_args.seed)  # a random student (and its head) follows --seed
    student = build_student(files.student, teacher, task, tokenizer, teacher_dir)
    if files.dropout is not None:
        student.set_dropout(files.dropout)
    with removed_if_refused(files.output, ctx.is_main):  # refused before its first checkpoint: nothing left
        summary = recipe(task, teacher, student, tokenizer, train, dev, files.output, train_args, ctx, str(teacher_dir))
    if ctx.is_main:
        print(json.dumps({"output": str(files.output), **summary}, sort_keys=True))
    return 0


# the task flags embedding distillation reads (_embedding_data); the others are a task teacher's
EMBEDDING_FLAGS = ("max_seq_length", "text_column", "data_format")


def check_task_flags_of(args: argparse.Namespace, teacher_dir: Path, embeddings: bool) -> None:
    """Task flags the distillation does not use, refused naming them (they were silently ignored): --task naming a
    task for a sentence-embedding teacher, a flag its task does not read; and --max-seq-length past the teacher's
    positions for an embedding teacher (a task teacher's is fitted with its task)."""
    given = from_args(TaskOptions, args).given()
    if embeddings:
        if args.task not in (None, EMBEDDINGS):
            raise InputError(
                f"--task {args.task}: {teacher_dir} is a sentence-embedding model (modules.json), not fine-tuned on "
                f"{args.task}; leave --task out (or give --task {EMBEDDINGS})"
            )
        flags = option_flags(TaskOptions)
        for field in given:
            if field not in EMBEDDING_FLAGS:
                raise InputError(f"{flags[field]}: --task {EMBEDDINGS} does not use it; leave the flag out")
        check_length_fits(args.max_seq_length, teacher_dir)
    else:
        check_flags_for_model(teacher_dir, args.task, given, option_flags(TaskOptions))


def _task_data(teacher_dir: Path, files: DistillFiles, args: argparse.Namespace):
    """(task, teacher, tokenizer, training examples (--unlabeled ones without labels), dev examples, recipe)."""

    task, teacher, tokenizer = load_finetuned(teacher_dir, args.task, args)
    train, dev = files.read(task, args.skip_bad_rows)
    for path in files.unlabeled:
        train.extend(without_labels(task, task.read(path, labelled=False, skip_bad_rows=args.skip_bad_rows)))
    return task, teacher, tokenizer, train, dev, distill


def _embedding_data(teacher_dir: Path, files: DistillFiles, args: argparse.Namespace):
    """(task, teacher, tokenizer, training texts (--train, then --unlabeled), STS dev rows, recipe)."""

    task, teacher, tokenizer = load_teacher(teacher_dir, args.max_seq_length)
    texts: list[str] = []
    for n, path in enumerate([files.train, *files.unlabeled]):
        rows = read_texts(path, args.text_column, args.data_format, args.skip_bad_rows).column(0)
        texts += rows[: files.max_train_examples or None] if n == 0 else rows
    dev = read_scored(files.dev, skip_bad_rows=args.skip_bad_rows) if files.dev else None
    if dev is not None and files.max_eval_examples:
        del dev.rows[files.max_eval_examples :]
        del dev.scores[files.max_eval_examples :]
    return task, teacher, tokenizer, texts, dev, distill_embeddings
