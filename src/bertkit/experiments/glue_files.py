"""The GLUE suite's output files: the leaderboard's submission format (one TSV per task, zipped) and the results
tables and plot (results.csv, cells.csv, results.md, glue.png; :mod:`bertkit.experiments.glue` runs the suite)."""

from __future__ import annotations

import math
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bertkit.errors import RunError
from bertkit.experiments.glue_tasks import BY_NAME, SUITE, GlueScore, Summary, label_space
from bertkit.experiments.plots import bar_chart
from bertkit.experiments.tables import csv_text
from bertkit.files import atomic_write, write_text

SUBMISSION_HEADER = "index\tprediction"


def format_prediction(name: str, value: Any) -> str:
    """One prediction as the leaderboard reads it: a label name from the task's label space, or for STS-B a
    number with three decimals. ValueError on a label outside the space."""
    space = label_space(name)
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
