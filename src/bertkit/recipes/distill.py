"""Distillation: fine-tuning with the teacher's outputs as the target, on fine-tuning's own loop.

    student = a preset (bert-tiny, modernbert-mini...), a pre-trained directory, or every k-th layer of the teacher
    model = Distiller(student, teacher)       # its training forward returns the distillation loss:
        teacher outputs under no_grad           #   computed on the fly, so unlabeled text is labelled as it comes
        soft = T^2 KL(teacher / T || student / T)   classification, multiple choice: per example; tagging: per token;
               MSE                                  SQuAD: the start and end distributions; regression: MSE
        hard = the task's loss on the gold labels (examples from --unlabeled have none)
        loss = alpha * soft + (1 - alpha) * hard  [+ weight * (hidden-state MSE through a learned projection
                                                                 and / or attention-map MSE, as TinyBERT)]
    finetune(task, model, ...)                  # bertkit.recipes.finetune: the loop, dev evaluation of the student,
                                                # best checkpoint, SIGTERM checkpoints, exact --resume, torchrun

The output directory is an ordinary fine-tuned model directory (the student's config.json and weights, the teacher's
vocabulary, finetune_config.json): predict, evaluate, serve, export and quantize take it as they take any other.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.errors import InputError
from bertkit.options import option
from bertkit.recipes.distill_student import build_student  # noqa: F401 (public here too)
from bertkit.recipes.finetune import FinetuneArgs, finetune
from bertkit.tasks import LABEL_KEYS, pad
from bertkit.training import distributed
from bertkit.training.distributed import DistContext

DISTILL = "distillation"
INTERMEDIATE = ("none", "hidden", "attention", "both")
IGNORE = -100  # a hard label that is not there (an example from --unlabeled): cross_entropy's ignore_index


@dataclass(frozen=True)
class DistillArgs(FinetuneArgs):
    """A distillation run: fine-tuning's settings plus the loss's; each field is also its ``bertkit distill`` flag."""

    alpha: float = option(
        0.5, group=DISTILL, help="weight of the teacher's soft targets; 1 - alpha goes to the gold labels"
    )
    temperature: float = option(2.0, group=DISTILL, help="softmax temperature of the soft targets")
    intermediate: str = option(
        "none",
        group=DISTILL,
        choices=INTERMEDIATE,
        help="also match the teacher's hidden states (through a learned projection when the student is narrower) "
        "and / or attention maps, layer j of the student to layer j * L_teacher / L_student",
    )
    intermediate_weight: float = option(1.0, group=DISTILL, help="weight of the intermediate losses")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_args(self)


def check_args(args: DistillArgs) -> None:
    """A one-line :class:`InputError` for a setting that cannot train (0, negative, nan, out of range)."""
    positive = {"--epochs": args.epochs, "--lr": args.lr, "--temperature": args.temperature}
    for flag, value in positive.items():
        if not (math.isfinite(value) and value > 0):
            raise InputError(f"{flag} must be a positive number, got {value}")
    if not (0.0 <= args.alpha <= 1.0):  # nan fails this too
        raise InputError(f"--alpha must be in [0, 1], got {args.alpha}")
    if not (math.isfinite(args.intermediate_weight) and args.intermediate_weight >= 0):
        raise InputError(f"--intermediate-weight must be >= 0, got {args.intermediate_weight}")
    if not (math.isfinite(args.warmup_fraction) and 0.0 <= args.warmup_fraction <= 1.0):
        raise InputError(f"--warmup-fraction must be in [0, 1], got {args.warmup_fraction}")
    if not (math.isfinite(args.clip) and args.clip >= 0) or not (
        math.isfinite(args.weight_decay) and args.weight_decay >= 0
    ):
        raise InputError(f"--clip and --weight-decay must be >= 0, got {args.clip} and {args.weight_decay}")
    if args.max_steps is not None and args.max_steps < 1:
        raise InputError(f"--max-steps must be >= 1, got {args.max_steps}")
    if args.eval_every < 0 or args.save_every < 0 or args.eval_batch_size < 1:
        raise InputError("--eval-every and --save-every must be >= 0, --eval-batch-size >= 1")


# --------------------------------------------------------------------------------------------- the losses


def soft_kl(student: torch.Tensor, teacher: torch.Tensor, temperature: float, keep: torch.Tensor | None = None):
    """T^2 * KL(softmax(teacher / T) || softmax(student / T)) over the last dimension, averaged over the rows
    (Hinton et al.'s scaling keeps the gradient's size independent of T). ``keep`` [..., C] (bool) leaves classes
    out of both distributions (the padding of a SQuAD window)."""
    s, t = student.float() / temperature, teacher.float() / temperature
    if keep is not None:
        lowest = torch.finfo(torch.float32).min
        s, t = s.masked_fill(~keep, lowest), t.masked_fill(~keep, lowest)
    log_s, log_t = s.log_softmax(-1), t.log_softmax(-1)
    kl = (log_t.exp() * (log_t - log_s)).sum(-1)
    return kl.mean() * temperature**2


def _hard_ce(logits: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor | None:
    """Cross-entropy on the gold labels present (IGNORE elsewhere); None when the batch has none."""
    if labels is None or not bool((labels != IGNORE).any()):
        return None
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE)


@dataclass
class DistillOutput:
    loss: torch.Tensor  # alpha * soft + (1 - alpha) * hard + weight * intermediate: what is back-propagated
    soft: torch.Tensor
    hard: torch.Tensor | None = None
    intermediate: torch.Tensor | None = None


class Distiller(nn.Module):
    """The student (a submodule: trained, checkpointed, saved) with the teacher beside it (not a submodule: frozen,
    neither in the optimizer nor in checkpoints) and the learned projections of the intermediate loss (trained and
    checkpointed, not saved with the student). In training mode its forward returns the distillation loss; in eval
    mode it is the student, so the task's ``predict`` evaluates the student."""

    def __init__(self, student: nn.Module, teacher: nn.Module, task, args: DistillArgs):
        super().__init__()
        self.student = student
        self.__dict__["teacher"] = teacher.eval().requires_grad_(False)
        self.family, self.regression = task.family, bool(getattr(task, "regression", False))
        self.alpha, self.temperature = args.alpha, args.temperature
        self.hidden = args.intermediate in ("hidden", "both")
        self.attention = args.intermediate in ("attention", "both")
        self.intermediate_weight = args.intermediate_weight
        self.projections = None
        if self.hidden:  # one per student hidden state (embeddings, then each layer), as TinyBERT's W_h
            hs, ht = student.config.hidden_size, teacher.config.hidden_size
            n = student.config.num_hidden_layers + 1
            self.projections = nn.ModuleList(nn.Linear(hs, ht) if hs != ht else nn.Identity() for _ in range(n))

    @property
    def config(self):
        return self.student.config

    def save_pretrained(self, directory) -> None:
        self.student.save_pretrained(directory)

    def forward(self, labels=None, start_positions=None, end_positions=None, **inputs):
        if not self.training:
            return self.student(**inputs)
        extra = dict(output_hidden_states=self.hidden, output_attentions=self.attention)
        with torch.no_grad():
            t = self.teacher(**inputs, **extra)
        s = self.student(**inputs, **extra)
        mask = inputs["attention_mask"].bool()
        soft, hard = self._task_losses(s, t, mask, labels, start_positions, end_positions)
        loss = soft if hard is None else self.alpha * soft + (1 - self.alpha) * hard
        between = self._intermediate(s, t, mask) if self.hidden or self.attention else None
        if between is not None:
            loss = loss + self.intermediate_weight * between
        return DistillOutput(loss, soft.detach(), None if hard is None else hard.detach(), between)

    def _task_losses(self, s, t, mask, labels, start_positions, end_positions):
        """(soft, hard or None) for the task family."""
        temperature = self.temperature
        if self.family == "squad":
            soft = (
                soft_kl(s.start_logits, t.start_logits, temperature, mask)
                + soft_kl(s.end_logits, t.end_logits, temperature, mask)
            ) / 2
            start, end = _hard_ce(s.start_logits, start_positions), _hard_ce(s.end_logits, end_positions)
            return soft, None if start is None or end is None else (start + end) / 2
        if self.family == "tagging":  # every real token's tag distribution; gold tags on first word pieces only
            return soft_kl(s.logits[mask], t.logits[mask], temperature), _hard_ce(s.logits, labels)
        if self.regression:
            soft = F.mse_loss(s.logits.float(), t.logits.float())
            if labels is None or bool(labels.isnan().all()):
                return soft, None
            known = ~labels.isnan()
            return soft, F.mse_loss(s.logits.float().view(-1)[known], labels.float()[known])
        return soft_kl(s.logits, t.logits, temperature), _hard_ce(s.logits, labels)  # classes, or choices

    def _intermediate(self, s, t, mask) -> torch.Tensor:
        """Hidden-state MSE (student layer j, projected, against teacher layer j * Lt / Ls; the embeddings too) and
        attention-map MSE (head means when the head counts differ), over real tokens."""
        rows = mask.reshape(-1, mask.shape[-1])  # [B', T] (multiple choice: B * C rows)
        ls, lt = self.student.config.num_hidden_layers, self.teacher.config.num_hidden_layers
        total = torch.zeros((), device=mask.device)
        if self.projections is not None:
            for j, project in enumerate(self.projections):
                hs, ht = s.hidden_states[j].float(), t.hidden_states[j * lt // ls].float()
                total = total + F.mse_loss(project(hs[rows]), ht[rows])
        if self.attention:
            pairs = (rows[:, :, None] & rows[:, None, :]).float()  # [B', T, T]
            for j in range(1, ls + 1):
                a_s, a_t = s.attentions[j - 1].float(), t.attentions[j * lt // ls - 1].float()  # [B', N, T, T]
                if a_s.shape[1] != a_t.shape[1]:
                    a_s, a_t = a_s.mean(1, keepdim=True), a_t.mean(1, keepdim=True)
                squared = (a_s - a_t).pow(2) * pairs[:, None]
                total = total + squared.sum() / (pairs.sum() * a_s.shape[1])
        return total


# --------------------------------------------------------------------------------------------- data and the run


class _DistillTask:
    """The task, with training batches that may mix labelled examples and teacher-labelled ones (``--unlabeled``):
    a missing gold label becomes IGNORE (nan for regression), which the hard loss leaves out."""

    def __init__(self, task):
        self._task = task

    def __getattr__(self, name: str):
        return getattr(self._task, name)

    def collate(self, features) -> dict:
        batch = self._task.collate(features)
        if any(k in batch for k in LABEL_KEYS):
            return batch
        if any("label" in f for f in features):  # classification, regression, multiple choice
            if getattr(self._task, "regression", False):
                batch["labels"] = torch.tensor([f.get("label", math.nan) for f in features], dtype=torch.float32)
            else:
                batch["labels"] = torch.tensor([f.get("label", IGNORE) for f in features])
        elif any("labels" in f for f in features):  # tagging
            batch["labels"] = pad([f.get("labels", [IGNORE] * len(f["input_ids"])) for f in features], IGNORE)
        return batch


def without_labels(task, examples):
    """``examples`` (read from an --unlabeled file) with any gold label dropped: the teacher labels them."""
    if task.family == "squad":
        raise InputError("--unlabeled: not for SQuAD (a question needs its context and answer windows)")
    out = copy.copy(examples)
    out[:] = [dataclasses.replace(e, **{f: None for f in ("label", "tags") if hasattr(e, f)}) for e in examples]
    return out


def distill(
    task,
    teacher: nn.Module,
    student: nn.Module,
    tokenizer,
    train_examples,
    dev_examples,
    output_dir,
    args: DistillArgs,
    ctx: DistContext | None = None,
    teacher_name: str = "",
) -> dict[str, Any]:
    """Distil ``teacher`` into ``student`` on ``train_examples`` (examples without labels are learned from the
    teacher alone); keep the student with the best dev ``task.main_metric`` in ``output_dir``. Returns the best dev
    metrics, as :func:`bertkit.recipes.finetune.finetune` (whose loop, checkpoints and resume this is)."""
    ctx = ctx or distributed.local(args.device)
    if getattr(teacher, "config", None) is None:
        raise InputError("--teacher: a feature-based tagger cannot teach (distil the fine-tuned BERT kind)")
    teacher.to(ctx.device)
    model = Distiller(student, teacher, task, args)
    keys = {
        "distill": {k: getattr(args, k) for k in ("alpha", "temperature", "intermediate", "intermediate_weight")},
        "teacher": teacher_name,
        "student": {"layers": student.config.num_hidden_layers, "hidden": student.config.hidden_size},
    }
    return finetune(_DistillTask(task), model, tokenizer, train_examples, dev_examples, output_dir, args, ctx, keys)
