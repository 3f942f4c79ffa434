"""The downstream meter: does a pre-trained model fine-tune better than a random initialisation of itself?

For each task, the model (route ``pretrained``) and a random initialisation of the same config and vocabulary (route
``random``, Google's init with ``init_seed``) are fine-tuned with the same flags, the same learning-rate grid and the
same seeds. Each route takes the learning rate whose median dev score over the seeds is best (the GLUE suite's
protocol, :func:`bertkit.experiments.glue.summarize`) and reports that median; the gain is pretrained minus random,
in points of the task's official metric (x 100): SST-2 accuracy, MRPC (F1 + accuracy) / 2, CoLA MCC, CoNLL-2003
entity F1 (conlleval), and the GLUE suite's metric for the other GLUE tasks.

Both routes go through exactly the same code with the same seeds, so a model whose weights *are* that random
initialisation shows a gain of exactly 0 on every task: the meter cannot favour the pre-trained route.

Layout (``OUTPUT``)::

    meter.json                           the settings; a resumed meter must match them
    random-init/                         the random initialisation (config + tokenizer of the model, new weights)
    runs/ROUTE/TASK/lrLR_seedS/          one fine-tuning: finetune's output (weights deleted), then cell.json last
    downstream.csv, downstream.md        task, metric, pretrained, random, gain (+ the mean gain row)
    downstream.png                       pretrained vs random per task (its numbers: downstream.csv beside it)
    cells.csv                            every run
"""

from __future__ import annotations

import json
import logging
import shutil
import statistics
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit import models
from bertkit.errors import InputError, RunError
from bertkit.experiments.glue import BY_NAME, Summary, cell_name, summarize
from bertkit.experiments.plots import bar_chart
from bertkit.experiments.runner import CELL_FLAGS, check_stop, configure_finetune, log_tail, open_study, run_bertkit
from bertkit.experiments.tables import csv_text, markdown_table
from bertkit.files import remove_stale_temp_files, write_json, write_text
from bertkit.options import (
    check_bounds,
    flag_string,
    from_text,
    model_option,
    option,
    output_option,
    parse_lrs,
    parse_seeds,
    parse_time,
)

log = logging.getLogger(__name__)

ROUTES = ("pretrained", "random")
DEFAULT_TASKS = ("sst2", "mrpc", "conll", "cola")
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


@dataclass(frozen=True)
class MeterTask:
    """A task the meter fine-tunes: ``finetune`` is its ``bertkit finetune --task``; ``metrics`` the finetune metrics
    averaged (x 100) into its score; ``layouts`` the (train, dev) paths tried in turn under ``--data-dir``;
    ``percent``: finetune reports them in percent (conlleval's), not as fractions."""

    name: str
    column: str
    finetune: str
    metrics: tuple[str, ...]
    layouts: tuple[tuple[str, str], ...]
    percent: bool = False
    label: str = ""

    @property
    def metric(self) -> str:
        return self.label or "/".join(self.metrics)


def _glue_task(name: str) -> MeterTask:
    t = BY_NAME[name]
    layouts = (
        (f"glue/{t.directory}/{t.train}", f"glue/{t.directory}/{t.dev}"),  # the shared data's layout
        (f"{t.directory}/{t.train}", f"{t.directory}/{t.dev}"),  # a GLUE download
        (f"{name}_train.tsv", f"{name}_dev.tsv"),  # one folder of files (tests/fixtures/finetune)
    )
    return MeterTask(name, t.column, name, t.metrics, layouts)


CONLL = MeterTask(
    "conll",
    "CoNLL-2003",
    "conll2003",
    ("f1",),
    (
        ("ner/conll2003/train.txt", "ner/conll2003/valid.txt"),
        ("conll2003/train.txt", "conll2003/valid.txt"),
        ("conll_train.txt", "conll_dev.txt"),
    ),
    percent=True,
    label="entity f1",
)
METER_TASKS: dict[str, MeterTask] = {
    **{t.name: _glue_task(t.name) for t in BY_NAME.values() if t.trains},
    "conll": CONLL,
}
ALIASES = {"conll2003": "conll", "ner": "conll", "sst-2": "sst2", "sts-b": "stsb"}


def resolve_meter_tasks(spec: str | Sequence[str]) -> list[str]:
    """``"sst2,mrpc,conll"`` -> the meter's task names, in order, without repeats; an unknown one is named."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[str] = []
    for item in items:
        key = ALIASES.get(item.strip().lower(), item.strip().lower())
        if not key:
            continue
        if key not in METER_TASKS:
            raise InputError(f"--tasks: unknown task {item!r}; choose from {', '.join(METER_TASKS)}")
        if key not in out:
            out.append(key)
    if not out:
        raise InputError("--tasks names no task")
    return out


def find_files(data_dir: Path, task: MeterTask) -> tuple[Path, Path]:
    """The (train, dev) files of ``task`` under ``data_dir``: the first layout whose two files exist."""
    for train, dev in task.layouts:
        if (data_dir / train).is_file() and (data_dir / dev).is_file():
            return data_dir / train, data_dir / dev
    tried = "; ".join(f"{a} + {b}" for a, b in task.layouts)
    raise InputError(f"--data-dir {data_dir}: no {task.column} files (looked for {tried})")


def meter_score(task: MeterTask, metrics: dict[str, Any]) -> float:
    """The task's score in points: its official metrics (fractions) averaged, x 100."""
    missing = [m for m in task.metrics if not isinstance(metrics.get(m), (int, float))]
    if missing:
        raise RunError(f"{task.column}: finetune's metrics lack {missing} (have {sorted(metrics)})")
    return 100.0 * sum(float(metrics[m]) for m in task.metrics) / len(task.metrics)


LR_GRIDS = ((128, [3e-4, 1e-3, 3e-3]), (256, [1e-4, 3e-4, 1e-3]))  # up to this hidden size: this grid
WIDE_LRS = [5e-5, 1e-4, 3e-4]  # wider models: BERT-base's 2e-5..5e-5 and a little above


def default_lrs(model_dir: Path) -> list[float]:
    """The meter's default lr grid for a model: narrower models fine-tune best at larger learning rates (measured:
    docs/pretraining.md, "Which model for a budget"). Unknown width: the wide grid."""
    try:
        hidden = int(json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))["hidden_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return list(WIDE_LRS)
    return next((list(grid) for width, grid in LR_GRIDS if hidden <= width), list(WIDE_LRS))


def random_init(model_dir: Path, out: Path, seed: int) -> Path:
    """``out``: the encoder of ``model_dir``'s architecture and config, initialised afresh (the model's own init,
    seeded with ``seed``), with ``model_dir``'s tokenizer files. The same config and seed give the same weights."""
    import torch  # `bertkit downstream -h` imports this module without it

    cls = models.of_directory(model_dir).model_class("base")  # imported by the registry when asked for
    try:
        model = cls.from_pretrained(model_dir)
    except FileNotFoundError as e:
        raise InputError(f"--model {model_dir}: {e}") from None
    torch.manual_seed(seed)
    model.init_weights()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for name in TOKENIZER_FILES:
        if (model_dir / name).is_file():
            shutil.copy(model_dir / name, out / name)
    return out


# the finetune flags the meter sets for each of its runs (or from its own flags, recorded for a resume):
# --finetune-args may not give them
METER_FLAGS = (*CELL_FLAGS, "--epochs", "--max-train-examples")


@dataclass(frozen=True, kw_only=True)
class MeterConfig:
    """What ``bertkit downstream`` runs; its fields are the command's flags (a list, duration or path may be given as
    its flag's text: read, and a bad one refused naming the flag, when the config is made). ``finetune_args``: flags
    passed to every ``bertkit finetune``."""

    model: Path = model_option("bertkit or Hugging Face BERT / ModernBERT directory")
    data_dir: Path = option(
        required=True,
        help="where the task files are: the shared data's layout (glue/SST-2/train.tsv, ner/conll2003/train.txt), "
        "a GLUE download (SST-2/train.tsv ...) or one folder of TASK_train.tsv / TASK_dev.tsv files",
    )
    # an unwritable one is refused when the command line is parsed, and nothing is made there until every flag, the
    # model and the task files are checked (the meter makes it)
    output: Path = output_option("the meter's directory")
    tasks: list[str] = option(
        default_factory=lambda: list(DEFAULT_TASKS),
        help=f"comma-separated, from {', '.join(METER_TASKS)} (default {','.join(DEFAULT_TASKS)})",
    )
    seeds: list[int] | str = option(
        default_factory=lambda: [1, 2, 3], help="fine-tuning seeds: a count N (1..N) or a list (default 3)"
    )
    lrs: list[float] | str | None = option(
        None,
        flag="--lr",
        metavar="LR",
        help="the learning-rate grid both routes share (default by the model's width: 3e-4,1e-3,3e-3 up to hidden "
        "size 128, where the tiny models' best lrs were 3e-4..3e-3 and 1e-2 was worse; 1e-4,3e-4,1e-3 up to 256; "
        "5e-5,1e-4,3e-4 above: docs/pretraining.md, 'Which model for a budget')",
    )
    sst2_examples: int = option(20000, help="SST-2's training subset: its first N examples (0 = all)")
    max_train_examples: int = option(0, help="every task: use only the first N examples (0 = all)")
    epochs: float | None = option(None, help="fine-tuning epochs (default: finetune's)")
    init_seed: int = option(0, help="seed of the random initialisation")
    max_time_per_run: float | str | None = option(None, metavar="DURATION", help="bound each fine-tuning")
    finetune_args: list[str] = option(
        default_factory=list,
        parse=flag_string(METER_FLAGS, configure_finetune),
        help='more finetune flags for both routes, e.g. "--batch-size 16 --threads 1" (not the flags the meter sets '
        f"for each run: {', '.join(METER_FLAGS)})",
    )
    jobs: int = option(
        1,
        help="fine-tunings run at once: on a GPU several share it; on a CPU give each one core with "
        '--finetune-args "--threads 1"',
    )

    def __post_init__(self) -> None:
        for name in ("model", "data_dir", "output"):
            from_text(self, name, Path)
        if not self.model.is_dir():
            raise InputError(f"--model {self.model}: not a directory")
        if not self.data_dir.is_dir():
            raise InputError(f"--data-dir {self.data_dir}: not a directory")
        check_bounds(self, InputError)  # counts >= 0, --epochs > 0: as the flags are parsed
        if self.jobs < 1:
            raise InputError(f"--jobs: expected 1 or more, got {self.jobs}")
        from_text(self, "tasks", resolve_meter_tasks)
        from_text(self, "seeds", parse_seeds)
        from_text(self, "lrs", parse_lrs)
        from_text(self, "max_time_per_run", lambda t: parse_time(t, "--max-time-per-run"))
        if self.lrs is None:
            object.__setattr__(self, "lrs", default_lrs(self.model))

    def record(self) -> dict[str, Any]:
        """The settings a resumed meter must share (the task list and time bound may change)."""
        return {
            "model": str(Path(self.model).resolve()),
            "seeds": self.seeds,
            "lrs": self.lrs,
            "sst2_examples": self.sst2_examples,
            "max_train_examples": self.max_train_examples,
            "epochs": self.epochs,
            "init_seed": self.init_seed,
            "finetune_args": self.finetune_args,
        }

    def train_limit(self, task: str) -> int:
        """--max-train-examples for ``task`` (0 = all)."""
        limits = [n for n in (self.max_train_examples, self.sst2_examples if task == "sst2" else 0) if n > 0]
        return min(limits) if limits else 0


@dataclass
class TaskGain:
    task: MeterTask
    pretrained: Summary
    random: Summary

    @property
    def gain(self) -> float:
        return self.pretrained.median - self.random.median


@dataclass
class MeterReport:
    output: Path
    gains: list[TaskGain]
    cells_run: int
    cells_kept: int
    files: list[Path]

    @property
    def mean_gain(self) -> float | None:
        return statistics.fmean(g.gain for g in self.gains) if self.gains else None


class DownstreamMeter:
    """Runs the meter cell by cell, keeping finished cells; ``run`` returns a :class:`MeterReport`. ``run_child``
    runs one ``bertkit`` command (default: a child process, :func:`run_bertkit`)."""

    def __init__(self, cfg: MeterConfig, say: Callable[[str], None] | None = None, stop=None, run_child=None):
        self.cfg, self.stop = cfg, stop
        self.say = say or log.info
        self.run_child = run_child or run_bertkit
        self.cells_run = self.cells_kept = 0
        self._lock = threading.Lock()

    def random_model(self) -> Path:
        out = self.cfg.output / "random-init"
        done = out / "init.json"
        if not done.is_file():
            self.say(f"random initialisation of {self.cfg.model}'s config (seed {self.cfg.init_seed}) ...")
            shutil.rmtree(out, ignore_errors=True)
            random_init(Path(self.cfg.model), out, self.cfg.init_seed)
            write_json(done, {"source": str(Path(self.cfg.model).resolve()), "seed": self.cfg.init_seed})
        return out

    def _finetune(self, task: MeterTask, files: tuple[Path, Path], model: Path, lr: float, seed: int, cell: Path):
        cfg = self.cfg
        shutil.rmtree(cell, ignore_errors=True)  # an unfinished cell of a killed meter: start it afresh
        cell.mkdir(parents=True)
        args = ["finetune", "--task", task.finetune, "--train", str(files[0]), "--dev", str(files[1])]
        args += ["--model", str(model), "--output", str(cell), "--lr", f"{lr:g}", "--seed", str(seed)]
        if cfg.train_limit(task.name):
            args += ["--max-train-examples", str(cfg.train_limit(task.name))]
        if cfg.epochs is not None:
            args += ["--epochs", f"{cfg.epochs:g}"]
        args += [*cfg.finetune_args, *([] if "--quiet" in cfg.finetune_args else ["--quiet"])]
        result = self.run_child(args, log=cell / "finetune.log", max_time=cfg.max_time_per_run, stop=self.stop)
        check_stop(self.stop, "the downstream meter", self.cfg.output)
        metrics_path = cell / "metrics.json"
        if result.code != 0 and not (result.timed_out and metrics_path.is_file()):
            raise RunError(
                f"{task.column} lr {lr:g} seed {seed}: bertkit finetune exited with {result.code}; see "
                f"{cell / 'finetune.log'}:\n{log_tail(result)}"
            )
        record: dict[str, Any] = {"task": task.name, "lr": lr, "seed": seed, "name": cell.name, "score": None}
        record.update(seconds=round(result.seconds, 2), timed_out=result.timed_out)
        if metrics_path.is_file():
            metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
            numbers = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
            # fractions, as the GLUE suite's cells hold them (conlleval's F1 is in percent)
            record["metrics"] = {k: v / 100 if task.percent and k in task.metrics else v for k, v in numbers.items()}
            record["score"] = meter_score(task, record["metrics"])
        # the meter needs the scores, not the fine-tuned weights
        shutil.rmtree(cell / "checkpoints", ignore_errors=True)
        for name in ("model.safetensors", "pytorch_model.bin"):
            (cell / name).unlink(missing_ok=True)
        return record

    def _cell(self, route: str, model: Path, task: MeterTask, files: tuple[Path, Path], lr: float, seed: int):
        """One finished cell's record: read back when a run before finished it, else fine-tuned now."""
        cell = self.cfg.output / "runs" / route / task.name / cell_name(lr, seed)
        try:
            record = json.loads((cell / "cell.json").read_text(encoding="utf-8"))
            with self._lock:
                self.cells_kept += 1
        except (OSError, json.JSONDecodeError):
            check_stop(self.stop, "the downstream meter", self.cfg.output)
            self.say(f"{task.column} {route}: lr {lr:g}, seed {seed} ...")
            record = self._finetune(task, files, model, lr, seed, cell)
            write_json(cell / "cell.json", record)  # last: the cell is finished
            with self._lock:
                self.cells_run += 1
            score = record["score"]
            self.say(
                f"{task.column} {route}: lr {lr:g}, seed {seed}: "
                + ("no dev score" if score is None else f"{score:.2f}")
                + f" ({record['seconds']:.0f}s)"
            )
        return {**record, "route": route}

    def _cells(self, plan: list[tuple]) -> list[dict]:
        """The cells of ``plan`` (argument tuples of :meth:`_cell`), in plan order: one after another, or
        ``--jobs`` at a time (each fine-tuning is its own process; the first failure stops the rest)."""
        for route, _, task, *_ in plan:
            root = self.cfg.output / "runs" / route / task.name
            root.mkdir(parents=True, exist_ok=True)
            remove_stale_temp_files(root)
        if self.cfg.jobs <= 1:
            return [self._cell(*args) for args in plan]
        from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

        with ThreadPoolExecutor(self.cfg.jobs) as pool:
            futures = [pool.submit(self._cell, *args) for args in plan]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            failed = next((f for f in done if f.exception() is not None), None)
            if failed is not None:
                for f in futures:
                    f.cancel()
                raise failed.exception()
            return [f.result() for f in futures]

    def run(self) -> MeterReport:
        cfg = self.cfg
        what = "a downstream meter run"
        tasks = [METER_TASKS[name] for name in cfg.tasks]
        files = {t.name: find_files(Path(cfg.data_dir), t) for t in tasks}  # all found before --output is made
        open_study(cfg.output, "meter.json", cfg.record(), what, "the same model, seeds, lr grid and fine-tuning flags")
        models = {"pretrained": Path(cfg.model), "random": self.random_model()}
        plan = [
            (route, models[route], task, files[task.name], lr, seed)
            for task in tasks
            for route in ROUTES
            for lr in cfg.lrs
            for seed in cfg.seeds
        ]
        cells = self._cells(plan)
        gains = []
        for task in tasks:
            summaries = {}
            for route in ROUTES:
                route_cells = [c for c in cells if c["task"] == task.name and c["route"] == route]
                summaries[route] = summarize(task.name, route_cells, metric_names=task.metrics)
            if summaries["pretrained"] is None or summaries["random"] is None:
                self.say(f"{task.column}: no dev score for a route (every run ran out of --max-time-per-run)")
                continue
            gains.append(TaskGain(task, summaries["pretrained"], summaries["random"]))
        report = MeterReport(cfg.output, gains, self.cells_run, self.cells_kept, [])
        report.files = write_results(cfg.output, report, cells)
        return report


def result_rows(report: MeterReport) -> list[dict[str, Any]]:
    """A row per task (median over seeds at each route's best lr, the gain) and the mean gain's row."""
    rows: list[dict[str, Any]] = []
    for g in report.gains:
        rows.append(
            {
                "task": g.task.column,
                "metric": g.task.metric,
                "pretrained": round(g.pretrained.median, 2),
                "random": round(g.random.median, 2),
                "gain": round(g.gain, 2),
                "pretrained_lr": f"{g.pretrained.lr:g}",
                "random_lr": f"{g.random.lr:g}",
                "seeds": len(g.pretrained.scores),
                "pretrained_seed_scores": ";".join(f"{x:.2f}" for x in g.pretrained.scores),
                "random_seed_scores": ";".join(f"{x:.2f}" for x in g.random.scores),
            }
        )
    if report.gains:
        rows.append({"task": "mean gain", "gain": round(report.mean_gain, 2)})
    return rows


def write_results(out: Path, report: MeterReport, cells: list[dict]) -> list[Path]:
    """downstream.csv, downstream.md, cells.csv and (with a task finished) downstream.png."""
    rows = result_rows(report)
    write_text(out / "downstream.csv", csv_text(rows))
    columns = ["task", "metric", "pretrained", "random", "gain", "pretrained_lr", "random_lr", "seeds"]
    note = (
        "\nEach route: the learning rate with the best median dev score over the seeds, reported as that median; "
        "gain = pretrained - random, in points of the official metric (MRPC: (F1 + accuracy) / 2; CoLA: MCC; "
        "CoNLL-2003: entity F1).\n"
    )
    write_text(out / "downstream.md", markdown_table(rows, columns, digits=2) + note)
    cell_rows = [
        {
            "route": c["route"],
            "task": METER_TASKS[c["task"]].column,
            "lr": f"{float(c['lr']):g}",
            "seed": c["seed"],
            "score": None if c.get("score") is None else round(c["score"], 4),
            "seconds": c.get("seconds"),
            "timed_out": c.get("timed_out", False),
        }
        for c in cells
    ]
    write_text(out / "cells.csv", csv_text(cell_rows))
    files = [out / "downstream.csv", out / "downstream.md", out / "cells.csv"]
    if report.gains:
        labels = [g.task.column for g in report.gains]
        groups = {route: [getattr(g, route).median for g in report.gains] for route in ROUTES}
        title = f"pre-trained vs random init: median of {len(report.gains[0].pretrained.scores)} seeds, best lr each"
        if report.mean_gain is not None:
            title += f"; mean gain {report.mean_gain:+.1f}"
        files.append(
            bar_chart(out / "downstream.png", labels, [], ylabel="dev score (points)", title=title, groups=groups)
        )
    return files
