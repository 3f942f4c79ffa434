"""The settings of a pre-training run: :class:`PretrainConfig`, whose fields are ``bertkit pretrain``'s flags (the
ones marked ``run`` are the keys a resumed run must share; what a recipe fills in is in
:mod:`bertkit.recipes.pretrain.tables`)."""

from __future__ import annotations

import dataclasses
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit import models
from bertkit.data.pretraining import echoes as ech
from bertkit.data.pretraining import instances as ins
from bertkit.data.pretraining import masking as masks
from bertkit.errors import PretrainError
from bertkit.options import (
    POSITIVE,
    check_bounds,
    check_run_flags,
    clip_option,
    corpus_option,
    device_option,
    encoding_option,
    follow_symlinks_option,
    key_value_option,
    lowercase_option,
    lr_option,
    max_steps_option,
    max_time_option,
    option,
    output_option,
    precision_option,
    processes_option,
    seed_option,
    threads_option,
    vocab_option,
    warmup_option,
    workers_option,
)
from bertkit.recipes.pretrain.checks import check_combinations, check_given, check_inputs
from bertkit.recipes.pretrain.objectives import OBJECTIVES
from bertkit.recipes.pretrain.tables import RECIPES

SCHEDULES = ("linear", "trapezoid", "onecycle")


def _run_key(default: Any = dataclasses.MISSING, **kwargs: Any) -> Any:
    """An ``option`` that changes what is computed: a resumed run must match it (others, like save_every, may
    change). Marked ``run`` in the field's metadata; :data:`RUN_KEYS` lists them."""
    return _as_run_key(option(default, **kwargs))


def _as_run_key(f: Any) -> Any:
    """A shared option (``bertkit.options``) marked as a run key."""
    f.metadata = types.MappingProxyType({**f.metadata, "run": True})
    return f


_D, _M, _R, _T = ("data", "model and objectives", "recipe (unset: chosen by --recipe)", "training")
_O = "checkpoints and output"
WORKERS_HELP = "processes building batches during training (default: on a GPU a third of the cores, 2 to 8; on CPU 0)"
PROFILE_HELP = (
    "profile STEPS training steps from the middle of the run with torch.profiler: wall time against the GPU's "
    "kernel time, launches and host syncs a step, the top kernels (on a CPU: operators); into OUTPUT/profile.txt"
)


@dataclass(frozen=True)
class PretrainConfig:
    """Every setting of a pre-training run; ``bertkit pretrain``'s flags are built from these fields. Validated
    when made; what is left unset is filled in once by :func:`bertkit.recipes.pretrain.resolve` (``chosen`` then
    says what it chose), and no field changes after that."""

    corpus: list[str] = _as_run_key(corpus_option(group=_D))
    follow_symlinks: bool = follow_symlinks_option(group=_D)
    output: str = output_option(metavar="DIR", group=_D, help="the run directory")
    corpus_format: str = _run_key(
        "auto",
        choices=("auto", "google", "prose", "jsonl", "task"),
        group=_D,
        help=(
            "auto: task files first (.tsv, .csv, task-shaped .jsonl, CoNLL: their text columns, for task-adaptive "
            "pre-training with --init-from), then jsonl by name, google when most lines hold one sentence, else prose"
        ),
    )
    encoding: str = _as_run_key(encoding_option(group=_D))
    vocab: str | None = _as_run_key(
        vocab_option("an existing vocab.txt (or its directory); else one is trained on the corpus", group=_D)
    )
    vocab_size: int | None = _run_key(
        None, group=_D, help="size of the trained vocabulary (default: budget recipe 8000, paper 30522)"
    )
    lowercase: bool | None = _as_run_key(  # None: uncased for a trained vocabulary, a given one's own otherwise
        lowercase_option("uncased (default for a trained vocabulary)", "keep case", group=_D)
    )
    workers: int | None = workers_option(group=_D)
    prepare_on: str = option(
        "global",
        choices=("global", "node"),
        group=_D,
        help=(
            "multi-node runs: global = rank 0 prepares the corpus in OUTPUT on a file system every node shares; node = "
            "each node's local rank 0 prepares it in OUTPUT on that node's own disk. The other ranks wait"
        ),
    )
    prepare_timeout: float = option(7200.0, group=_D, help="seconds a rank waits for the corpus preparation")
    loader_workers: int | None = option(None, group=_D, help=WORKERS_HELP)

    arch: str | None = _run_key(
        None,
        choices=models.names(),
        group=_M,
        help=(
            "bert: Devlin et al.'s; modernbert: Warner et al.'s (rotary, GeGLU, pre-norm, sliding windows; "
            "30%% masking, no NSP; saved in transformers' ModernBERT layout). Default: modernbert with the budget "
            "recipe (--objective electra too), bert with the paper recipe; the model's own with --init-from; a "
            "--model-size names its own"
        ),
    )
    model_size: str | None = _run_key(
        None,
        group=_M,
        help=(
            "bert-tiny | bert-mini | bert-small | bert-medium | bert-base | bert-large; with --arch modernbert: "
            "modernbert-tiny | -mini | -small | -base | -large (bert-X names map to modernbert-X). Default: "
            "modernbert-tiny at 6 layers with the budget recipe (modernbert-mini where it reads 7M tokens in the "
            "budget), bert-mini with the paper recipe"
        ),
    )
    objective: str = _run_key(
        "mlm",
        choices=tuple(OBJECTIVES),
        group=_M,
        help=(
            "mlm: masked LM (BERT's); electra: replaced-token detection (Clark et al.): a small generator fills the "
            "masked positions, the model learns which tokens were replaced (the generator goes to OUTPUT/generator); "
            "mntp: GPT-BERT's masked next-token prediction, mixed with causal LM; mlm-clm: masked LM mixed with "
            "causal LM in one head, a [MASK] read where it stands (objectives/ holds each)"
        ),
    )
    causal_ratio: float = _run_key(
        1 / 16, bounds=(0, 1, True, True), group=_M, help="--objective mntp, mlm-clm: the share of causal LM sequences"
    )
    generator_layers: int | None = _run_key(
        None, group=_M, help="--objective electra: the generator's layers (default a quarter of the model's, >= 1)"
    )
    rtd_weight: float = _run_key(
        50.0, group=_M, help="--objective electra: weight of the replaced-token loss beside the generator's MLM loss"
    )
    init_from: str | None = _run_key(
        None,
        metavar="DIR",
        group=_M,
        help=(
            "continue pre-training this model (bertkit, Hugging Face or Google TF directory) on the corpus: "
            "its config, weights and vocabulary (--model-size is then ignored)"
        ),
    )
    config_overrides: dict[str, Any] = _as_run_key(  # checked against the architecture's config once resolved
        key_value_option(
            "override a BertConfig field, e.g. num_hidden_layers=2 (repeatable; value read as JSON)",
            flag="--config-override",
            group=_M,
        )
    )
    nsp: bool | None = _run_key(
        None, negative=("--no-nsp", "MLM only, on full packed sequences"), group=_M, help=ins.NSP_HELP
    )
    segments: str = _run_key("one", choices=ins.SEGMENTS, group=_M, help=ins.SEGMENTS_HELP)
    echo_share: float | None = _run_key(None, bounds=(0, 1, False, True), metavar="P", group=_M, help=ech.ECHO_HELP)
    echo_keep: float | None = _run_key(None, bounds=(0, 1, True, False), metavar="K", group=_M, help=ech.ECHO_KEEP_HELP)
    echo_stage: str | None = _run_key(None, choices=ech.ECHO_STAGES, group=_M, help=ech.ECHO_STAGE_HELP)
    echo_mask: str = _run_key("independent", choices=ech.ECHO_MASKS, group=_M, help=ech.ECHO_MASK_HELP)
    mask_prob: float | str | None = _run_key(  # a float, or "START:END" (data/pretraining/masking.py)
        None, bounds=(0, 1, True, True), parse=masks.mask_prob_flag, metavar="P|START:END", group=_M, help=masks.HELP
    )
    max_predictions: int | None = _run_key(
        None, group=_M, help="masked positions per sequence at most (default ceil(seq_len * the largest mask_prob))"
    )
    mask_strategy: str = _run_key("token", choices=tuple(masks.STRATEGIES), group=_M, help=masks.STRATEGIES_HELP)
    whole_word_mask: bool = option(False, group=_M, help="the same as --mask-strategy whole-word")
    masking: str = _run_key(
        "dynamic",
        choices=("dynamic", "static"),
        group=_M,
        help=("dynamic: fresh masks each epoch; static: --dupe-factor fixed copies, cycled"),
    )
    dupe_factor: int = _run_key(5, group=_M, help="static masking: fixed copies of the data")
    short_seq_prob: float | None = _run_key(None, group=_M, help="share of shorter sequences (paper 0.1)")

    recipe: str | None = _run_key(
        None,
        choices=RECIPES,
        group=_R,
        help=(
            "budget: the settings that learn fastest in minutes (default with --max-time); paper: Devlin et al.'s "
            "(default otherwise). Flags below override single choices"
        ),
    )
    output_bias: str | None = _run_key(
        None,
        choices=("unigram", "zero"),
        group=_R,
        help=("initial MLM output bias: the corpus's unigram log-frequencies, or zeros (paper)"),
    )
    dropout: float | None = _run_key(
        None,
        group=_R,
        help=("dropout while pre-training (paper: the model's, 0.1); config.json keeps the model's for fine-tuning"),
    )
    schedule: str | None = _run_key(
        None,
        choices=SCHEDULES,
        group=_R,
        help=(
            "lr schedule after warmup: linear decay (paper), trapezoid (flat, then linear decay over the last half), "
            "onecycle (cosine up and down)"
        ),
    )
    warmup_fraction: float | None = _as_run_key(warmup_option(None, group=_R))  # paper 0.05
    seq_ramp: str | None = _run_key(
        None,
        metavar="LEN:UNTIL,...",
        group=_R,
        help=("shorter sequences first, e.g. 64:0.3 = length 64 for 30%% of the steps, then --seq-len; off"),
    )
    batch_ramp: str | None = _run_key(
        None,
        metavar="SIZE:UNTIL,...",
        group=_R,
        help=("smaller batches first, e.g. 8:0.05,16:0.15, then --batch-size; off"),
    )
    position_init: str | None = _run_key(
        None,
        choices=("normal", "sinusoidal"),
        group=_R,
        help=(
            "initial position embeddings: Google's truncated normal, or the Transformer's sinusoids at the same scale "
            "(neighbouring positions start alike, so what attention learns at one position holds at the next)"
        ),
    )
    embedding_init: str | None = _run_key(
        None, choices=("normal", "cooccurrence"), group=_R, help="initial token embeddings: random, or PPMI-SVD vectors"
    )
    mask_mix: str | None = _run_key(
        None,
        metavar="MASK/RANDOM/KEEP",
        group=_R,
        help=(
            "what the input of a chosen position becomes, in percent: [MASK], a random token, unchanged (paper "
            "80/10/10; 100/0/0 drops the copy task)"
        ),
    )

    seq_len: int | None = _run_key(None, group=_T, help="sequence length (default 128; the budget recipe ramps to it)")
    batch_size: int | None = _run_key(None, group=_T, help="micro-batch per process (default 32)")
    grad_accum: int = _run_key(1, group=_T, help="micro-batches per optimizer step")
    optimizer: str = _run_key(  # choices: training.optim.OPTIMIZERS (not imported: no torch for --help)
        "adamw", choices=("adamw", "lamb"), group=_T, help="adamw (the paper's); lamb: You et al.'s (training/lamb.py)"
    )
    lr: float | None = _as_run_key(
        lr_option(
            None,
            group=_T,
            help="peak learning rate (paper 1e-4; budget: by model size; lamb: 7e-3 at any size, "
            "its steps being relative to each weight's norm; --init-from: 1e-4, lamb 7e-4)",
        )
    )
    warmup_steps: int | None = _run_key(None, group=_T, help="warmup steps (default: --warmup-fraction)")
    weight_decay: float = _run_key(0.01, group=_T, help="decoupled weight decay (none on biases, LayerNorm)")
    clip: float = _as_run_key(clip_option(1.0, group=_T))
    max_steps: int | None = _as_run_key(max_steps_option(help="optimizer steps (with --max-time: at most)", group=_T))
    max_time: float | None = max_time_option("wall-clock budget (90s, 10m, 1.5h); the schedule is fitted to it", _T)
    two_phase: bool = _run_key(
        False, group=_T, help=("the paper's schedule: --seq-len for 90%% of the steps, then --phase2-seq-len")
    )
    phase2_seq_len: int = _run_key(512, group=_T, help="--two-phase: sequence length of the last 10%% of steps")
    phase2_batch_size: int | None = _run_key(None, group=_T, help="--two-phase: its batch size (default --batch-size)")
    precision: str = _as_run_key(precision_option(group=_T))
    device: str | None = device_option(group=_T)
    seed: int = _as_run_key(seed_option(0, group=_T, help="seed of the weights, the data order and the masks"))
    threads: int | None = threads_option(group=_T)
    processes: int | None = processes_option(group=_T)
    compile: bool | None = option(
        None,
        group=_T,
        negative=("--no-compile", "train eagerly, also on a GPU"),
        help="torch.compile the model for the training steps (default: on a GPU, where it fuses the small kernels "
        "and launches fewer; it compiles once, shapes dynamic, inside --max-time; see BENCHMARKS.md)",
    )

    save_every: int = option(
        1000, bounds=POSITIVE, group=_O, help="checkpoint every N steps (and at the end, and on SIGTERM)"
    )
    keep_checkpoints: int = option(2, group=_O, help="newest checkpoints kept")
    resume: bool = option(False, group=_O, help="continue the run in OUTPUT from its latest checkpoint")
    overwrite: bool = option(False, group=_O, help="replace the run in OUTPUT")
    eval_every: int | None = option(
        None, bounds=POSITIVE, group=_O, help="held-out evaluation every N steps (default: ~10 per run)"
    )
    eval_batches: int = option(10, group=_O, help="held-out global batches per evaluation")
    profile: int = option(0, group=_O, metavar="STEPS", help=PROFILE_HELP)
    blimp: str | None = option(None, group=_O, help="a BLiMP directory: probe it at each held-out evaluation")
    blimp_pairs: int = option(20, bounds=POSITIVE, group=_O, help="the probe's BLiMP pairs per paradigm (seeded)")
    log_every: int = option(10, group=_O, help="a metrics line every N steps")
    quiet: bool = option(False, group=_O, help="no progress bar or messages")
    tensorboard: bool = option(
        False,
        group=_O,
        help="also write TensorBoard event files to OUTPUT/tensorboard "
        "(refreshed from metrics.jsonl at each held-out evaluation)",
    )
    chosen: str = option("", skip=True)  # resolve()'s line: what the recipe chose (empty: not resolved yet)

    def __post_init__(self) -> None:
        if not self.corpus:
            raise PretrainError("give at least one --corpus file")
        if self.max_steps is None and self.max_time is None:
            raise PretrainError("give --max-steps or --max-time (or both)")
        check_bounds(self, PretrainError)  # the ranges the flags are parsed with (options.BOUNDS)
        check_run_flags(self.resume, self.overwrite)
        check_combinations(self)  # flags each valid alone but not together
        if self.whole_word_mask:  # its older spelling: one setting from here on
            object.__setattr__(self, "mask_strategy", "whole-word")
        if self.mask_mix is not None:
            ins.parse_mask_mix(self.mask_mix)
        masks.parse_mask_prob(self.mask_prob)
        if not self.chosen:  # the flags as given (resolve() fills in what they refuse): before --init-from is read
            check_given(self)
        check_inputs(self)  # --blimp and --init-from name what they need

    def recipe_name(self) -> str:
        """``--recipe``, or the default: budget with ``--max-time``, paper otherwise."""
        return self.recipe or ("budget" if self.max_time is not None else "paper")

    def model_shown(self) -> str:
        """The model as the run's lines name it: the size preset, or the directory ``--init-from`` reads."""
        return f"from {self.init_from}" if self.init_from else str(self.model_size)

    def run_record(self) -> dict[str, Any]:
        """The run keys, with paths made absolute, and the line that says what the recipe chose (run.json)."""
        d = dataclasses.asdict(self)
        d["corpus"] = [str(Path(p).resolve()) for p in self.corpus]
        d.update({k: str(Path(d[k]).resolve()) for k in ("vocab", "init_from") if d[k]})
        return {**{k: d[k] for k in RUN_KEYS}, "chosen": self.chosen}  # and what resolve() chose, as it said


RUN_KEYS = tuple(f.name for f in dataclasses.fields(PretrainConfig) if f.metadata.get("run"))
