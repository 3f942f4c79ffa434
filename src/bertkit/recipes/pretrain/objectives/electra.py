"""ELECTRA's part of the pre-training recipe (``bertkit pretrain --objective electra``; Clark et al., 2020): a small
generator trained by masked LM fills the masked positions with tokens sampled from its softmax, and the model kept,
the discriminator, learns to tell every input token as original or replaced. The loop, the data, the schedule and
the checkpoints are BERT's (``recipes/pretrain/recipe.py``); what changes is the model (:class:`ElectraPretraining`),
ELECTRA's masking defaults, the RTD figures in the log, and what the run directory holds at the end.

    generator (masked LM, fewer layers) --sample at [MASK]--> discriminator (the encoder kept) --> RTD head
            \\______________ one embeddings module, shared (ELECTRA's tied embeddings) ______________/

    loss = generator MLM loss + rtd_weight (50) * discriminator binary cross-entropy over every non-pad token

No gradient flows through the sampling: the generator learns from its MLM loss only (and the shared embeddings from
both). A sampled token equal to the original is labelled original.

Either architecture (``--arch``); ModernBERT's pre-norm layers leave the RTD plateau far sooner than BERT's
(docs/pretraining.md). OUTPUT is the discriminator as a bare encoder in its architecture's transformers layout,
which every bertkit command and transformers read unchanged; its RTD head beside it (``rtd_head.safetensors``,
ELECTRA's ``discriminator_predictions.*`` keys: transformers' ``ElectraForPreTraining`` gives the same logits on
BERT's), and the generator, the masked LM that fill-mask and the held-out meter read, in ``OUTPUT/generator``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertkit import models
from bertkit.checkpoint import read_state_dict
from bertkit.config import BertConfig
from bertkit.errors import InputError
from bertkit.files import atomic_write
from bertkit.modeling import ACT2FN
from bertkit.recipes.pretrain.objectives import Objective
from bertkit.training.distributed import all_reduce_mean

# ELECTRA's masking (its pretrain_helpers.mask): 15% of the tokens, 85% of them [MASK], the rest left as they are
DEFAULTS = {"nsp": False, "mask_prob": 0.15, "mask_mix": "85/0/15", "echo_share": 0.0}  # echoes: not measured here
RTD_HEAD_NAME = "rtd_head.safetensors"
GENERATOR_DIR = "generator"


def generator_layers(cfg, config: BertConfig) -> int:
    """``--generator-layers``, or a quarter of the discriminator's (at least 1): ELECTRA's generators are a quarter
    to a half of the discriminator's size, smaller ones working best (Clark et al., figure 3)."""
    n = cfg.generator_layers or max(1, config.num_hidden_layers // 4)
    if n > config.num_hidden_layers:
        raise InputError(f"--generator-layers {n}: more than the model's {config.num_hidden_layers} layers")
    return n


# --------------------------------------------------------------------------------------------- the model


class RtdHead(nn.Module):
    """ELECTRA's ``discriminator_predictions``: dense, activation, one logit per token (> 0: replaced)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = ACT2FN[getattr(config, "hidden_act", None) or config.hidden_activation]  # BERT's or ModernBERT's
        self.dense_prediction = nn.Linear(config.hidden_size, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.dense_prediction(self.act(self.dense(x))).squeeze(-1)  # [B, T]


@dataclass
class ElectraOutput:
    loss: Tensor  # mlm_loss + rtd_weight * rtd_loss
    mlm_loss: Tensor  # the generator's, at the labelled positions
    rtd_loss: Tensor  # the discriminator's mean binary cross-entropy over the non-pad tokens
    masked_logits: Tensor  # [M, V] the generator's, at the labelled positions (row-major)
    masked_labels: Tensor  # [M]
    rtd_logits: Tensor  # [B, T]
    rtd_labels: Tensor  # [B, T] 1 = replaced, 0 = original, -100 = padding


def corrupt(input_ids: Tensor, labels: Tensor, attention_mask: Tensor | None, sampled: Tensor) -> tuple[Tensor, Tensor]:
    """The discriminator's input and labels: ``input_ids`` [B, T] with the labelled positions (``labels`` != -100,
    row-major) set to ``sampled`` [M]; labels 1 where that input differs from the original token (``labels`` where
    labelled, the input elsewhere), 0 where it equals it (a sample that drew the original token included), -100 at
    padding. Returns (ids [B, T], rtd_labels [B, T])."""
    chosen = labels != -100
    fake = input_ids.clone()
    fake[chosen] = sampled.to(fake.dtype)
    original = torch.where(chosen, labels, input_ids)
    rtd_labels = (fake != original).long()
    if attention_mask is not None:
        rtd_labels = rtd_labels.masked_fill(attention_mask == 0, -100)
    return fake, rtd_labels


def rtd_loss(logits: Tensor, rtd_labels: Tensor) -> Tensor:
    """Mean binary cross-entropy (fp32) over the tokens whose label is not -100; a zero with a graph if none."""
    active = rtd_labels != -100
    if not bool(active.any()):
        return logits.sum() * 0.0
    return F.binary_cross_entropy_with_logits(logits[active].float(), rtd_labels[active].float())


def sample(logits: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """One token per row of ``logits`` [M, V] from its softmax (fp32), no gradient. [M]"""
    with torch.no_grad():
        if logits.shape[0] == 0:
            return torch.zeros(0, dtype=torch.long, device=logits.device)
        return torch.multinomial(torch.softmax(logits.detach().float(), -1), 1, generator=generator).squeeze(-1)


class ElectraPretraining(nn.Module):
    """Generator and discriminator with one embeddings module, of either architecture (a ``BertModel`` with a
    ``BertForMaskedLM``, or a ``ModernBertModel`` with a ``ModernBertForMaskedLM``). ``forward`` takes a
    pre-training batch (``labels``: original ids at the chosen positions, -100 elsewhere) and returns an
    :class:`ElectraOutput`. In eval mode the
    samples come from a fixed seed, so held-out figures are comparable between evaluations and take nothing from
    the training RNG."""

    def __init__(self, discriminator: nn.Module, generator: nn.Module, rtd_weight: float = 50.0):
        super().__init__()
        self.config = discriminator.config  # the model kept (run.json's model_config)
        self.discriminator = discriminator
        self.discriminator_predictions = RtdHead(discriminator.config)
        self.generator = generator
        # shared (BERT's: token, position, segment, LayerNorm; ModernBERT's: token, norm); the generator's MLM
        # decoder is the shared word-embedding matrix
        models.encoder_of(self.generator).embeddings = self.discriminator.embeddings
        self.generator.tie_weights()
        self.rtd_weight = float(rtd_weight)
        std = self.config.initializer_range
        for layer in (self.discriminator_predictions.dense, self.discriminator_predictions.dense_prediction):
            nn.init.trunc_normal_(layer.weight, std=std, a=-2 * std, b=2 * std)
            nn.init.zeros_(layer.bias)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        labels: Tensor | None = None,
        position_ids: Tensor | None = None,
    ) -> ElectraOutput:
        if labels is None:
            raise ValueError("ELECTRA's pre-training forward needs labels (the original ids at the masked positions)")
        gen = self.generator(input_ids, attention_mask, token_type_ids, position_ids, labels=labels)
        seeded = None
        if not self.training:
            seeded = torch.Generator(device=input_ids.device)
            seeded.manual_seed(0)
        fake, rtd_labels = corrupt(input_ids, labels, attention_mask, sample(gen.masked_logits, seeded))
        extra = {"output_pooler": False} if models.of_config(self.config).pooler_keys else {}  # none to skip
        hidden = self.discriminator(fake, attention_mask, token_type_ids, position_ids, **extra)
        logits = self.discriminator_predictions(hidden.last_hidden_state)  # [B, T]
        disc_loss = rtd_loss(logits, rtd_labels)
        return ElectraOutput(
            loss=gen.loss + self.rtd_weight * disc_loss,
            mlm_loss=gen.loss,
            rtd_loss=disc_loss,
            masked_logits=gen.masked_logits,
            masked_labels=gen.masked_labels,
            rtd_logits=logits,
            rtd_labels=rtd_labels,
        )

    def set_dropout(self, p: float) -> None:
        self.discriminator.set_dropout(p)
        self.generator.set_dropout(p)

    def save_pretrained(self, directory: str | Path) -> None:
        """OUTPUT: the discriminator as a bare encoder (``BertModel`` or ``ModernBertModel``, transformers' layout),
        its RTD head in ``rtd_head.safetensors``, the generator in ``generator/`` (the architecture's masked LM).
        The tokenizer is the caller's to save beside both."""
        from safetensors.torch import save_file

        out = Path(directory)
        self.discriminator.save_pretrained(out)
        head = {
            f"discriminator_predictions.{k}": v.detach().cpu().contiguous()
            for k, v in self.discriminator_predictions.state_dict().items()
        }
        atomic_write(out / RTD_HEAD_NAME, lambda p: save_file(head, str(p), metadata={"format": "pt"}))
        self.generator.save_pretrained(out / GENERATOR_DIR)


def build_model(cfg, tokenizer, shard_dir: Path, max_len: int, device, build_base):
    """(ElectraPretraining, the discriminator's config): the discriminator is the architecture's pre-training model
    as ``build_base`` makes it, without its heads; the generator has its config with ``generator_layers`` layers and
    starts its MLM output bias where that model's does. An ELECTRA run's output (``--init-from``) continues whole."""
    base, config = build_base(cfg, tokenizer, shard_dir, max_len, device)
    arch = models.of_config(config)
    mlm_class = arch.model_class("masked_lm")
    init = Path(cfg.init_from) if cfg.init_from else None
    torch.manual_seed(cfg.seed + 1)
    if init is not None and (init / GENERATOR_DIR / "config.json").is_file():  # an ELECTRA run's output continued
        generator = mlm_class.from_pretrained(init / GENERATOR_DIR)
        gen_config = generator.config
    else:
        n = generator_layers(cfg, config)
        layer_types = getattr(config, "layer_types", None)
        cut = {"layer_types": list(layer_types[:n])} if layer_types else {}
        gen_config = dataclasses.replace(config, num_hidden_layers=n, **cut)
        generator = mlm_class(gen_config)
        bias, own = arch.mlm_bias(base), arch.mlm_bias(generator)
        if bias is not None and own is not None:
            with torch.no_grad():
                own.copy_(bias)
    if cfg.dropout is not None:  # as the discriminator's: set in the modules, the config keeps the model's
        saved = {k: v for k, v in dataclasses.asdict(gen_config).items() if "dropout" in k}
        generator.set_dropout(cfg.dropout)
        for key, value in saved.items():
            setattr(gen_config, key, value)
    model = ElectraPretraining(arch.encoder_of(base), generator, cfg.rtd_weight)
    if init is not None and (init / RTD_HEAD_NAME).is_file():
        head = read_state_dict(init / RTD_HEAD_NAME)
        try:
            model.discriminator_predictions.load_state_dict({k.split(".", 1)[-1]: v for k, v in head.items()})
        except RuntimeError as e:
            raise InputError(f"{init / RTD_HEAD_NAME}: not this model's RTD head ({str(e).splitlines()[0]})") from None
    return model.to(device).train(), config


# --------------------------------------------------------------------------------------------- the figures


def rates(tp: float, pos: float, pred: float, ok: float, n: float) -> dict[str, float]:
    """RTD accuracy, precision and recall of "replaced", balanced accuracy (the mean of the recalls of both classes:
    0.5 for a model that calls every token original, however few are replaced) and the replaced share (1 minus it
    is the accuracy of calling every token original)."""
    tn, neg = ok - tp, n - pos
    recall, recall_original = (tp / pos if pos else 0.0), (tn / neg if neg else 0.0)
    return {
        "rtd_acc": ok / n if n else 0.0,
        "rtd_precision": tp / pred if pred else 0.0,
        "rtd_recall": recall,
        "rtd_balanced_acc": (recall + recall_original) / 2,
        "replaced": pos / n if n else 0.0,
    }


def auc(scores: Tensor, truth: Tensor) -> float:
    """Area under the ROC curve of ``scores`` for ``truth`` (bool), ties given their average rank (a constant
    score: 0.5); 0.5 when one class is absent."""
    scores, truth = scores.double().flatten(), truth.flatten().bool()
    pos = int(truth.sum())
    neg = truth.numel() - pos
    if not pos or not neg:
        return 0.5
    _, inverse, counts = torch.unique(scores, return_inverse=True, return_counts=True)
    ends = counts.cumsum(0).double()
    ranks = (ends - (counts.double() - 1) / 2)[inverse]  # 1-based average rank of each score
    return float((ranks[truth].sum() - pos * (pos + 1) / 2) / (pos * neg))


class RtdScore:
    """Held-out RTD figures over several batches: the :func:`rates` and the AUC of the discriminator's logits."""

    def __init__(self) -> None:
        self.scores: list[Tensor] = []
        self.truth: list[Tensor] = []

    def add(self, output) -> None:
        labels = getattr(output, "rtd_labels", None)
        if labels is None:
            return
        active = labels != -100
        self.scores.append(output.rtd_logits[active].detach().float().cpu())
        self.truth.append((labels[active] == 1).cpu())

    def as_record(self, prefix: str = "eval_") -> dict[str, float]:
        if not self.scores:
            return {}
        scores, truth = torch.cat(self.scores), torch.cat(self.truth)
        pred = scores > 0
        figures = rates(*(float(x.sum()) for x in (truth & pred, truth, pred, truth == pred)), float(truth.numel()))
        return {prefix + k: v for k, v in {**figures, "rtd_auc": auc(scores, truth)}.items()}


# --------------------------------------------------------------------------------------------- the objective


class Electra(Objective):
    """ELECTRA's part of the recipe: its masking, its model, its RTD figures, and OUTPUT's generator."""

    defaults = DEFAULTS
    masked_lm_dir = GENERATOR_DIR  # the model kept is the discriminator: the generator is the masked LM

    def check(self, cfg) -> None:
        if cfg.nsp:
            raise InputError("--objective electra has no next-sentence prediction; leave out --nsp")
        if cfg.generator_layers is not None and cfg.generator_layers < 1:
            raise InputError(f"--generator-layers must be >= 1, got {cfg.generator_layers}")
        if cfg.rtd_weight <= 0:
            raise InputError(f"--rtd-weight must be positive, got {cfg.rtd_weight}")

    build = staticmethod(build_model)

    def count(self, meter, output: ElectraOutput, batch: dict, cfg) -> None:
        with torch.no_grad():
            labels = output.rtd_labels
            active = labels != -100
            # masks over every position (indexing by ``active`` would read its count to the host)
            truth, pred = (labels == 1) & active, (output.rtd_logits > 0) & active
            meter.add(
                rtd_loss=output.rtd_loss.detach().double() / cfg.grad_accum,  # tensors: no host sync (Meter)
                rtd_n=active.sum(),
                rtd_ok=((truth == pred) & active).sum(),
                rtd_pos=truth.sum(),
                rtd_pred=pred.sum(),
                rtd_tp=(truth & pred).sum(),
            )

    def window(self, ctx, meter, cfg) -> dict[str, float]:
        """``rtd_loss`` and the window's :func:`rates` as ``train_rtd_*`` fields (means over the ranks)."""

        keys = ("rtd_tp", "rtd_pos", "rtd_pred", "rtd_ok", "rtd_n")
        vals = all_reduce_mean(ctx, [meter.ratio("rtd_loss", "steps"), *(meter.sums[k] for k in keys)])
        return {"rtd_loss": vals[0], **{"train_" + k: v for k, v in rates(*vals[1:]).items()}}

    def said(self, fields: dict[str, float]) -> str:
        return f"  rtd balanced acc {fields['train_rtd_balanced_acc']:.3f}"

    def scorer(self) -> RtdScore:
        return RtdScore()

    def held_out_said(self, r: dict[str, float]) -> str:
        return (
            f", RTD acc {r['eval_rtd_acc']:.3f} (all-original {1 - r['eval_replaced']:.3f}), balanced "
            f"{r['eval_rtd_balanced_acc']:.3f}, AUC {r['eval_rtd_auc']:.3f}"
        )

    def masked_lm(self, model):
        return model.generator  # the discriminator has no MLM head

    def save(self, out: Path, tokenizer) -> None:
        tokenizer.save_pretrained(out / GENERATOR_DIR)  # the generator's directory (fill-mask) gets the vocabulary


OBJECTIVE = Electra()
