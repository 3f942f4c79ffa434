"""The GLUE suite's tasks: where each is in a GLUE download, how it is scored (the task score, the GLUE score,
the median over seeds of the best lr) and which of them a data directory holds (:mod:`bertkit.experiments.glue`
runs the suite)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.data.tasks.glue import GLUE_TASKS
from bertkit.errors import InputError


@dataclass(frozen=True)
class SuiteTask:
    """One leaderboard entry: where its files are in the GLUE download and how it is scored.

    ``name`` is the bertkit ``--task`` name; ``column`` the leaderboard's column and submission file stem;
    ``metrics`` the finetune metric names averaged into the task score; ``model_of`` the task whose fine-tuned
    model predicts this one (MNLI-mm and AX come from the MNLI model).
    """

    name: str
    column: str
    directory: str
    train: str | None
    dev: str
    test: str
    metrics: tuple[str, ...]
    model_of: str | None = None

    @property
    def trains(self) -> bool:
        return self.model_of is None


SUITE: tuple[SuiteTask, ...] = (
    SuiteTask("cola", "CoLA", "CoLA", "train.tsv", "dev.tsv", "test.tsv", ("mcc",)),
    SuiteTask("sst2", "SST-2", "SST-2", "train.tsv", "dev.tsv", "test.tsv", ("accuracy",)),
    SuiteTask("mrpc", "MRPC", "MRPC", "train.tsv", "dev.tsv", "test.tsv", ("f1", "accuracy")),
    SuiteTask("stsb", "STS-B", "STS-B", "train.tsv", "dev.tsv", "test.tsv", ("pearson", "spearman")),
    SuiteTask("qqp", "QQP", "QQP", "train.tsv", "dev.tsv", "test.tsv", ("f1", "accuracy")),
    SuiteTask("mnli", "MNLI-m", "MNLI", "train.tsv", "dev_matched.tsv", "test_matched.tsv", ("accuracy",)),
    SuiteTask(
        "mnli-mm", "MNLI-mm", "MNLI", None, "dev_mismatched.tsv", "test_mismatched.tsv", ("accuracy",), model_of="mnli"
    ),
    SuiteTask("qnli", "QNLI", "QNLI", "train.tsv", "dev.tsv", "test.tsv", ("accuracy",)),
    SuiteTask("rte", "RTE", "RTE", "train.tsv", "dev.tsv", "test.tsv", ("accuracy",)),
    SuiteTask("wnli", "WNLI", "WNLI", "train.tsv", "dev.tsv", "test.tsv", ("accuracy",)),
    # the diagnostic set: no train/dev, a test file only, predicted by the MNLI model
    SuiteTask("ax", "AX", "diagnostic", None, "", "diagnostic.tsv", ("mcc",), model_of="mnli"),
)
BY_NAME: dict[str, SuiteTask] = {t.name: t for t in SUITE}
TASK_ALIASES = {"sst-2": "sst2", "sts-b": "stsb", "mnli-m": "mnli", "mnli_mm": "mnli-mm", "diagnostic": "ax"}
# the nine tasks the leaderboard's GLUE score averages (MNLI = mean of MNLI-m and MNLI-mm)
SCORE_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")


def label_space(name: str) -> tuple[str, ...] | None:
    """The labels a submission file may hold (None: a number, STS-B)."""

    return GLUE_TASKS[name].labels


def resolve_tasks(spec: str | Sequence[str] | None) -> list[str]:
    """``"cola,sst2"`` -> ["cola", "sst2"] (leaderboard names such as SST-2 accepted); None -> every task."""
    if spec is None:
        return [t.name for t in SUITE]
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out = []
    for item in items:
        key = item.strip().lower()
        if not key:
            continue
        key = TASK_ALIASES.get(key, key)
        if key not in BY_NAME:
            raise InputError(f"--tasks: unknown GLUE task {item!r}; choose from {', '.join(BY_NAME)}")
        if key not in out:
            out.append(key)
    if not out:
        raise InputError("--tasks names no task")
    return out


# ----------------------------------------------------------------------------------------------- arithmetic


def task_score(name: str, metrics: dict[str, Any]) -> float:
    """The task's leaderboard score in GLUE points from finetune's metrics (fractions): the mean of the task's
    official metrics, x 100. KeyError names a missing metric."""
    task = BY_NAME[name]
    missing = [m for m in task.metrics if not isinstance(metrics.get(m), (int, float))]
    if missing:
        raise KeyError(f"{name}: metrics lack {missing} (have {sorted(metrics)})")
    return 100.0 * sum(float(metrics[m]) for m in task.metrics) / len(task.metrics)


@dataclass
class GlueScore:
    """The leaderboard's macro-average. ``complete`` when all nine tasks are there; otherwise ``score`` is the
    average over the ``present`` ones (not comparable with published GLUE scores)."""

    score: float | None
    complete: bool
    present: list[str]
    missing: list[str]


def glue_score(scores: dict[str, float]) -> GlueScore:
    """GLUE score from task scores (GLUE points) keyed by task name (``mnli`` = MNLI-m, ``mnli-mm``).

    MNLI counts once, as the mean of MNLI-m and MNLI-mm (or whichever of them is there); AX is not counted.
    """
    per_task: dict[str, float] = {}
    for name in SCORE_TASKS:
        if name == "mnli":
            parts = [scores[k] for k in ("mnli", "mnli-mm") if scores.get(k) is not None]
            if parts:
                per_task[name] = sum(parts) / len(parts)
        elif scores.get(name) is not None:
            per_task[name] = float(scores[name])
    missing = [n for n in SCORE_TASKS if n not in per_task]
    missing += [k for k in ("mnli", "mnli-mm") if "mnli" in per_task and scores.get(k) is None]
    value = sum(per_task.values()) / len(per_task) if per_task else None
    return GlueScore(value, not missing, list(per_task), missing)


@dataclass
class Summary:
    """A task's result under the protocol: the selected learning rate, its seeds' scores, median and spread."""

    task: str
    lr: float
    seeds: list[int]
    scores: list[float]
    metrics: dict[str, float]  # each official metric's median over the selected lr's seeds, GLUE points
    by_lr: dict[float, float]  # median score per learning rate
    best_cell: str  # the run whose model gives the test predictions (best seed of the selected lr)

    @property
    def median(self) -> float:
        return statistics.median(self.scores)

    @property
    def low(self) -> float:
        return min(self.scores)

    @property
    def high(self) -> float:
        return max(self.scores)


def summarize(task: str, cells: Sequence[dict[str, Any]], metric_names: Sequence[str] | None = None) -> Summary | None:
    """Pick the learning rate with the best median over seeds (ties: the smaller lr) among finished ``cells``
    (``cell.json`` records of one task: lr, seed, score, metrics, name). None when none has a score.
    ``metric_names``: the metrics reported (default: the GLUE task's official ones)."""
    scored = [c for c in cells if c.get("score") is not None]
    if not scored:
        return None
    by_lr: dict[float, list[dict]] = {}
    for c in scored:
        by_lr.setdefault(float(c["lr"]), []).append(c)
    medians = {lr: statistics.median(c["score"] for c in group) for lr, group in by_lr.items()}
    lr = max(sorted(medians), key=lambda k: medians[k])
    group = sorted(by_lr[lr], key=lambda c: c["seed"])
    metric_names = BY_NAME[task].metrics if metric_names is None else metric_names
    metrics = {m: statistics.median(100.0 * c["metrics"][m] for c in group) for m in metric_names}
    best = max(group, key=lambda c: c["score"])
    return Summary(task, lr, [c["seed"] for c in group], [c["score"] for c in group], metrics, medians, best["name"])


# ----------------------------------------------------------------------------------------------- discovery


@dataclass
class Found:
    """A task present in the GLUE directory: its files (None where absent)."""

    task: SuiteTask
    train: Path | None
    dev: Path | None
    test: Path | None


def discover(data_dir: Path, tasks: Sequence[str], quiet_absent: bool = False) -> tuple[list[Found], list[str]]:
    """The ``tasks`` present under ``data_dir`` in the GLUE download layout (``CoLA/train.tsv``, ``MNLI/
    dev_matched.tsv``, ``diagnostic/diagnostic.tsv``...), and a note per task skipped and why (``quiet_absent``:
    none for a task whose folder is simply not there)."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise InputError(f"--data {data_dir}: not a directory (expected the GLUE download: CoLA/, SST-2/, ...)")
    found, notes = [], []
    for name in tasks:
        t = BY_NAME[name]
        folder = _find_dir(data_dir, t.directory)
        if folder is None:
            if quiet_absent:
                continue
            notes.append(f"{t.column}: no {t.directory}/ folder")
            continue

        def has(fname: str | None, folder: Path = folder) -> Path | None:
            return folder / fname if fname and (folder / fname).is_file() else None

        if t.name == "ax":
            test = has(t.test) or has("AX.tsv") or has("test.tsv")
            if test is None:
                notes.append(f"AX: no {t.directory}/{t.test}")
                continue
            found.append(Found(t, None, None, test))
            continue
        train, dev, test = has(t.train), has(t.dev), has(t.test)
        if t.trains and (train is None or dev is None):
            notes.append(
                f"{t.column}: needs {t.directory}/{t.train} and {t.dev} (have "
                f"{', '.join(p.name for p in folder.glob('*.tsv')) or 'none'})"
            )
            continue
        if not t.trains and dev is None:
            notes.append(f"{t.column}: no {t.directory}/{t.dev}")
            continue
        found.append(Found(t, train, dev, test))
    # a task predicted by another model needs that model
    names = {f.task.name for f in found}
    kept = []
    for f in found:
        if f.task.model_of and f.task.model_of not in names:
            notes.append(f"{f.task.column}: comes from the {BY_NAME[f.task.model_of].column} model, which is not run")
            continue
        kept.append(f)
    return kept, notes


def _find_dir(root: Path, name: str) -> Path | None:
    if (root / name).is_dir():
        return root / name
    for p in root.iterdir():  # case-insensitive fallback (sst-2/, mnli/ ...)
        if p.is_dir() and p.name.lower() == name.lower():
            return p
    return None


# ----------------------------------------------------------------------------------------------- the suite
