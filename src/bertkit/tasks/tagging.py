"""Token classification (CoNLL-2003 NER and generic CoNLL-column tagging), fine-tuned or feature-based.

Fine-tuned: ``BertForTokenClassification``. Each word is split into wordpieces; the word's tag goes on its FIRST
sub-token, the other sub-tokens (and [CLS] / [SEP]) get -100 and are ignored by the loss and at prediction.
Words that do not fit in ``max_seq_length`` are predicted ``O`` (and counted in a warning).

Feature-based (the paper's section 5.3): ``FeatureTagger`` freezes a ``BertModel`` and concatenates the hidden
states of a chosen set of layers (default the last four: ``-1,-2,-3,-4``; 0 is the embeddings output) of each
word's first sub-token, then trains only a small tagger on top: a 2-layer BiLSTM (default) or an MLP.

Metric: entity-level precision / recall / F1 as ``conlleval`` computes them (percent), plus token accuracy.
Predictions: ``predictions.txt`` in conlleval input format (``token gold predicted``, blank line between
sentences; ``token predicted`` when the input has no tags).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.checkpoint import CheckpointError, read_state_dict
from bertkit.config import ConfigError, read_config_file
from bertkit.data.tasks.conll import label_list, read_conll
from bertkit.data.tasks.readers import DataError
from bertkit.errors import InputError
from bertkit.features import parse_layers
from bertkit.files import atomic_write, write_json
from bertkit.modeling import BertModel, SequenceClassifierOutput
from bertkit.models import for_directory
from bertkit.tasks import TaskBase, collate_inputs, pad, run_inference
from bertkit.tasks.metrics import conlleval

logger = logging.getLogger(__name__)

CONLL2003_LABELS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
TAGGER_CONFIG = "tagger_config.json"
TAGGER_WEIGHTS = "tagger.safetensors"


class TaggingTask(TaskBase):
    family = "tagging"
    head = "BertForTokenClassification"

    def __init__(
        self,
        name: str = "conll2003",
        max_seq_length: int = 128,
        tag_column: int = -1,
        labels: Sequence[str] | None = None,
        feature_based: bool = False,
        feature_layers: str | Sequence[int] = "-1,-2,-3,-4",
        tagger: str = "bilstm",
        tagger_hidden: int = 256,
        **_: Any,
    ):
        self.name = name
        self.max_seq_length = max_seq_length or 128
        self.tag_column = -1 if tag_column is None else tag_column
        self.labels = list(labels) if labels else (list(CONLL2003_LABELS) if name == "conll2003" else None)
        self.feature_based = bool(feature_based)
        try:  # the one --layers parser (bertkit.features); a feature-based tagger takes layer indices only
            self.feature_layers = [int(x) for x in parse_layers(feature_layers)]
            if not self.feature_layers:  # '': a tagger on no features
                raise ValueError
        except (TypeError, ValueError):
            raise InputError(f"--feature-layers must be comma-separated integers, got {feature_layers!r}") from None
        self.tagger = tagger
        self.tagger_hidden = tagger_hidden
        self.main_metric = "f1"

    def task_config(self) -> dict[str, Any]:
        return {
            "task": self.name,
            "max_seq_length": self.max_seq_length,
            "tag_column": self.tag_column,
            "labels": self.labels,
            "feature_based": self.feature_based,
            "feature_layers": self.feature_layers,
            "tagger": self.tagger,
            "tagger_hidden": self.tagger_hidden,
        }

    def fit_labels(self, train_examples: Sequence) -> None:
        if self.labels is None:
            self.labels = label_list(train_examples)
            if len(self.labels) == 1:  # a 1-class tagger learns nothing: a file of 'O' only, or a wrong --tag-column
                where = getattr(train_examples, "path", "") or "the training file"
                raise InputError(
                    f"{where}: every token has the tag {self.labels[0]!r}; a tagger needs entity tags (B-TYPE, "
                    "I-TYPE) too: is --tag-column the tag column?"
                )

    def model_overrides(self) -> dict[str, Any]:
        return {
            "num_labels": len(self.labels),
            "id2label": dict(enumerate(self.labels)),
            "label2id": {t: i for i, t in enumerate(self.labels)},
        }

    def load_model(self, model_dir, finetuned: bool):
        if (Path(model_dir) / TAGGER_CONFIG).is_file() and finetuned:
            model = FeatureTagger.from_pretrained(model_dir)
            self.labels = self.labels or model.labels
            self.feature_based = True
            return model
        if self.feature_based:
            if finetuned:
                raise InputError(f"{model_dir}: no {TAGGER_CONFIG} (not a feature-based tagger)")

            bert = for_directory(BertModel, model_dir).from_pretrained(model_dir, **self.model_overrides())
            return FeatureTagger(bert, self.labels, self.feature_layers, self.tagger, self.tagger_hidden)
        return super().load_model(model_dir, finetuned)

    def read(self, path: str | os.PathLike, labelled: bool = True, skip_bad_rows: bool = False):
        return read_conll(
            path, labels=self.labels, tag_column=self.tag_column, skip_bad_rows=skip_bad_rows, require_tags=labelled
        )

    # ------------------------------------------------------------------ features
    def featurize(self, examples: Sequence, tokenizer, training: bool = False) -> list[dict]:
        flat = [w for e in examples for w in e.words]
        # a word the tokenizer drops entirely (e.g. only control characters) keeps one position to be labelled:
        # [UNK], or [PAD] for a tokenizer.json without an unknown token (byte-level BPE never needs one)
        empty = [tokenizer.unk_token_id if tokenizer.unk_token_id is not None else tokenizer.pad_token_id]
        pieces = [enc.ids or empty for enc in tokenizer.encode_batch(flat, truncation=False, add_special_tokens=False)]
        label2id = {t: i for i, t in enumerate(self.labels or [])}
        features, k, cut = [], 0, 0
        budget = self.max_seq_length - 2
        for n, e in enumerate(examples):
            ids, labels, starts = [tokenizer.cls_token_id], [-100], []
            for j, _word in enumerate(e.words):
                p = pieces[k + j]
                if len(ids) - 1 + len(p) > budget:
                    cut += len(e.words) - j
                    break
                starts.append(len(ids))
                tag = e.tags[j] if e.tags is not None else None
                if tag is not None and tag not in label2id:
                    raise DataError(
                        getattr(examples, "path", "input"),
                        e.line + j,
                        f"unknown tag {tag!r} (the model knows {self.labels})",
                    )
                labels += [label2id[tag] if tag is not None else -100] + [-100] * (len(p) - 1)
                ids += p
            k += len(e.words)
            ids.append(tokenizer.sep_token_id)
            labels.append(-100)
            f = {"input_ids": ids, "token_type_ids": [0] * len(ids), "example": n, "word_starts": starts}
            if e.tags is not None:
                f["labels"] = labels
            features.append(f)
        if cut:
            logger.warning(
                f"bertkit: {cut} words did not fit in max_seq_length={self.max_seq_length}; they are predicted 'O'"
            )
        return features

    def collate(self, features: Sequence[dict]) -> dict:
        batch = collate_inputs(features)
        if all("labels" in f for f in features):
            batch["labels"] = pad([f["labels"] for f in features], -100)
        return batch

    # ------------------------------------------------------------------ inference, metric, output
    def predict(
        self,
        model,
        examples: Sequence,
        features: Sequence[dict],
        batch_size: int = 64,
        precision: str = "fp32",
        device: str = "cpu",
        progress: bool = False,
    ) -> list[list[str]]:
        preds: list = [None] * len(examples)
        for idx, out in run_inference(model, features, self.collate, batch_size, precision, device, progress):
            best = out.logits.argmax(-1).cpu()
            for row, i in enumerate(idx):
                f = features[i]
                n_words = len(examples[f["example"]].words)
                tags = [self.labels[int(best[row, s])] for s in f["word_starts"]]
                preds[f["example"]] = tags + ["O"] * (n_words - len(tags))
        return preds

    def metrics(self, examples: Sequence, preds: Sequence[list[str]]) -> dict[str, Any]:
        if any(e.tags is None for e in examples):
            return {}
        result = conlleval([e.tags for e in examples], preds)
        return {k: result[k] for k in ("precision", "recall", "f1", "accuracy", "per_type")}

    def write_predictions(self, directory: str | os.PathLike, examples: Sequence, preds: Sequence) -> list[Path]:
        lines = []
        for e, tags in zip(examples, preds):
            for j, (w, p) in enumerate(zip(e.words, tags)):
                lines.append(f"{w} {e.tags[j]} {p}" if e.tags is not None else f"{w} {p}")
            lines.append("")
        path = Path(directory) / "predictions.txt"
        atomic_write(path, lambda t: t.write_text("\n".join(lines) + "\n", encoding="utf-8"))
        return [path]


# --------------------------------------------------------------------------------------------- feature-based


class FeatureTagger(nn.Module):
    """Frozen BERT features (concatenation of ``layers``' hidden states) -> BiLSTM or MLP tagger -> linear. The
    encoder is a ``BertModel`` or a ``ModernBertModel`` (same call, same ``hidden_states``).

    Only the tagger is trained. ``forward`` takes the same arguments as ``BertForTokenClassification`` and
    returns its output type, so the fine-tuning loop and the tagging task use it unchanged.
    """

    base_model_prefix = "bert"  # where models.encoder_of finds the encoder, as in BERT's heads

    def __init__(
        self,
        bert,
        labels: Sequence[str],
        layers: Sequence[int] = (-1, -2, -3, -4),
        tagger: str = "bilstm",
        hidden: int = 256,
        dropout: float = 0.1,
    ):
        super().__init__()
        if tagger not in ("bilstm", "mlp"):
            raise InputError(f"--tagger must be 'bilstm' or 'mlp', got {tagger!r}")
        n_states = bert.config.num_hidden_layers + 1
        for layer in layers:
            if not -n_states <= layer < n_states:
                raise InputError(
                    f"--feature-layers: layer {layer} does not exist: the model has {n_states} "
                    f"hidden states (0 = embeddings .. {n_states - 1} = last layer, or -1 .. -{n_states})"
                )
        self.bert = bert
        self.config = bert.config
        self.labels = list(labels)
        self.layers = list(layers)
        self.tagger_kind = tagger
        self.hidden = hidden
        for p in self.bert.parameters():
            p.requires_grad_(False)
        in_dim = len(self.layers) * bert.config.hidden_size
        self.dropout = nn.Dropout(dropout)
        if tagger == "bilstm":
            self.rnn = nn.LSTM(in_dim, hidden, num_layers=2, bidirectional=True, batch_first=True, dropout=dropout)
            out_dim = 2 * hidden
        else:
            self.mlp = nn.Sequential(nn.Linear(in_dim, hidden), nn.GELU(), nn.Dropout(dropout))
            out_dim = hidden
        self.classifier = nn.Linear(out_dim, len(self.labels))

    def train(self, mode: bool = True):
        super().train(mode)
        self.bert.eval()  # frozen: no dropout in the feature extractor
        return self

    def features(self, input_ids, attention_mask=None, token_type_ids=None) -> torch.Tensor:
        """[B, T, len(layers) * H] concatenated hidden states of the frozen encoder."""
        with torch.no_grad():
            out = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states=True)
            return torch.cat([out.hidden_states[layer] for layer in self.layers], dim=-1).float()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None, labels=None):
        x = self.dropout(self.features(input_ids, attention_mask, token_type_ids))
        if self.tagger_kind == "bilstm":
            lengths = (
                attention_mask.sum(-1) if attention_mask is not None else torch.full((x.size(0),), x.size(1))
            ).cpu()
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            with torch.autocast(device_type=x.device.type, enabled=False):
                h, _ = self.rnn(packed)
            x, _ = nn.utils.rnn.pad_packed_sequence(h, batch_first=True, total_length=input_ids.size(1))
        else:
            x = self.mlp(x)
        logits = self.classifier(self.dropout(x))  # [B, T, num_labels]
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits.float().view(-1, len(self.labels)), labels.view(-1))
        return SequenceClassifierOutput(loss, logits, None, None)

    def save_pretrained(self, directory: str | os.PathLike) -> None:
        """The frozen encoder as a plain ``BertModel`` (``ModernBertModel``) directory, plus ``tagger.safetensors`` and
        ``tagger_config.json`` for the tagger."""
        from safetensors.torch import save_file

        directory = Path(directory)
        self.bert.save_pretrained(directory)
        state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items() if not k.startswith("bert.")}
        atomic_write(directory / TAGGER_WEIGHTS, lambda p: save_file(state, str(p)))
        config = {"labels": self.labels, "layers": self.layers, "tagger": self.tagger_kind, "hidden": self.hidden}
        write_json(directory / TAGGER_CONFIG, config, sort_keys=False)

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> FeatureTagger:
        """The tagger a fine-tuning run saved in ``directory``; a torn, foreign or mismatched tagger_config.json or
        tagger.safetensors is a one-line error naming the file."""
        directory = Path(directory)
        config_file, weights = directory / TAGGER_CONFIG, directory / TAGGER_WEIGHTS
        config = read_config_file(config_file)
        labels, layers, tagger, hidden = (config.get(k) for k in ("labels", "layers", "tagger", "hidden"))
        lists = isinstance(labels, list) and isinstance(layers, list) and all(type(x) is int for x in layers)
        if not (lists and labels and type(hidden) is int and hidden > 0):
            raise ConfigError(f"{config_file}: expected 'labels', 'layers' (integers) and a positive 'hidden'")
        bert = for_directory(BertModel, directory).from_pretrained(directory)  # BERT's or ModernBERT's encoder
        model = cls(bert, [str(x) for x in labels], layers, tagger, hidden)
        try:
            missing, unexpected = model.load_state_dict(read_state_dict(weights), strict=False)
        except RuntimeError as e:  # a tensor of another shape than the config makes
            raise CheckpointError(
                f"{weights}: does not fit {config_file} ({str(e).splitlines()[-1].strip()})"
            ) from None
        missing = [k for k in missing if not k.startswith("bert.")]
        if missing or unexpected:
            raise CheckpointError(f"{weights}: missing {missing[:4]}, unexpected {unexpected[:4]}")
        model.eval()
        return model


# ------------------------------------------------------------------ pipeline post-processing (transformers' rules)


def _tag(label: str) -> tuple[str, str]:
    """("B" | "I", type) of an IOB label; a label without a B-/I- prefix continues (transformers' get_tag)."""
    if label.startswith("B-"):
        return "B", label[2:]
    if label.startswith("I-"):
        return "I", label[2:]
    return "I", label


CLEAN_UP = (
    (" .", "."),
    (" ?", "?"),
    (" !", "!"),
    (" ,", ","),
    (" ' ", "'"),
    (" n't", "n't"),
    (" 'm", "'m"),
    (" 's", "'s"),
    (" 've", "'ve"),
    (" 're", "'re"),
)


def tokens_to_string(tokens: Sequence[str]) -> str:
    """Word pieces back to text as the WordPiece decoder does: ``##`` pieces join the previous one, and the
    tokenizers' clean-up glues punctuation and English contractions to the word before."""
    text = " ".join(tokens).replace(" ##", "").strip()
    for a, b in CLEAN_UP:
        text = text.replace(a, b)
    return text


def group_entities(tokens: Sequence[dict], join: Callable[[Sequence[str]], str] | None = None) -> list[dict]:
    """transformers' "simple" aggregation: consecutive tokens of the same entity type form one group unless a
    token's tag is ``B-``; score = mean of the tokens' scores; word = the pieces joined (by ``join``, default
    :func:`tokens_to_string`, WordPiece's); start/end of the span."""
    join = join or tokens_to_string
    groups: list[list[dict]] = []
    for t in tokens:
        if groups:
            bi, tag = _tag(t["entity"])
            _, last_tag = _tag(groups[-1][-1]["entity"])
            if tag == last_tag and bi != "B":
                groups[-1].append(t)
                continue
        groups.append([t])
    return [
        {
            "entity_group": g[0]["entity"].split("-", 1)[-1],
            "score": float(sum(t["score"] for t in g) / len(g)),
            "word": join([t["word"] for t in g]),
            "start": g[0]["start"],
            "end": g[-1]["end"],
        }
        for g in groups
    ]
