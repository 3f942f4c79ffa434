"""The paper's pre-training ablations, run on your corpus: every variant gets the same corpus, vocabulary, budget
(wall clock or steps) and seeds, is pre-trained with ``bertkit pretrain``, reports its held-out MLM accuracy, and is
fine-tuned on the chosen GLUE tasks with the GLUE suite (median and min-max over seeds).

Studies:

- ``nsp``: MLM + NSP against MLM only (``--no-nsp``: full-sentence packing, RoBERTa's choice); the paper's Table 5.
- ``mask-rate``: 15 / 30 / 40 % masking (Wettig et al., 2023, "Should you mask 15% in MLM?").
- ``model-size``: the presets, tiny to small by default, or a list; the paper's Table 6.
- ``steps``: one pre-training run saving checkpoints along the way, each fine-tuned; the paper's Figure 5.

Layout (``OUTPUT``)::

    study.json                      the settings; a resumed study must match them
    vocab/vocab.txt                 the one vocabulary every variant uses (unless --vocab is given)
    pretrain/VARIANT/               a ``bertkit pretrain`` run; ``variant.json`` (held-out metrics) when it is done
    finetune/VARIANT/               the GLUE suite of that variant (its cells resume like ``bertkit glue``)
    results.csv, results.md, STUDY.png
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit import models
from bertkit.data.pretraining.corpus import expand_corpus
from bertkit.errors import InputError, RunError
from bertkit.experiments.glue import BY_NAME, SuiteConfig, SuiteRunner, resolve_tasks
from bertkit.experiments.plots import bar_chart, line_chart, read_records
from bertkit.experiments.runner import CELL_FLAGS, check_stop, configure_finetune, log_tail, open_study, run_bertkit
from bertkit.experiments.tables import csv_text
from bertkit.files import write_json, write_text
from bertkit.options import (
    corpus_option,
    flag_string,
    from_text,
    option,
    output_option,
    parse_lrs,
    parse_seeds,
    parse_time,
    vocab_option,
)

log = logging.getLogger(__name__)

STUDIES = ("nsp", "mask-rate", "model-size", "steps")
DEFAULT_RATES = (0.15, 0.30, 0.40)
DEFAULT_SIZES = ("bert-tiny", "bert-mini", "bert-small")


@dataclass(frozen=True)
class Variant:
    key: str  # directory name
    label: str  # the table's row name
    args: tuple[str, ...]  # pretrain flags that make this variant
    value: Any = None  # the studied quantity (mask rate, preset, step)


def variants_for(study: str, values: Sequence[str] | None) -> list[Variant]:
    """The variants of ``study`` (``values``: mask rates or model sizes given on the command line)."""
    if study == "nsp":
        # both explicit: pretrain's budget recipe (the default with --max-time) otherwise turns NSP off
        return [
            Variant("mlm-nsp", "MLM + NSP", ("--nsp",), True),
            Variant("mlm-only", "MLM only (no NSP)", ("--no-nsp",), False),
        ]
    if study == "mask-rate":
        rates = [float(v) for v in values] if values else list(DEFAULT_RATES)
        for r in rates:
            if not 0.0 < r < 1.0:
                raise InputError(f"--values: mask rate {r} is not between 0 and 1")
        return [Variant(f"mask-{r:g}", f"{100 * r:g}% masking", ("--mask-prob", f"{r:g}"), r) for r in rates]
    if study == "model-size":
        presets = models.get(None).presets  # BERT's, which --model-size maps to any --arch's

        sizes = list(values) if values else list(DEFAULT_SIZES)
        for s in sizes:
            if s not in presets:
                raise InputError(f"--values: unknown model size {s!r}; choose from {', '.join(presets)}")
        return [Variant(s, s, ("--model-size", s), s) for s in sizes]
    if study == "steps":
        return [Variant("run", "one run", (), None)]
    raise InputError(f"--study {study!r}: choose one of {', '.join(STUDIES)}")


def _values(text: str) -> list[str] | None:
    return [v.strip() for v in text.split(",") if v.strip()] or None


@dataclass(frozen=True, kw_only=True)
class AblateConfig:
    """What ``bertkit ablate`` runs; its fields are the command's flags. A list, duration or path may be given as its
    flag's text: it is read (and a bad one refused, naming the flag) when the config is made."""

    corpus: list[str] = corpus_option("text files or directories (as for pretrain)")
    output: Path = output_option("the study's directory")
    study: str = option(
        required=True,
        choices=STUDIES,
        help="nsp: MLM+NSP vs MLM only; mask-rate: 15/30/40%%; model-size: presets; steps: one run's checkpoints "
        "(Figure 5)",
    )
    values: list[str] | None = option(
        None,
        help="mask-rate: rates (default 0.15,0.3,0.4); model-size: presets (default bert-tiny,bert-mini,bert-small)",
    )
    budget: float | str | None = option(None, metavar="DURATION", help="pre-training wall clock per variant (e.g. 10m)")
    steps: int | None = option(None, help="pre-training steps per variant")
    checkpoints: int = option(5, help="steps study: checkpoints along the run")
    save_every: int | None = option(None, help="steps study: checkpoint every K steps")
    glue: Path | None = option(
        None, metavar="GLUE_DIR", help="GLUE directory to fine-tune on (without it: pre-training and MLM accuracy only)"
    )
    tasks: list[str] = option(
        default_factory=lambda: ["sst2", "mrpc"], help="GLUE tasks to fine-tune (default sst2,mrpc)"
    )
    seeds: list[int] | str = option(
        default_factory=lambda: [1, 2], help="fine-tuning seeds: a count or a list (default 2)"
    )
    lrs: list[float] | str = option(
        default_factory=lambda: [5e-5],
        flag="--lr",
        metavar="LR",
        help="fine-tuning learning rate(s), comma-separated (default 5e-5)",
    )
    max_time_per_run: float | str | None = option(None, metavar="DURATION", help="bound each fine-tuning")
    vocab: Path | None = vocab_option("a vocab.txt every variant uses (default: trained once on the corpus)")
    vocab_size: int = option(30522, help="size of the vocabulary trained on the corpus")
    pretrain_seed: int = option(0, help="seed of every variant's pre-training")
    pretrain_args: list[str] = option(
        default_factory=list,
        parse=flag_string(("--output", "--corpus", "--vocab", "--seed", "--resume", "--overwrite")),
        help='more pretrain flags for every variant, e.g. "--seq-len 128 --batch-size 64"',
    )
    finetune_args: list[str] = option(
        default_factory=list,
        parse=flag_string(CELL_FLAGS, configure_finetune),
        help='more finetune flags, e.g. "--epochs 2 --max-train-examples 5000"',
    )

    def __post_init__(self) -> None:
        from_text(self, "budget", lambda t: parse_time(t, "--budget"))
        from_text(self, "max_time_per_run", lambda t: parse_time(t, "--max-time-per-run"))
        from_text(self, "values", _values)
        from_text(self, "tasks", resolve_tasks)
        from_text(self, "seeds", parse_seeds)
        from_text(self, "lrs", parse_lrs)
        for name in ("output", "glue", "vocab"):
            from_text(self, name, Path)
        variants_for(self.study, self.values)  # a bad --values: refused before the study's directory is made

    def record(self) -> dict[str, Any]:
        return {
            "corpus": [str(Path(c).resolve()) for c in self.corpus],
            "study": self.study,
            "budget": self.budget,
            "steps": self.steps,
            "values": self.values,
            "vocab": str(self.vocab) if self.vocab else None,
            "vocab_size": self.vocab_size,
            "checkpoints": self.checkpoints,
            "save_every": self.save_every,
            "pretrain_seed": self.pretrain_seed,
            "pretrain_args": self.pretrain_args,
        }


@dataclass
class VariantResult:
    variant: Variant
    model_dir: Path
    heldout: dict[str, float]
    steps: int | None
    seconds: float | None
    summaries: dict[str, Any]  # task -> glue.Summary


@dataclass
class AblateReport:
    output: Path
    results: list[VariantResult]
    files: list[Path]


class AblationStudy:
    """Runs a study variant by variant (pre-training, then fine-tuning), resuming whatever is finished."""

    def __init__(self, cfg: AblateConfig, say: Callable[[str], None] | None = None, stop=None, run_child=None):
        if cfg.budget is None and cfg.steps is None:
            raise InputError("give a pre-training budget: --budget DURATION (wall clock) or --steps N")
        if cfg.study == "steps" and cfg.steps is None and cfg.save_every is None:
            raise InputError(
                "--study steps with --budget needs --save-every K (checkpoints every K steps); "
                "with --steps N they are at N/5, 2N/5, ... (or --checkpoints)"
            )
        self.cfg = cfg
        self.say = say or log.info
        self.stop = stop
        self.run_child = run_child or run_bertkit

    # -------------------------------------------------------------- vocabulary
    def vocabulary(self) -> Path:
        cfg = self.cfg
        if cfg.vocab is not None:
            return cfg.vocab
        path = cfg.output / "vocab" / "vocab.txt"
        if path.is_file():
            return path
        files = [str(f) for f in expand_corpus(cfg.corpus)]  # `bertkit vocab` reads them as pretrain does
        self.say(f"training the shared {cfg.vocab_size}-token vocabulary ...")
        result = self.run_child(
            # --overwrite: the directory is the study's own (a failed attempt's vocab.log may be there)
            ["vocab", *files, "--output", str(path.parent), "--vocab-size", str(cfg.vocab_size), "--overwrite"]
            + ["--quiet"],
            log=cfg.output / "vocab" / "vocab.log",
            stop=self.stop,
        )
        check_stop(self.stop, "the ablation", self.cfg.output)
        if result.code != 0 or not path.is_file():
            raise RunError(f"bertkit vocab exited with {result.code}; see {cfg.output / 'vocab' / 'vocab.log'}")
        return path

    # -------------------------------------------------------------- pre-training
    def pretrain(self, variant: Variant, vocab: Path) -> tuple[Path, dict]:
        cfg = self.cfg
        run_dir = cfg.output / "pretrain" / variant.key
        done = run_dir / "variant.json"
        if done.is_file():
            return run_dir, json.loads(done.read_text(encoding="utf-8"))
        args = [
            "pretrain",
            "--corpus",
            *cfg.corpus,
            "--output",
            str(run_dir),
            "--vocab",
            str(vocab),
            "--seed",
            str(cfg.pretrain_seed),
            "--quiet",
            *variant.args,
        ]
        if cfg.budget is not None:
            args += ["--max-time", f"{cfg.budget:g}s"]
        if cfg.steps is not None:
            args += ["--max-steps", str(cfg.steps)]
        if cfg.study == "steps":
            every = cfg.save_every or max(1, cfg.steps // max(1, cfg.checkpoints))
            args += ["--save-every", str(every), "--keep-checkpoints", "100000", "--eval-every", str(every)]
        args += cfg.pretrain_args
        if (run_dir / "run.json").is_file():
            args.append("--resume")
            self.say(f"{variant.label}: resuming pre-training")
        else:
            if run_dir.exists():
                shutil.rmtree(run_dir)  # started but not even recorded: start afresh
            self.say(f"{variant.label}: pre-training ...")
        check_stop(self.stop, "the ablation", self.cfg.output)
        result = self.run_child(args, log=cfg.output / "pretrain" / f"{variant.key}.log", stop=self.stop)
        check_stop(self.stop, "the ablation", self.cfg.output)
        if result.code != 0 or not (run_dir / "config.json").is_file():
            raise RunError(
                f"{variant.label}: bertkit pretrain exited with {result.code}; see "
                f"{cfg.output / 'pretrain' / (variant.key + '.log')}:\n{log_tail(result)}"
            )
        record = {"variant": variant.key, **heldout_metrics(run_dir), "seconds": round(result.seconds, 1)}
        write_json(done, record)
        self.say(
            f"{variant.label}: held-out MLM accuracy {record.get('eval_mlm_acc', float('nan')):.4f} "
            f"after {record.get('step')} steps"
        )
        return run_dir, record

    # -------------------------------------------------------------- fine-tuning
    def finetune(self, key: str, model_dir: Path) -> dict[str, Any]:
        cfg = self.cfg
        if cfg.glue is None or not cfg.tasks:
            return {}

        suite = SuiteConfig(
            model=model_dir,
            data=cfg.glue,
            output=cfg.output / "finetune" / key,
            tasks=cfg.tasks,
            tasks_given=True,
            seeds=cfg.seeds,
            lrs=cfg.lrs,
            finetune_args=cfg.finetune_args,
            max_time_per_run=cfg.max_time_per_run,
            predict_test=False,
        )
        report = SuiteRunner(
            suite, say=lambda m: self.say(f"[{key}] {m}"), stop=self.stop, run_child=self.run_child
        ).run()
        return report.summaries

    # -------------------------------------------------------------- the study
    def run(self) -> AblateReport:
        cfg = self.cfg
        out = cfg.output
        open_study(
            out, "study.json", cfg.record(), "a study", "the same corpus, budget, variants and pre-training flags"
        )
        vocab = self.vocabulary()
        results: list[VariantResult] = []
        for variant in variants_for(cfg.study, cfg.values):
            run_dir, record = self.pretrain(variant, vocab)
            if cfg.study == "steps":
                for step, model_dir, held in export_checkpoints(run_dir, out / "pretrain" / "steps"):
                    v = Variant(f"step-{step}", f"{step} steps", (), step)
                    results.append(VariantResult(v, model_dir, held, step, None, self.finetune(v.key, model_dir)))
                continue
            results.append(
                VariantResult(
                    variant,
                    run_dir,
                    {k: record[k] for k in record if k.startswith("eval_")},
                    record.get("step"),
                    record.get("seconds"),
                    self.finetune(variant.key, run_dir),
                )
            )
        files = write_study_results(out, cfg, results)
        return AblateReport(out, results, files)


def heldout_metrics(run_dir: Path, step: int | None = None) -> dict[str, Any]:
    """The last held-out record (``eval_*``) of a pretrain run's metrics.jsonl, at or before ``step`` if given, with
    the step it was taken at, and the run's last training step."""

    records = read_records(run_dir)
    evals = [r for r in records if "eval_mlm_acc" in r and (step is None or r.get("step", 0) <= step)]
    out: dict[str, Any] = {}
    if evals:
        out.update({k: v for k, v in evals[-1].items() if k.startswith("eval_")})
        out["eval_step"] = evals[-1].get("step")
    steps = [r["step"] for r in records if "step" in r]
    out["step"] = step if step is not None else (max(steps) if steps else None)
    return out


def export_checkpoints(run_dir: Path, dest: Path) -> list[tuple[int, Path, dict]]:
    """Each training checkpoint of a pretrain run as a model directory ``dest/step-N`` (config.json,
    model.safetensors, vocab.txt), written once; returns (step, directory, held-out metrics at that step)."""
    # torch: `bertkit ablate -h` imports this module without it
    from bertkit.training.checkpointing import checkpoint_dir, list_checkpoints

    out = []
    for step, path in list_checkpoints(checkpoint_dir(run_dir)):
        target = dest / f"step-{step}"
        if not (target / "exported.json").is_file():
            _export(run_dir, path, target)
            write_json(target / "exported.json", {"checkpoint": str(path), "step": step})
        out.append((step, target, {k: v for k, v in heldout_metrics(run_dir, step).items() if k != "step"}))
    return out


def _export(run_dir: Path, checkpoint: Path, target: Path) -> None:
    # torch: `bertkit ablate -h` imports this module without it
    from bertkit.training.checkpointing import load_checkpoint

    state = load_checkpoint(checkpoint)
    arch = models.of_directory(run_dir)  # the run's pre-training model, of its architecture
    model = arch.model_class(arch.pretraining_role)(arch.config_class().from_pretrained(run_dir))
    model.load_state_dict(state["model"])
    target.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(target)
    for name in ("vocab.txt", "tokenizer_config.json", "tokenizer.json"):
        if (run_dir / name).is_file():
            shutil.copyfile(run_dir / name, target / name)


# ----------------------------------------------------------------------------------------------- results


def _cell(summary) -> str:
    if summary is None:
        return "-"
    if len(summary.scores) > 1:
        return f"{summary.median:.1f} ({summary.low:.1f}-{summary.high:.1f})"
    return f"{summary.median:.1f}"


def write_study_results(out: Path, cfg: AblateConfig, results: list[VariantResult]) -> list[Path]:
    """results.csv (a row per variant: held-out metrics, per-task median / min / max), results.md (the paper's
    table shape) and STUDY.png."""

    tasks = [t for t in cfg.tasks if any(t in r.summaries for r in results)]
    columns = [BY_NAME[t].column for t in tasks]
    rows = []
    for r in results:
        row: dict[str, Any] = {
            "study": cfg.study,
            "variant": r.variant.label,
            "value": r.variant.value,
            "pretrain_steps": r.steps,
            "pretrain_seconds": r.seconds,
            "heldout_mlm_acc": _round(r.heldout.get("eval_mlm_acc"), 4),
            "heldout_mlm_baseline": _round(r.heldout.get("eval_mlm_baseline"), 4),
            "heldout_nsp_acc": _round(r.heldout.get("eval_nsp_acc"), 4),
            "heldout_loss": _round(r.heldout.get("eval_loss"), 4),
        }
        if cfg.study == "model-size":
            row.update(zip(("layers", "hidden", "heads"), models.get(None).presets[r.variant.value]))
        scores = []
        for t, col in zip(tasks, columns):
            s = r.summaries.get(t)
            row[f"{col}_median"] = None if s is None else round(s.median, 2)
            row[f"{col}_min"] = None if s is None else round(s.low, 2)
            row[f"{col}_max"] = None if s is None else round(s.high, 2)
            if s is not None:
                scores.append(s.median)
        row["average"] = round(sum(scores) / len(scores), 2) if scores and len(scores) == len(tasks) else None
        rows.append(row)
    write_text(out / "results.csv", csv_text(rows))
    write_text(out / "results.md", study_markdown(cfg, results, tasks))
    files = [out / "results.csv", out / "results.md", _figure(out, cfg, results, tasks)]
    return files


def _round(x: Any, digits: int) -> Any:
    return round(x, digits) if isinstance(x, (int, float)) else None


FIRST_COLUMN = {
    "nsp": "Pre-training tasks",
    "mask-rate": "Mask rate",
    "model-size": "Model",
    "steps": "Pre-training steps",
}


def study_markdown(cfg: AblateConfig, results: list[VariantResult], tasks: list[str]) -> str:
    head = [FIRST_COLUMN[cfg.study]]
    if cfg.study == "model-size":
        head += ["#L", "#H", "#A"]
    head += ["held-out MLM acc (best constant)"]
    if cfg.study == "nsp":
        head += ["held-out NSP acc"]
    head += [f"{BY_NAME[t].column} (dev)" for t in tasks]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for r in results:
        cells = [r.variant.label]
        if cfg.study == "model-size":
            cells += [str(x) for x in models.get(None).presets[r.variant.value]]
        acc, base = r.heldout.get("eval_mlm_acc"), r.heldout.get("eval_mlm_baseline")
        cells.append("-" if acc is None else f"{100 * acc:.1f}" + ("" if base is None else f" ({100 * base:.1f})"))
        if cfg.study == "nsp":
            nsp = r.heldout.get("eval_nsp_acc")
            cells.append("-" if nsp is None else f"{100 * nsp:.1f}")
        cells += [_cell(r.summaries.get(t)) for t in tasks]
        lines.append("| " + " | ".join(cells) + " |")
    budget = (
        (f"{cfg.budget:g} s of pre-training" if cfg.budget is not None else "")
        + (" / " if cfg.budget is not None and cfg.steps is not None else "")
        + (f"{cfg.steps} steps" if cfg.steps is not None else "")
    )
    lines += [
        "",
        f"Each variant: the same corpus, vocabulary, budget ({budget}) and seeds. Task scores are dev "
        f"GLUE points, median (min-max) over {len(cfg.seeds)} fine-tuning seed(s); held-out MLM accuracy in % at "
        f"[MASK] positions (docs/pretraining.md), beside the best constant guess"
        + (" (each at its own mask rate)" if cfg.study == "mask-rate" else "")
        + ".",
    ]
    return "\n".join(lines) + "\n"


def _figure(out: Path, cfg: AblateConfig, results: list[VariantResult], tasks: list[str]) -> Path:
    path = out / f"{cfg.study}.png"
    labels = [BY_NAME[t].column for t in tasks] + ["held-out MLM acc"]

    def values(r: VariantResult) -> list[float | None]:
        acc = r.heldout.get("eval_mlm_acc")
        return [r.summaries[t].median if t in r.summaries else None for t in tasks] + [
            None if acc is None else 100 * acc
        ]

    if cfg.study == "steps":
        xs = [r.variant.value for r in results]
        series = {lab: [values(r)[i] for r in results] for i, lab in enumerate(labels)}
        low = {
            BY_NAME[t].column: [r.summaries[t].low if t in r.summaries else float("nan") for r in results]
            for t in tasks
        }
        high = {
            BY_NAME[t].column: [r.summaries[t].high if t in r.summaries else float("nan") for r in results]
            for t in tasks
        }
        return line_chart(
            path,
            xs,
            series,
            "pre-training steps",
            "dev score / held-out MLM acc (%)",
            title="fine-tuned score against pre-training steps (median, min-max band)",
            low=low,
            high=high,
        )
    groups = {r.variant.label: values(r) for r in results}
    return bar_chart(
        path,
        labels,
        [],
        ylabel="dev score / held-out MLM acc (%)",
        groups=groups,
        title=f"ablation: {cfg.study} (median over seeds)",
    )
