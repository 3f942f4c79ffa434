"""The two pre-training recipes (``--recipe``): ``paper`` is Devlin et al.'s (lr 1e-4, linear schedule, dropout 0.1,
15% masking, NSP); ``budget``, the default when ``--max-time`` is given, is what measured best in minutes of CPU
(docs/pretraining.md has the ablation): the MLM output bias starts at the corpus's unigram log-frequencies, no
dropout, a higher lr on a trapezoidal schedule, 30% masking, MLM only on full packed sequences. Each recipe fills in
the settings a ``PretrainConfig`` leaves unset, once, in :func:`resolve`: its model (:func:`choose_model`) and its
training choices (these tables, with the architecture's and the objective's own over them); every choice is its own
flag too."""

from __future__ import annotations

from bertkit import models
from bertkit.data.pretraining.echoes import echo_clash
from bertkit.data.pretraining.ramps import parse_ramp
from bertkit.errors import PretrainError
from bertkit.recipes.pretrain import objectives

RECIPES = ("budget", "paper")
# the model each recipe builds when --arch / --model-size / --vocab-size are left out, named by its size preset (which
# names its architecture). The budget recipe's is the one that fine-tuned best after minutes of pre-training (issue
# 33's downstream meter; docs/pretraining.md, "Which model for a budget"): ModernBERT-tiny on an 8,000-token
# vocabulary, a size up where the machine reads enough text in the budget (``sizing.choose``). --arch and
# --init-from keep the recipe's size in another architecture (models.Architecture.preset maps
# BERT's size names to each architecture's)
MODEL_DEFAULTS = {
    "budget": {"model": "modernbert-tiny", "vocab_size": 8000},
    "paper": {"model": "bert-mini", "vocab_size": 30522},
}
# the shape the budget builds a size at, over its preset (issue 62): tiny's width at 6 layers, not 3. At 30 minutes on
# an AVX2 CPU (emulated), where the budget builds tiny, 6 layers read a third fewer tokens and scored 61.13, 61.61,
# 59.98 and 61.23 on BLiMP (mean 60.99) against 59.02 and 59.17 at 3 layers (BENCHMARKS.md, "An AVX2 CPU at 30
# minutes, emulated"). A --config-override of the same key is the user's; a size named with --model-size is its
# preset's
BUDGET_SHAPES = {"bert-tiny": {"num_hidden_layers": 6}}
# the lr of a size built at that shape, over BUDGET_LR's for its preset: tiny at 6 layers, 30 minutes side by side on
# the shared corpus in three seeds (bf16, one thread each: about what two AVX2 cores read in fp32), at 2e-3 against
# 4e-3: BLiMP level (means 59.82 and 59.71, the first 100 pairs a paradigm), QNLI's gain +15.99, +11.89 and +17.22
# against +9.71, +12.99 and +5.26 (BENCHMARKS.md, "Small-data recipe screen", the lr rounds)
SHAPE_LR = {"bert-tiny": 2e-3}
# an architecture with no next-sentence head (ModernBERT) takes its own recipe's masking and no NSP, over --recipe's
# (Warner et al., 2024: 30% masking, MLM only)
NO_NSP_HEAD = {"mask_prob": 0.3, "nsp": False}

# the budget's share of echo instances ([CLS] A [SEP] A' [SEP]; --echo-share): a model trained on single segments cannot
# find a token of one sentence in another, which sentence-pair tasks read first (BENCHMARKS.md, "Echo instances").
# Where a CPU run trains in fp32 (no bf16 units, as an AVX2 CPU) only in the short stage (--echo-stage first, the
# budget's 32-token stage): there echoes throughout cost about 1.4 BLiMP (59.15 over three runs against 60.58 over four
# without) for a pair-task gain that did not hold (QNLI +3.1 to +10.1, without +2.9 and +3.8); in the short stage only
# a quarter of it gained QNLI +18.52, +3.49, +13.67, +10.25 and +12.24 in five runs (median +12.24) with BLiMP 60.38,
# 59.81, 60.93, 59.59 and 59.92 on all pairs (mean 60.13) (BENCHMARKS.md, "An AVX2 CPU at 30 minutes, emulated")
ECHO_SHARE = 0.25
FP32_ECHO_STAGE = "first"
PAPER = {
    "lr": 1e-4,
    "schedule": "linear",
    "warmup_fraction": 0.05,
    "dropout": None,
    "mask_prob": 0.15,
    "nsp": True,
    "short_seq_prob": 0.1,
    "output_bias": "zero",
    "seq_ramp": "off",
    "batch_ramp": "off",
    "mask_mix": "80/10/10",
    "position_init": "normal",
    "embedding_init": "normal",
    "seq_len": 128,
    "batch_size": 32,
    "echo_share": 0.0,
}
# chosen by measurement (docs/pretraining.md, "Pre-training in minutes"); lr by model width below
BUDGET = {
    "lr": None,
    "schedule": "trapezoid",
    "warmup_fraction": 0.05,
    "dropout": 0.0,
    "mask_prob": 0.3,
    "nsp": False,
    "short_seq_prob": 0.0,
    "output_bias": "unigram",
    "seq_ramp": "32:0.7",
    "batch_ramp": "128:0.7",
    "mask_mix": "80/10/10",
    "position_init": "sinusoidal",
    "embedding_init": "normal",
    "seq_len": 128,
    "batch_size": 32,
    "echo_share": ECHO_SHARE,
}
# the budget recipe on a GPU: the card carries far more than the CPU's 4,096 tokens a step, so the model is a size up
# and each step 32,768 tokens (256 x 128; 1,024 x 32 while the sequences are short), at the lr that measured best
# there: the flags of the H100 reference run (../shared/gpu/README.md: 4 minutes, BLiMP 65.77), now its defaults
GPU_BUDGET = {"model": "modernbert-small", "batch_size": 256, "batch_ramp": "1024:0.7", "lr": 1e-3}
# the budget on a CPU in fp32 trains as this many processes of a share of the cores each (DDP over gloo, the batch
# split between them): on 2 AVX2 cores (the Zen 4 capped to AVX2) tiny's 32-token stage ran 1.10x as fast as two
# processes of one thread as one of two (one thread runs a process's Python and small kernels while the other
# computes, where one process's second thread waits on them), its 128-token stage 1.00x; two 30-minute runs made
# 5,939 and 5,397 steps against 5,180-5,642 (BENCHMARKS.md, "Two processes on two cores")
CPU_PROCESSES = 2
# ... from this budget (seconds): starting the processes (each imports torch, then a rendezvous) takes seconds
PROCESSES_FROM = 300.0
# the recipe keys that initialise a fresh model: an --init-from model brings its own, so they are not applied to it
FRESH_MODEL_KEYS = ("output_bias", "position_init", "embedding_init")
# --optimizer lamb's peak lr, whatever the recipe and size: the LTG-BERT / BabyLM recipes' LAMB value (~7e-3)
LAMB_LR = 7e-3
BUDGET_LR = {"bert-tiny": 4e-3, "bert-mini": 1e-3, "bert-small": 5e-4, "bert-medium": 5e-4}  # others: 2e-4


def bert_size(model_size: str) -> str:
    """A size preset's BERT name (``modernbert-mini`` -> ``bert-mini``), the name the recipes' tables are keyed by;
    ``models.Architecture.preset`` maps it to an architecture's own, the one mapping back."""
    return "bert-" + model_size.removeprefix(models.of_preset(model_size).preset_prefix)


def choose_model(
    recipe: str,
    arch: str | None,
    model_size: str | None,
    vocab_size: int | None,
    init_from: str | None,
) -> tuple[str, str, int]:
    """(arch, model size, vocabulary size): what the user left out (None) filled in from ``recipe``'s
    MODEL_DEFAULTS; ``--init-from`` continues the model's own architecture, and a ``--model-size`` names its own
    (``bert-mini``: BERT; ``modernbert-mini``: ModernBERT). The size is the one given, or the recipe's by its BERT
    name: :func:`resolve` maps it to the architecture's preset, once, after the budget recipe's sizing
    (``sizing.choose``: a size up where the machine reads enough text in the budget, or the corpus would repeat)."""

    defaults = MODEL_DEFAULTS[recipe]
    own = models.of_preset(defaults["model"])  # the recipe's architecture
    if arch is None:
        if init_from is not None:
            arch = models.of_directory(init_from).model_type
        elif model_size is not None:  # a named size names its architecture (bert-mini: BERT's)
            arch = models.of_preset(model_size).model_type
        else:
            arch = own.model_type
    if model_size is None:  # the recipe's size (its BERT name: every architecture maps it)
        model_size = bert_size(defaults["model"])
    return arch, model_size, defaults["vocab_size"] if vocab_size is None else vocab_size


def on_gpu(device: str | None) -> bool:
    """Whether the run trains on a GPU: ``--device cuda...``, or no ``--device`` where CUDA is available (the one
    rule every command resolves its device by, ``precision.resolve_device``)."""
    from bertkit.precision import resolve_device  # imports torch: when the run resolves, not for -h

    return resolve_device(device).startswith("cuda")


def given(cfg, name: str) -> bool:
    """Whether ``cfg``'s field ``name`` holds other than its default: a flag the user set (checks.py refuses one that
    acts only with another setting; the recipe leaves a choice the user made alone)."""
    return getattr(cfg, name) != cfg.__dataclass_fields__[name].default


def cpu_fp32(cfg) -> bool:
    """Whether a CPU run trains in fp32: ``--precision fp32``, or ``auto`` on a CPU without bf16 units (or with
    oneDNN capped below them: ``precision.cpu_supports_bf16``)."""
    from bertkit.precision import resolve_precision  # imports torch: when the run resolves, not for -h

    return resolve_precision(cfg.precision, "cpu") == "fp32"


def processes(cfg) -> int:
    """The processes ``pretrain`` launches on this machine (``--processes``; auto: :data:`CPU_PROCESSES` for the
    budget recipe in fp32 on a CPU, with ``--max-time`` of at least :data:`PROCESSES_FROM` seconds and no
    ``--threads``, else 1; a run resumed: the processes it ran as). 1 inside a launched or torchrun process: its
    processes are already there."""
    import os

    import torch  # when the run resolves, not for -h

    if "WORLD_SIZE" in os.environ:
        if (cfg.processes or 1) > 1:
            raise PretrainError("--processes: under torchrun the processes are torchrun's (--nproc_per_node)")
        return 1
    if cfg.processes is not None:
        if cfg.processes > 1 and on_gpu(cfg.device):
            raise PretrainError("--processes is for a CPU; for GPUs run under torchrun --nproc_per_node N")
        return cfg.processes
    if cfg.resume and not on_gpu(cfg.device):  # a run resumed as the processes it ran as: its batches are theirs
        from bertkit.recipes.pretrain import sizing  # imports torch: when the run resolves, not for -h

        kept = sizing.recorded(cfg.output, "world_size")
        if isinstance(kept, int) and kept >= 1:
            return kept
    # the user's --threads or batch sizes are one process's: they keep one
    auto = cfg.threads is None and cfg.batch_size is None and cfg.batch_ramp is None
    auto = auto and cfg.recipe_name() == "budget" and cfg.objective == "mlm"
    auto = auto and (cfg.max_time or 0) >= PROCESSES_FROM and torch.get_num_threads() >= CPU_PROCESSES
    return CPU_PROCESSES if auto and not on_gpu(cfg.device) and cpu_fp32(cfg) else 1


def split_batches(table: dict, n: int) -> dict:
    """The recipe's batch sizes (its batch and its ramp's) split between ``n`` processes: each process's part,
    rounded up, so that the global batch is the recipe's."""
    part = lambda size: -(-int(size) // n)  # noqa: E731
    stages = parse_ramp(table["batch_ramp"], "--batch-ramp")
    ramp = ",".join(f"{part(size)}:{until}" for size, until in stages) or table["batch_ramp"]  # none: "off" stays
    return {**table, "batch_size": part(table["batch_size"]), "batch_ramp": ramp}


def unused_parameters(cfg) -> bool:
    """Whether the run's model has parameters its loss never reaches, which DDP must then look for at every step:
    BERT's next-sentence head in a masked-LM run without NSP (ModernBERT has none); the other objectives' models
    in any run without NSP."""
    if cfg.objective == "mlm":
        return not cfg.nsp and has_nsp_head(models.get(cfg.arch))
    return not cfg.nsp


def has_nsp_head(arch) -> bool:
    """Whether the architecture's pre-training model (``models.Architecture.pretraining_role``) has BERT's
    next-sentence head: its role is the pre-training one, not the masked LM alone."""
    return arch.pretraining_role == "pretraining"


def resolve(cfg):
    """``cfg`` resolved, once: the model the recipe chooses (:func:`choose_model`; ``--init-from``'s own
    vocabulary), the size checked against the architecture's presets, and every recipe choice the user left unset
    (``--recipe``'s table, then what the architecture and the objective take over it: ModernBERT's masking,
    ELECTRA's). Returns a new frozen config whose ``chosen`` is the line that says what was chosen; ``pretrain``
    records it in run.json and prints it, and nothing rewrites it afterwards."""
    import dataclasses

    name = cfg.recipe_name()
    gpu = name == "budget" and on_gpu(cfg.device)
    # the recipe's own architecture, or a variant of it (modernbert-elc): the budget's sizing and shape, so that a
    # variant is screened against the default at the default's size (issue 62)
    recipe_arch = models.of_preset(MODEL_DEFAULTS[name]["model"]).model_type
    own = cfg.arch is None or (models.get(cfg.arch).base or cfg.arch) == recipe_arch
    gpu_model = gpu and own and cfg.model_size is None and cfg.init_from is None
    model_size = GPU_BUDGET["model"] if gpu_model else cfg.model_size  # the card's: the recipe's architecture a size up
    arch_name, size, vocab_size = choose_model(name, cfg.arch, model_size, cfg.vocab_size, cfg.init_from)
    sized, overrides, shaped = "", cfg.config_overrides, False
    recipe_size = name == "budget" and own and cfg.model_size is None and cfg.init_from is None
    if recipe_size and not gpu and cfg.max_time:
        from bertkit.recipes.pretrain import sizing  # measures the CPU's peak once (cached): when the run resolves

        # the recipe's size, a size up where the machine reads enough or the corpus would repeat; a run resumed
        # keeps the size it chose (the probe measures the machine as it is now: another size would be another run)
        kept = sizing.recorded_size(cfg.output) if cfg.resume else None
        if kept in {models.get(arch_name).preset(s) for s in sizing.LADDER}:
            size, sized = bert_size(kept), " (the size the resumed run chose)"
        else:
            size, why = sizing.choose(sizing.estimate(cfg, arch_name, cfg.max_time, vocab_size, BUDGET_SHAPES))
            sized = f" ({why})"
    if recipe_size:  # the budget's shape of the size it chose (the user's overrides over it)
        overrides = {**BUDGET_SHAPES.get(size, {}), **cfg.config_overrides}
        shaped = size in BUDGET_SHAPES and BUDGET_SHAPES[size].items() <= overrides.items()  # as the budget builds it
        sized = "".join(f" with {k}={v}" for k, v in overrides.items() if k not in cfg.config_overrides) + sized
    arch = models.get(arch_name)
    vocab = cfg.vocab or cfg.init_from  # --init-from: the model's own vocabulary (and tokenizer config)
    # chosen set from here on: the flags as given were checked when cfg was made (checks.check_given), not the values
    # filled in below (a vocabulary size beside --init-from's vocabulary, the recipe's initialisation)
    cfg = dataclasses.replace(
        cfg,
        arch=arch_name,
        model_size=arch.preset(size),
        vocab_size=vocab_size,
        vocab=vocab,
        config_overrides=overrides,
        chosen=f"recipe {name}",
    )
    table = dict(BUDGET if name == "budget" else PAPER)
    if gpu:  # the tokens a step a card carries (over the table; the objective's and the flags' over it)
        table.update(batch_size=GPU_BUDGET["batch_size"], batch_ramp=GPU_BUDGET["batch_ramp"])
        if gpu_model:
            table["lr"] = GPU_BUDGET["lr"]  # measured for that model at those batches; other sizes: by size
    if not has_nsp_head(arch):  # its own recipe's masking, MLM only (ModernBERT's)
        table.update(NO_NSP_HEAD)
    if not arch.absolute_positions:  # rotary positions: no table to initialise
        table.update(position_init=None)
    objective = objectives.get(cfg.objective)  # its masking and NSP over the recipe's (ELECTRA: 15%, no NSP)
    objective.check(cfg)
    table.update(objective.defaults)
    share = cfg.echo_share if cfg.echo_share is not None else table["echo_share"]  # the user's, else (ELECTRA: 0)
    if echo_clash(cfg.nsp if cfg.nsp is not None else table["nsp"], cfg.segments):  # B the text after A: no echoes
        table["echo_share"] = 0.0
    elif name == "budget" and not gpu and cpu_fp32(cfg) and share > 0:
        table["echo_stage"] = FP32_ECHO_STAGE  # ECHO_SHARE's note: at an fp32 CPU's pace, only in the short stage
    if cfg.optimizer == "lamb":  # its step is relative to each weight's norm: one lr for every size
        table["lr"] = LAMB_LR if not cfg.init_from else LAMB_LR / 10
    elif table["lr"] is None and shaped and size in SHAPE_LR:  # the size at the budget's own shape
        table["lr"] = SHAPE_LR[size]
    elif table["lr"] is None:  # the budget's by size, as BERT's of the same size; 1e-4 to continue a model
        table["lr"] = BUDGET_LR.get(bert_size(cfg.model_size), 2e-4) if not cfg.init_from else 1e-4
    n, launched = processes(cfg), {}
    if n > 1 and name == "budget":  # the recipe's batch is one machine's, split between its processes
        table = split_batches(table, n)
    chosen = {k: v for k, v in table.items() if getattr(cfg, k) is None}
    if n > 1:  # each process on its share of the cores
        import torch  # imports torch: when the run resolves, not for -h

        launched = {"processes": n, "threads": cfg.threads or max(1, torch.get_num_threads() // n)}
    resolved = dataclasses.replace(cfg, recipe=name, **chosen, **launched)
    shown_vocab = resolved.vocab or f"{resolved.vocab_size} tokens trained on the corpus"
    keys = [k for k in table if not (cfg.init_from and k in FRESH_MODEL_KEYS)]  # a loaded model's own
    shown = f"{resolved.model_shown()}{sized}, vocabulary {shown_vocab}; " + ", ".join(
        f"{k}={getattr(resolved, k)}" + ("" if k in chosen else " (set)") for k in keys
    )
    where = " for the GPU (32,768 tokens a step)" if gpu else ""
    if n > 1:
        split = ", the recipe's batch split between them" if name == "budget" else ", --batch-size each"
        shown += f"; {n} processes of {resolved.threads} thread(s){split} (DDP)"
    return dataclasses.replace(resolved, chosen=f"recipe {name}{where}: {shown}")
