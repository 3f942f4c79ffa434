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
import shutil
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.errors import InputError, RunError
from bertkit.experiments.glue_files import (
    COMPUTED_WITH,
    SUBMISSION_HEADER,
    computed_with,
    format_prediction,
    read_predictions,
    results_markdown,
    results_rows,
    submission_text,
    write_results,
    write_submission,
)
from bertkit.experiments.glue_tasks import (
    BY_NAME,
    SCORE_TASKS,
    SUITE,
    TASK_ALIASES,
    Found,
    GlueScore,
    SuiteTask,
    Summary,
    discover,
    glue_score,
    resolve_tasks,
    summarize,
    task_score,
)
from bertkit.experiments.runner import check_stop, finetune_options, log_tail, open_study, run_bertkit
from bertkit.files import remove_stale_temp_files, write_json
from bertkit.options import from_text, model_option, option, output_option, parse_lrs, parse_seeds, parse_time

# the suite's tasks and files live in glue_tasks.py and glue_files.py; their names stay importable from here
__all__ = [
    "BY_NAME",
    "COMPUTED_WITH",
    "Found",
    "GlueScore",
    "SCORE_TASKS",
    "SUBMISSION_HEADER",
    "SUITE",
    "SuiteConfig",
    "SuiteReport",
    "SuiteRunner",
    "SuiteTask",
    "Summary",
    "TASK_ALIASES",
    "cell_name",
    "computed_with",
    "discover",
    "format_prediction",
    "glue_score",
    "read_predictions",
    "resolve_tasks",
    "results_markdown",
    "results_rows",
    "submission_text",
    "summarize",
    "task_score",
    "write_results",
    "write_submission",
]

log = logging.getLogger(__name__)


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
