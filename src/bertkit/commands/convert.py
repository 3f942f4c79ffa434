"""``bertkit convert``: a Google TensorFlow BERT checkpoint -> a safetensors model directory (Hugging Face layout).

    bertkit convert --tf-checkpoint uncased_L-4_H-256_A-4/ --output bert-mini/

Reads ``bert_model.ckpt.index`` + ``.data-*`` without TensorFlow, maps Google's variable names to bertkit's (=
``transformers``') keys, and writes ``config.json``, ``model.safetensors``, ``vocab.txt`` and
``tokenizer_config.json``. The head follows the checkpoint: pre-training heads (``cls/predictions``,
``cls/seq_relationship``) give ``BertForPreTraining``, ``run_classifier.py``'s ``output_weights`` a
``BertForSequenceClassification``, ``run_squad.py``'s ``cls/squad`` a ``BertForQuestionAnswering``, none a
``BertModel``.
(Every bertkit command also reads such a directory directly; converting makes it loadable by ``transformers``.)
"""

from __future__ import annotations

import dataclasses
import glob
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from bertkit.config import BertConfig
from bertkit.errors import MissingFileError
from bertkit.options import lowercase_option, option, output_option, overwrite_option, vocab_option
from bertkit.outputs import MODEL_FILES, check_output, removed_on_failure
from bertkit.tokenization import BertTokenizer


@dataclass(frozen=True, kw_only=True)
class ConvertConfig:
    """What ``bertkit convert`` reads and writes."""

    tf_checkpoint: str = option(
        required=True,
        metavar="PATH",
        help="a Google model directory, or a checkpoint prefix such as DIR/bert_model.ckpt",
    )
    config: str | None = option(None, metavar="JSON", help="bert_config.json (default: next to the checkpoint)")
    vocab: str | None = vocab_option("vocab.txt (default: next to the checkpoint)")
    lowercase: bool | None = lowercase_option(
        "uncased vocabulary (default: guessed from the vocabulary)", "cased vocabulary"
    )
    output: str = output_option("the model directory", metavar="DIR")
    overwrite: bool = overwrite_option("replace an existing model in OUTPUT")


CONFIG = ConvertConfig


def _prefix(path: Path) -> Path:
    from bertkit.tf_checkpoint import find_tf_checkpoint  # torch: kept out of `bertkit convert -h`

    if path.is_dir():
        prefix = find_tf_checkpoint(path)
        if prefix is None:
            raise MissingFileError(f"{path}: no TensorFlow checkpoint (bert_model.ckpt.index) in this directory")
        return prefix
    return Path(str(path)[: -len(".index")]) if path.suffix == ".index" else path


def run(cfg: ConvertConfig) -> int:
    # torch and the model: kept out of `bertkit convert -h`
    from bertkit.checkpoint import load_state_dict_into
    from bertkit.tf_checkpoint import TFCheckpointError, tf_state_dict

    prefix = _prefix(Path(cfg.tf_checkpoint))
    if not Path(f"{prefix}.index").is_file():
        raise MissingFileError(f"--tf-checkpoint {cfg.tf_checkpoint}: no TensorFlow checkpoint ({prefix}.index)")
    vocab = Path(cfg.vocab) if cfg.vocab else prefix.parent / "vocab.txt"
    # the directory given, or the files of the prefix given (whose directory, not named, may hold the output)
    given = Path(cfg.tf_checkpoint)
    checkpoint = [given] if given.is_dir() else sorted(prefix.parent.glob(f"{glob.escape(prefix.name)}.*"))
    inputs = {"--tf-checkpoint": checkpoint, "--vocab": vocab, "--config": cfg.config}
    output = check_output(cfg.output, inputs, overwrite=cfg.overwrite, writes=MODEL_FILES)
    if cfg.vocab and not vocab.is_file():
        raise MissingFileError(f"{vocab}: no such vocabulary file")
    config = BertConfig.from_pretrained(Path(cfg.config) if cfg.config else prefix.parent)
    state = tf_state_dict(prefix)
    cls, config = _model_class(state, config)
    model = cls(config)
    info = load_state_dict_into(model, state, origin=str(prefix))
    if info.initialised:
        raise TFCheckpointError(f"{prefix}: the checkpoint lacks {info.initialised}")
    tokenizer = BertTokenizer.from_pretrained(vocab, lowercase=cfg.lowercase) if vocab.is_file() else None
    with removed_on_failure(output):
        model.save_pretrained(output)
        if tokenizer is not None:
            tokenizer.save_pretrained(output)
    n = sum(p.numel() for p in model.parameters())
    print(json.dumps({"output": str(output), "class": cls.__name__, "parameters": n, "vocab": tokenizer is not None}))
    if tokenizer is None:
        print(f"bertkit convert: note: no vocab.txt next to {prefix}; copy one into {output}", file=sys.stderr)
    return 0


def _model_class(state: dict, config: BertConfig) -> tuple[type, BertConfig]:
    """The class whose head the checkpoint holds (and the config with its number of labels)."""
    from bertkit import modeling  # torch: kept out of `bertkit convert -h`

    if "cls.predictions.bias" in state:
        return modeling.BertForPreTraining, config
    if "classifier.weight" in state:
        return modeling.BertForSequenceClassification, dataclasses.replace(
            config, num_labels=int(state["classifier.weight"].shape[0])
        )
    if "qa_outputs.weight" in state:
        return modeling.BertForQuestionAnswering, config
    return modeling.BertModel, config
