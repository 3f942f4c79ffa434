"""The GLUE suite: every task found in a GLUE download, the paper's protocol, the leaderboard's arithmetic and files.

Protocol (BERT paper, section 4.1): for each task, fine-tune with each learning rate of the grid, each over N
seeds; the task's result is the learning rate whose median dev score is best, reported as that median with the
min-max over its seeds (seed spread is large on the small tasks: MRPC F1 moves by 10 points between seeds).

Scores are GLUE points (metric x 100). A task's score is its official metric, the mean of two where the leaderboard
lists two: MRPC and QQP (F1 + accuracy) / 2, STS-B (Pearson + Spearman) / 2; CoLA is Matthews corr.; MNLI-m and
MNLI-mm are reported separately. The GLUE score is the leaderboard's macro-average over the nine tasks, where MNLI
enters once as the mean of MNLI-m and MNLI-mm and AX (the diagnostic) is left out: for BERT-base's leaderboard row
this gives 78.3, as published.

Layout on disk (``OUTPUT``)::

    suite.json                   the settings; a resumed suite must match them
    runs/TASK/lrLR_seedS/        one fine-tuning (a "cell"): finetune's output, finetune.log, then cell.json last
    runs/TASK/test/NAME.tsv      the selected model's test predictions (leaderboard format)
    cells.csv, results.csv, results.md, glue.png, submission/, submission.zip

A cell is finished when its ``cell.json`` exists (written atomically, last); a resumed suite keeps finished cells
and redoes any other. Model weights are kept for the best seed of each learning rate until the task is done, then
only for the selected run.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import statistics
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.data.tasks.glue import GLUE_TASKS
from bertkit.errors import InputError, RunError
from bertkit.experiments.plots import bar_chart
from bertkit.experiments.runner import check_stop, finetune_options, log_tail, open_study, run_bertkit
from bertkit.experiments.tables import csv_text
from bertkit.files import atomic_write, remove_stale_temp_files, write_json, write_text
from bertkit.options import from_text, model_option, option, output_option, parse_lrs, parse_seeds, parse_time

log = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------------------- the registry


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


def _label_space(name: str) -> tuple[str, ...] | None:
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


# ----------------------------------------------------------------------------------------------- submission

SUBMISSION_HEADER = "index\tprediction"


def format_prediction(name: str, value: Any) -> str:
    """One prediction as the leaderboard reads it: a label name from the task's label space, or for STS-B a
    number with three decimals. ValueError on a label outside the space."""
    space = _label_space(name)
    if space is None:
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"{name}: prediction {value!r} is not a finite number")
        return f"{number:.3f}"
    label = str(value).strip()
    if label not in space:
        raise ValueError(f"{name}: prediction {label!r} is not one of the labels {list(space)}")
    return label


def submission_text(name: str, rows: Sequence[tuple[str, Any]]) -> str:
    """A leaderboard file's text: ``index<TAB>prediction`` then one line per test example, in the test file's
    order."""
    lines = [SUBMISSION_HEADER]
    for index, value in rows:
        lines.append(f"{index}\t{format_prediction(name, value)}")
    return "\n".join(lines) + "\n"


def read_predictions(path: Path) -> list[tuple[str, str]]:
    """(index, prediction) rows of an ``index<TAB>prediction`` file (``bertkit predict``'s predictions.tsv)."""
    rows = []
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0].split("\t")[:2] != ["index", "prediction"]:
        raise RunError(f"{path}: expected the header 'index<TAB>prediction'")
    for n, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 2:
            raise RunError(f"{path}, line {n}: expected two tab-separated columns")
        rows.append((parts[0], parts[1]))
    return rows


def write_submission(directory: Path, files: dict[str, Sequence[tuple[str, Any]]]) -> Path:
    """Write ``COLUMN.tsv`` per task (``files``: task name -> (index, prediction) rows) into ``directory`` and zip
    them, flat, as ``directory.parent / "submission.zip"``. Returns the zip's path."""
    directory.mkdir(parents=True, exist_ok=True)
    texts = {}
    for name in (t.name for t in SUITE):
        if name in files:
            text = submission_text(name, files[name])
            texts[f"{BY_NAME[name].column}.tsv"] = text
            write_text(directory / f"{BY_NAME[name].column}.tsv", text)

    def write_zip(p: Path) -> None:
        with zipfile.ZipFile(p, "w", compression=zipfile.ZIP_DEFLATED) as z:
            for fname, text in texts.items():
                z.writestr(fname, text)

    path = directory.parent / "submission.zip"
    atomic_write(path, write_zip)
    return path


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


# finetune flags the suite sets itself, or that make no sense per cell (the others pass through to every finetune)
SUITE_OWN = ("task", "train", "dev", "model", "output", "lr", "seed", "help", "resume", "save_every")


@dataclass(frozen=True, kw_only=True)
class SuiteConfig:
    """What ``bertkit glue`` runs; its fields are the command's flags (a list, duration or path may be given as its
    flag's text: read, and a bad one refused naming the flag, when the config is made). ``finetune_args``: extra
    flags passed to every ``bertkit finetune``."""

    model: Path = model_option("bertkit or Hugging Face BERT directory")
    data: Path = option(
        required=True,
        help="the GLUE directory (CoLA/, SST-2/, MRPC/, STS-B/, QQP/, MNLI/, QNLI/, RTE/, WNLI/, diagnostic/)",
    )
    output: Path = output_option("the suite's directory")
    tasks: list[str] | None = option(
        None,
        help="comma-separated tasks (default: every one found), e.g. cola,sst2,mrpc,stsb,qqp,mnli,qnli,rte,wnli",
    )
    tasks_given: bool = option(False, skip=True)  # --tasks named them: say why any is skipped (else only incomplete)
    seeds: list[int] | str = option(
        default_factory=lambda: [1, 2, 3],
        help="seeds per learning rate: a count N (seeds 1..N) or a comma-separated list (default 3)",
    )
    lrs: list[float] | str = option(
        default_factory=lambda: [2e-5, 3e-5, 5e-5],
        flag="--lr",
        metavar="LR",
        help="the learning-rate grid, comma-separated (default 2e-5,3e-5,5e-5)",
    )
    max_time_per_run: float | str | None = option(
        None, metavar="DURATION", help="bound each fine-tuning (90s, 10m, 1h); the best dev checkpoint reached counts"
    )
    finetune_args: list[str] = option(
        default_factory=list,
        passthrough=finetune_options,
        choices=SUITE_OWN,
        help="fine-tuning (passed to every `bertkit finetune`; see its -h)",
    )
    max_time_flag: bool = option(False, skip=True)  # finetune has its own --max-time (else the suite stops a run)
    predict_test: bool = option(True, skip=True)  # write the leaderboard files where test files exist

    def __post_init__(self) -> None:
        if isinstance(self.tasks, str):
            object.__setattr__(self, "tasks_given", True)
        from_text(self, "tasks", resolve_tasks)
        if self.tasks is None:
            object.__setattr__(self, "tasks", [t.name for t in SUITE])
        from_text(self, "seeds", parse_seeds)
        from_text(self, "lrs", parse_lrs)
        from_text(self, "max_time_per_run", lambda t: parse_time(t, "--max-time-per-run"))
        for name in ("model", "data", "output"):
            from_text(self, name, Path)

    def record(self) -> dict[str, Any]:
        """The settings a resumed suite must share (the task list and time bound may change)."""
        return {
            "model": str(Path(self.model).resolve()),
            "seeds": self.seeds,
            "lrs": self.lrs,
            "finetune_args": self.finetune_args,
        }


@dataclass
class SuiteReport:
    output: Path
    summaries: dict[str, Summary]
    glue: GlueScore
    cells_run: int
    cells_kept: int
    notes: list[str]
    submission: Path | None
    files: list[Path]


def cell_name(lr: float, seed: int) -> str:
    return f"lr{lr:g}_seed{seed}"


def _read_cell(path: Path) -> dict | None:
    try:
        return json.loads((path / "cell.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


class SuiteRunner:
    """Runs the suite cell by cell; ``run`` returns a :class:`SuiteReport`. ``say`` receives progress lines
    (the command prints them); ``stop`` is a ``GracefulStop``: when it is requested the run in flight is abandoned
    and ``stop.raise_`` ends the suite with a resume hint."""

    def __init__(
        self,
        cfg: SuiteConfig,
        say: Callable[[str], None] | None = None,
        stop=None,
        run_child: Callable[..., Any] | None = None,
    ):
        self.cfg = cfg
        self.say = say or (lambda msg: log.info(msg))
        self.stop = stop
        self.run_child = run_child or run_bertkit
        self.cells_run = 0
        self.cells_kept = 0

    # -------------------------------------------------------------- one cell
    def _finetune(self, found: Found, lr: float, seed: int, cell: Path) -> dict[str, Any]:
        t = found.task
        if cell.exists():
            shutil.rmtree(cell)  # an unfinished cell from a killed suite: start it afresh
        cell.mkdir(parents=True)
        args = [
            "finetune",
            "--task",
            t.name,
            "--train",
            str(found.train),
            "--dev",
            str(found.dev),
            "--model",
            str(self.cfg.model),
            "--output",
            str(cell),
            "--lr",
            f"{lr:g}",
            "--seed",
            str(seed),
            *self.cfg.finetune_args,
        ]
        if self.cfg.max_time_per_run is not None and self.cfg.max_time_flag:
            args += ["--max-time", f"{self.cfg.max_time_per_run:g}s"]
        if "--quiet" not in args:
            args.append("--quiet")
        deadline = None if self.cfg.max_time_flag else self.cfg.max_time_per_run
        result = self.run_child(args, log=cell / "finetune.log", max_time=deadline, stop=self.stop)
        check_stop(self.stop, "the GLUE suite", self.cfg.output)
        # a run stopped at its deadline may leave a resumable checkpoint (optimizer state included): not needed
        shutil.rmtree(cell / "checkpoints", ignore_errors=True)
        record: dict[str, Any] = {
            "task": t.name,
            "lr": lr,
            "seed": seed,
            "name": cell.name,
            "seconds": round(result.seconds, 2),
            "timed_out": result.timed_out,
        }
        metrics_path = cell / "metrics.json"
        if metrics_path.is_file():
            metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
            record["metrics"] = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
            record.update({k: metrics[k] for k in COMPUTED_WITH if k in metrics})  # how it was computed
        if result.code != 0 and not (result.timed_out and metrics_path.is_file()):
            raise RunError(
                f"{t.column} lr {lr:g} seed {seed}: bertkit finetune exited with {result.code}; see "
                f"{cell / 'finetune.log'}:\n{log_tail(result)}"
            )
        if "metrics" not in record:
            record["score"] = None
            record["error"] = "no dev evaluation finished within --max-time-per-run"
            return record
        if t.name == "mnli":
            self._evaluate_mismatched(found, cell, record)
        record["score"] = task_score(t.name, record["metrics"])
        return record

    def _evaluate_mismatched(self, found: Found, cell: Path, record: dict) -> None:
        mm = _mismatched(found)
        if mm is None:
            return
        out = cell / "eval-mismatched"
        result = self.run_child(
            [
                "evaluate",
                "--model",
                str(cell),
                "--data",
                str(mm),
                "--output",
                str(out),
                "--quiet",
                *self._device_args(),
            ],
            log=cell / "evaluate.log",
            stop=self.stop,
        )
        check_stop(self.stop, "the GLUE suite", self.cfg.output)
        if result.code != 0:
            raise RunError(f"MNLI-mm evaluation of {cell} exited with {result.code}; see {cell / 'evaluate.log'}")
        metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
        record["mismatched"] = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
        record["mismatched_score"] = task_score("mnli-mm", record["mismatched"])

    def _device_args(self) -> list[str]:
        """--device / --precision as given for fine-tuning, for evaluate and predict too."""
        out, args = [], self.cfg.finetune_args
        for flag in ("--device", "--precision"):
            if flag in args and args.index(flag) + 1 < len(args):
                out += [flag, args[args.index(flag) + 1]]
        return out

    # -------------------------------------------------------------- one task
    def _run_task(self, found: Found, mm: Found | None, ax: Found | None) -> tuple[Summary | None, dict]:
        t = found.task
        root = self.cfg.output / "runs" / t.name
        root.mkdir(parents=True, exist_ok=True)
        remove_stale_temp_files(root)
        cells: list[dict] = []
        for lr in self.cfg.lrs:
            for seed in self.cfg.seeds:
                cell = root / cell_name(lr, seed)
                record = _read_cell(cell)
                if record is not None:
                    self.cells_kept += 1
                    cells.append(record)
                    continue
                check_stop(self.stop, "the GLUE suite", self.cfg.output)
                self.say(f"{t.column}: lr {lr:g}, seed {seed} ...")
                record = self._finetune(found, lr, seed, cell)
                write_json(cell / "cell.json", record)  # last: the cell is finished
                self.cells_run += 1
                cells.append(record)
                score = record.get("score")
                self.say(
                    f"{t.column}: lr {lr:g}, seed {seed}: "
                    + (f"{score:.2f}" if score is not None else record.get("error", "no score"))
                    + f" ({record['seconds']:.0f}s)"
                )
                self._prune_weights(root, cells, final=False)
        summary = summarize(t.name, cells)
        predictions: dict[str, list] = {}
        if summary is not None and self.cfg.predict_test:
            best = root / summary.best_cell
            for target in (found, mm, ax):
                if target is None or target.test is None:
                    continue
                rows = self._predict_test(best, target, root / "test")
                if rows is not None:
                    predictions[target.task.name] = rows
        self._prune_weights(root, cells, final=True, keep=summary.best_cell if summary else None)
        return summary, {"cells": cells, "predictions": predictions}

    def _predict_test(self, model_dir: Path, target: Found, test_dir: Path) -> list | None:
        name = target.task.name
        out = test_dir / name
        pred_file = out / "predictions.tsv"
        done = out / "source.json"
        if (
            done.is_file()
            and json.loads(done.read_text(encoding="utf-8")).get("model") == model_dir.name
            and pred_file.is_file()
        ):
            return read_predictions(pred_file)
        if not (model_dir / "model.safetensors").is_file():
            self.say(f"{target.task.column}: test predictions skipped ({model_dir.name}'s weights are gone)")
            return None
        check_stop(self.stop, "the GLUE suite", self.cfg.output)
        self.say(f"{target.task.column}: predicting {target.test.name} with {model_dir.name}")
        args = [
            "predict",
            "--model",
            str(model_dir),
            "--data",
            str(target.test),
            "--output",
            str(out),
            "--quiet",
            "--task",
            name,
            *self._device_args(),
        ]
        result = self.run_child(args, log=out / "predict.log", stop=self.stop)
        check_stop(self.stop, "the GLUE suite", self.cfg.output)
        if result.code != 0:
            raise RunError(
                f"{target.task.column}: bertkit predict on {target.test} exited with {result.code}:\n{log_tail(result)}"
            )
        write_json(done, {"model": model_dir.name})
        return read_predictions(pred_file)

    def _prune_weights(self, root: Path, cells: list[dict], final: bool, keep: str | None = None) -> None:
        """Delete model weights no longer needed: all but the best seed of each lr (and, at the task's end, all
        but the selected run)."""
        if final:
            keepers = {keep} if keep else set()
        else:
            keepers = set()
            by_lr: dict[float, list[dict]] = {}
            for c in cells:
                if c.get("score") is not None:
                    by_lr.setdefault(float(c["lr"]), []).append(c)
            for group in by_lr.values():
                keepers.add(max(group, key=lambda c: c["score"])["name"])
        for c in cells:
            if c["name"] not in keepers:
                for fname in ("model.safetensors", "pytorch_model.bin"):
                    (root / c["name"] / fname).unlink(missing_ok=True)

    # -------------------------------------------------------------- the suite
    def run(self) -> SuiteReport:
        cfg = self.cfg
        out = cfg.output
        found, notes = discover(cfg.data, cfg.tasks, quiet_absent=not cfg.tasks_given)  # before --output is made
        if not any(f.task.trains for f in found):
            raise InputError(f"--data {cfg.data}: no GLUE task to fine-tune was found ({'; '.join(notes)})")
        open_study(
            out, "suite.json", cfg.record(), "a GLUE suite run", "the same model, seeds, lr grid and finetune flags"
        )
        for note in notes:
            self.say(f"skipped {note}")
        by_name = {f.task.name: f for f in found}
        summaries: dict[str, Summary] = {}
        all_cells: list[dict] = []
        predictions: dict[str, list] = {}
        for f in found:
            if not f.task.trains:
                continue
            mm = by_name.get("mnli-mm") if f.task.name == "mnli" else None
            ax = by_name.get("ax") if f.task.name == "mnli" else None
            summary, extra = self._run_task(f, mm, ax)
            all_cells += extra["cells"]
            predictions.update(extra["predictions"])
            if summary is None:
                continue
            summaries[f.task.name] = summary
            if mm is not None:
                mm_summary = _mismatched_summary(summary, extra["cells"])
                if mm_summary is not None:
                    summaries["mnli-mm"] = mm_summary
        score = glue_score({k: s.median for k, s in summaries.items()})
        files = write_results(out, summaries, all_cells, score)
        submission = write_submission(out / "submission", predictions) if predictions else None
        if submission is not None:
            files.append(submission)
        return SuiteReport(out, summaries, score, self.cells_run, self.cells_kept, notes, submission, files)


def _mismatched(found: Found) -> Path | None:
    p = found.dev.parent / BY_NAME["mnli-mm"].dev if found.dev is not None else None
    return p if p is not None and p.is_file() else None


def _mismatched_summary(matched: Summary, cells: list[dict]) -> Summary | None:
    """MNLI-mm from the runs of MNLI's selected lr (the lr is chosen on matched dev, like the model)."""
    group = sorted(
        (c for c in cells if float(c["lr"]) == matched.lr and c.get("mismatched_score") is not None),
        key=lambda c: c["seed"],
    )
    if not group:
        return None
    scores = [c["mismatched_score"] for c in group]
    metrics = {"accuracy": statistics.median(100.0 * c["mismatched"]["accuracy"] for c in group)}
    return Summary(
        "mnli-mm",
        matched.lr,
        [c["seed"] for c in group],
        scores,
        metrics,
        {matched.lr: statistics.median(scores)},
        matched.best_cell,
    )


# ----------------------------------------------------------------------------------------------- results files


COMPUTED_WITH = ("precision", "backend", "device")  # recorded by each run's metrics.json


def computed_with(cells: list[dict], task: str) -> dict[str, str]:
    """The precision, backend and device of a task's runs (values that differ between runs are joined by '/')."""
    return {
        k: "/".join(sorted({str(c[k]) for c in cells if c["task"] == task and c.get(k)})) or None for k in COMPUTED_WITH
    }


def results_rows(summaries: dict[str, Summary], cells: list[dict] | None = None) -> list[dict[str, Any]]:
    rows = []
    for t in SUITE:
        s = summaries.get(t.name)
        if s is None:
            continue
        rows.append(
            {
                "task": t.column,
                "metric": "/".join(t.metrics),
                "median": round(s.median, 2),
                "min": round(s.low, 2),
                "max": round(s.high, 2),
                "lr": f"{s.lr:g}",
                "seeds": len(s.scores),
                "seed_scores": ";".join(f"{x:.2f}" for x in s.scores),
                **{f"median_{m}": round(v, 2) for m, v in s.metrics.items()},
                "median_by_lr": ";".join(f"{lr:g}:{v:.2f}" for lr, v in sorted(s.by_lr.items())),
                **computed_with(cells or [], t.name),
            }
        )
    return rows


def write_results(out: Path, summaries: dict[str, Summary], cells: list[dict], score: GlueScore) -> list[Path]:
    """results.csv (a row per task, then the GLUE score), cells.csv (every run), results.md and glue.png."""
    rows = results_rows(summaries, cells)
    score_row = {
        "task": "GLUE score" if score.complete else f"GLUE score (partial: {len(score.present)} of 9)",
        "median": None if score.score is None else round(score.score, 2),
    }
    write_text(out / "results.csv", csv_text([*rows, score_row]))
    cell_rows = [
        {
            "task": BY_NAME[c["task"]].column,
            "lr": f"{float(c['lr']):g}",
            "seed": c["seed"],
            "score": None if c.get("score") is None else round(c["score"], 4),
            "mismatched_score": (round(c["mismatched_score"], 4) if c.get("mismatched_score") is not None else None),
            "seconds": c.get("seconds"),
            "timed_out": c.get("timed_out", False),
            **{k: c.get(k) for k in COMPUTED_WITH},
            **{k: v for k, v in (c.get("metrics") or {}).items() if k not in ("epoch",)},
        }
        for c in cells
    ]
    write_text(out / "cells.csv", csv_text(cell_rows) if cell_rows else "")
    write_text(out / "results.md", results_markdown(summaries, score))
    files = [out / "results.csv", out / "cells.csv", out / "results.md"]
    if rows:
        bar_chart(
            out / "glue.png",
            [r["task"] for r in rows],
            [r["median"] for r in rows],
            [r["min"] for r in rows],
            [r["max"] for r in rows],
            ylabel="dev score (GLUE points)",
            title=f"GLUE dev: median and min-max over {max(r['seeds'] for r in rows)} seeds",
        )
        files.append(out / "glue.png")
    return files


def results_markdown(summaries: dict[str, Summary], score: GlueScore) -> str:
    lines = ["| task | metric | median | min-max over seeds | lr | seeds |", "|---|---|---:|---:|---:|---:|"]
    for t in SUITE:
        s = summaries.get(t.name)
        if s is None:
            continue
        parts = " / ".join(f"{s.metrics[m]:.1f}" for m in t.metrics) if len(t.metrics) > 1 else ""
        metric = f"{'/'.join(t.metrics)}" + (f" ({parts})" if parts else "")
        lines.append(
            f"| {t.column} | {metric} | {s.median:.1f} | {s.low:.1f}-{s.high:.1f} | {s.lr:g} | {len(s.scores)} |"
        )
    lines.append("")
    if score.score is None:
        lines.append("GLUE score: no task finished.")
    elif score.complete:
        lines.append(
            f"**GLUE score (dev): {score.score:.1f}** (the leaderboard's average of the nine tasks, MNLI "
            "as the mean of -m and -mm)."
        )
    else:
        lines.append(
            f"GLUE score over the {len(score.present)} tasks present: {score.score:.1f} (partial: "
            f"missing {', '.join(BY_NAME[m].column for m in score.missing)}; not comparable with the "
            "leaderboard)."
        )
    lines.append("")
    lines.append(
        "Scores are dev-set GLUE points (x100); MRPC/QQP are (F1 + accuracy) / 2, STS-B (Pearson + Spearman) "
        "/ 2. Each task: the learning rate with the best median over seeds."
    )
    return "\n".join(lines) + "\n"
