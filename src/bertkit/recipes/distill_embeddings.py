"""Sentence-embedding distillation: the student's sentence vectors regress onto the teacher's (MSE), on fine-tuning's
loop, as sentence-transformers' model distillation does it.

    teacher = a sentence-embedding directory (sentence-transformers files: its pooling and normalisation; else mean)
    a narrower student: the teacher's vectors reduced to the student's width by PCA over the training texts (a fixed
        projection of the target, so the student needs none at inference and saves as a plain embedding model)
    loss = MSE(student vector, teacher vector [reduced]) per text     # texts: --train and --unlabeled alike
    dev (optional): STS pairs (sentence1, sentence2, score): Spearman x 100 of the student's cosines, the best kept
    OUTPUT: config.json + model.safetensors + vocab.txt + the sentence-transformers files (pooling, Normalize):
        ``bertkit evaluate --task sts|retrieval``, ``bertkit embed``, ``bertkit serve`` and sentence-transformers
        read it as any embedding model
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.errors import InputError
from bertkit.files import atomic_write
from bertkit.modeling import BertModel
from bertkit.models import for_directory
from bertkit.ops import pool
from bertkit.recipes.distill import DistillArgs
from bertkit.recipes.finetune import finetune
from bertkit.st_format import TO_ST_POOLING, read_sentence_transformers, write_sentence_transformers
from bertkit.tasks import collate_inputs, run_inference
from bertkit.tasks.metrics import pearson, spearman
from bertkit.tokenization import load_tokenizer
from bertkit.training import distributed
from bertkit.training.distributed import DistContext

PCA_TEXTS = 20000  # at most this many training texts fix the PCA reduction


class EmbeddingTask:
    """fine-tuning's task surface for texts -> sentence vectors: features, batches, the dev metric (STS)."""

    name = family = "embeddings"
    head = "BertModel"
    main_metric = "spearman"

    def __init__(self, pooling: str, normalize: bool, max_seq_length: int):
        self.pooling, self.normalize, self.max_seq_length = pooling, normalize, max_seq_length

    @property
    def model_class(self) -> type:
        return BertModel

    def model_overrides(self) -> dict[str, Any]:
        return {}

    def load_model(self, model_dir, finetuned: bool = False):
        return for_directory(self.model_class, model_dir).from_pretrained(model_dir)

    def task_config(self) -> None:
        return None  # no task head: the sentence-transformers files say how the model embeds

    def featurize(self, examples, tokenizer, training: bool = False) -> list[dict]:
        """Training: a list of texts. Dev: STS rows, each pair's texts (first texts, then second texts)."""
        texts = list(examples) if training else examples.column(0) + examples.column(1)
        encodings = tokenizer.encode_batch(texts, max_length=self.max_seq_length)
        return [{"input_ids": e.ids, "token_type_ids": e.type_ids, "example": i} for i, e in enumerate(encodings)]

    def collate(self, features: Sequence[dict]) -> dict:
        return collate_inputs(features)

    def predict(self, model, examples, features, batch_size=64, precision="fp32", device="cpu", progress=False):
        """The cosine of each dev pair's student vectors."""
        vectors: list = [None] * len(features)
        for idx, out in run_inference(model, features, self.collate, batch_size, precision, device, progress):
            for row, i in enumerate(idx):
                vectors[i] = out.embeddings[row].float().cpu()
        n = len(examples)
        return F.cosine_similarity(torch.stack(vectors[:n]), torch.stack(vectors[n:])).tolist()

    def metrics(self, examples, preds) -> dict[str, float]:
        return {"spearman": 100 * spearman(preds, examples.scores), "pearson": 100 * pearson(preds, examples.scores)}

    def write_predictions(self, directory: str | os.PathLike, examples, preds) -> list[Path]:
        lines = ["index\tcosine"] + [f"{i}\t{p:.6f}" for i, p in enumerate(preds)]
        path = Path(directory) / "predictions.tsv"
        atomic_write(path, lambda t: t.write_text("\n".join(lines) + "\n", encoding="utf-8"))
        return [path]


def load_teacher(directory: Path, max_seq_length: int | None):
    """(task, teacher model, tokenizer) of a sentence-embedding directory: its sentence-transformers pooling and
    normalisation, or mean pooling without normalisation for a plain model directory."""

    settings = read_sentence_transformers(directory)
    model_dir = settings.model_dir if settings is not None else directory
    pooling = settings.pooling if settings is not None else "mean"
    if pooling not in TO_ST_POOLING:
        raise InputError(
            f"--teacher {directory}: pooling {pooling!r} cannot be distilled (use {sorted(TO_ST_POOLING)})"
        )
    limit = max_seq_length or (settings.max_seq_length if settings is not None else None) or 128
    task = EmbeddingTask(pooling, bool(settings is not None and settings.normalize), limit)
    try:
        teacher = task.load_model(model_dir)
    except FileNotFoundError as e:
        raise InputError(f"--teacher {directory}: {e}") from None
    return task, teacher, load_tokenizer(model_dir)


@dataclass
class EmbeddingOutput:
    embeddings: torch.Tensor  # [B, H] the student's sentence vectors (normalised as the teacher's)
    loss: torch.Tensor | None = None


class EmbeddingDistiller(nn.Module):
    """The student with the frozen teacher beside it (not a submodule) and the teacher's fixed PCA reduction (a
    buffer: checkpointed, not saved with the student). Training forward: the MSE to the teacher's vectors; eval
    forward: the student's vectors."""

    def __init__(self, student: nn.Module, teacher: nn.Module, task: EmbeddingTask, reduction: torch.Tensor | None):
        super().__init__()
        self.student, self.task = student, task
        self.__dict__["teacher"] = teacher.eval().requires_grad_(False)
        if getattr(student, "pooler", None) is not None:
            student.pooler.requires_grad_(False)  # unused by pooled sentence vectors (and by DDP's gradient sync)
        self.register_buffer("reduction", reduction)  # [H_teacher, H_student] or None

    @property
    def config(self):
        return self.student.config

    def save_pretrained(self, directory) -> None:
        self.student.save_pretrained(directory)
        write_sentence_transformers(
            directory,
            pooling=self.task.pooling,
            normalize=self.task.normalize,
            dim=self.student.config.hidden_size,
            max_seq_length=self.task.max_seq_length,
        )

    def _embed(self, model: nn.Module, inputs: dict, reduce: bool) -> torch.Tensor:
        vectors = pool(model(**inputs).last_hidden_state.float(), inputs["attention_mask"], self.task.pooling)
        if reduce and self.reduction is not None:
            vectors = vectors @ self.reduction
        return F.normalize(vectors, dim=-1) if self.task.normalize else vectors

    def forward(self, **inputs):
        if not self.training:
            return EmbeddingOutput(self._embed(self.student, inputs, reduce=False))
        with torch.no_grad():
            target = self._embed(self.teacher, inputs, reduce=True)
        vectors = self._embed(self.student, inputs, reduce=False)
        return EmbeddingOutput(vectors.detach(), F.mse_loss(vectors, target.float()))


@torch.no_grad()
def pca_reduction(teacher: nn.Module, task: EmbeddingTask, tokenizer, texts: Sequence[str], width: int, device):
    """[H_teacher, width]: the top principal directions of the teacher's (unnormalised) vectors of ``texts``."""
    features = task.featurize(texts[:PCA_TEXTS], tokenizer, training=True)
    rows = []
    for start in range(0, len(features), 64):
        batch = {k: v.to(device) for k, v in task.collate(features[start : start + 64]).items()}
        rows.append(pool(teacher(**batch).last_hidden_state.float(), batch["attention_mask"], task.pooling).cpu())
    vectors = torch.cat(rows).double()
    if len(vectors) < width:
        raise InputError(f"--train: {len(vectors)} texts cannot fix a {width}-dimensional PCA; give at least {width}")
    _, _, vh = torch.linalg.svd(vectors - vectors.mean(0), full_matrices=False)
    return vh[:width].T.float().contiguous()


def distill_embeddings(
    task: EmbeddingTask,
    teacher: nn.Module,
    student: nn.Module,
    tokenizer,
    texts: list[str],
    dev,
    output_dir,
    args: DistillArgs,
    ctx: DistContext | None = None,
    teacher_name: str = "",
) -> dict[str, Any]:
    """Distil the sentence vectors of ``teacher`` into ``student`` over ``texts``; with ``dev`` (STS rows) keep the
    best student by Spearman. Returns the summary of :func:`bertkit.recipes.finetune.finetune`."""
    if args.intermediate != "none":
        raise InputError("--intermediate applies to task distillation, not to sentence embeddings")
    ctx = ctx or distributed.local(args.device)
    teacher.to(ctx.device).eval()
    hs, ht = student.config.hidden_size, teacher.config.hidden_size
    if hs > ht:
        raise InputError(f"--student: hidden size {hs} is wider than the teacher's {ht}; a student is narrower")
    reduction = pca_reduction(teacher, task, tokenizer, texts, hs, ctx.device).to(ctx.device) if hs < ht else None
    model = EmbeddingDistiller(student, teacher, task, reduction)
    keys = {"distill": "embeddings", "teacher": teacher_name, "student": {"layers": student.config.num_hidden_layers}}
    return finetune(task, model, tokenizer, texts, dev, output_dir, args, ctx, keys)
