"""The model registry: the architectures bertkit knows, and the one place that asks "which architecture is this?".

An :class:`Architecture` names, for one ``model_type`` of ``config.json``, its modeling module, its config class,
its classes per head role, and what its graphs take as inputs. Everything else (loaders, pipelines, export, the
feature extractor, the recipes) asks the registry instead of testing ``model_type`` itself, so a new architecture
is one entry here plus its modeling file.

    arch = models.of_directory("runs/my-bert")          # the directory's architecture (BERT when config.json
    cls = arch.model_class("sequence_classification")   # says nothing); its class for a head role
    cls = models.for_directory(BertModel, directory)     # a BertFor* class, or its counterpart in the directory's
                                                         # architecture
    model = arch.build_for_pretraining("bert-mini", tokenizer)  # a fresh pre-training model of a size preset
    encoder = models.encoder_of(model)                   # the bare encoder inside a head model (base_model_prefix)

Classes are imported when first asked for, so ``bertkit --help`` imports no torch.

Variants. A variant of a registered architecture (an extra norm, a layer mix, a gate) is a small modeling module
that subclasses the base's encoder and heads (their blocks unchanged; ModernBERT's seam is
``ModernBertModel.run_layers``, what each layer reads) plus one entry made by :func:`variant`: its own
``model_type`` (an ``--arch`` choice, written in config.json), the base's presets, inputs and head layout. Its saved
directory says how transformers loads it: a variant that computes something no transformers class does names its
``remote_code``, a self-contained transformers modeling file in ``resources/remote_code/`` that every save copies
beside the weights, with config.json's ``auto_map`` naming its classes (``AutoModel.from_pretrained(directory,
trust_remote_code=True)``); a test loads it so and compares the outputs with bertkit's. (An architecture transformers
has under its own ``model_type`` is an entry of its own, with a parity test, as ``modernbert`` is.)
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.config import OBJECTIVE_KEY, ConfigError, opened_dir

CONFIG_NAME = "config.json"
REMOTE_CODE = Path(__file__).resolve().parent / "resources" / "remote_code"  # variants' transformers modeling files
# the transformers masked LM that reads a [MASK] at j from j - 1, for a saved ``--objective mntp`` model of an
# architecture transformers has (its class: the masked LM's name with "Mntp", e.g. ModernBertMntpForMaskedLM)
NEXT_TOKEN_CODE = "modeling_mntp.py"

# an encoder layer's index in a parameter name, in every registered architecture's layout (BERT's
# ``bert.encoder.layer.N.``, ModernBERT's ``model.layers.N.``, a bare encoder's ``layers.N.``): group 1 is N
LAYER_KEY = re.compile(r"(?:^|\.)layers?\.(\d+)\.")

# BERT's class name -> the head role it plays; a task names its head by BERT's class (``TaskBase.head``)
ROLES = {
    "BertModel": "base",
    "BertForPreTraining": "pretraining",
    "BertForMaskedLM": "masked_lm",
    "BertForNextSentencePrediction": "next_sentence",
    "BertForSequenceClassification": "sequence_classification",
    "BertForTokenClassification": "token_classification",
    "BertForQuestionAnswering": "question_answering",
    "BertForMultipleChoice": "multiple_choice",
}
# head role -> the transformers Auto class that loads it (config.json's ``auto_map`` of a variant's directory)
AUTO_CLASSES = {
    "base": "AutoModel",
    "pretraining": "AutoModelForPreTraining",
    "masked_lm": "AutoModelForMaskedLM",
    "next_sentence": "AutoModelForNextSentencePrediction",
    "sequence_classification": "AutoModelForSequenceClassification",
    "token_classification": "AutoModelForTokenClassification",
    "question_answering": "AutoModelForQuestionAnswering",
    "multiple_choice": "AutoModelForMultipleChoice",
}


@dataclass(frozen=True)
class Architecture:
    """One architecture: ``model_type`` -> modeling module, config class, a class per head role, graph inputs."""

    model_type: str
    module: str
    config_name: str
    classes: dict[str, str]  # head role -> class name in ``module``
    inputs: tuple[str, ...]  # what its graphs take (ModernBERT has no segment embeddings)
    has_pooler: bool
    head_keys: dict[str, str]  # head role -> its output layer's weight (what a fine-tuned directory must hold)
    features_role: str  # the class the Encoder loads: the encoder with its MLM head (and pooler, where it has one)
    mlm_keys: tuple[str, ...]  # key prefixes of the MLM head: absent from a checkpoint = no fill-mask
    pooler_keys: tuple[str, ...]  # key prefixes of the pooler: absent = no pooled output
    title: str = "BERT"  # its name in messages
    preset_prefix: str = "bert-"  # its size presets' names (BERT's names map by size: bert-mini -> modernbert-mini)
    presets_module: str = "bertkit.config"  # the module whose ``PRESETS`` (name -> sizes) are its size presets
    pretraining_role: str = "pretraining"  # the head role a fresh pre-training model has
    min_positions: int = 512  # a fresh model's position count at least (more when the run's sequences are longer)
    special_ids: dict[str, str] = field(default_factory=dict)  # config field -> the tokenizer's id a fresh model takes
    word_embeddings_key: str = "embeddings.word_embeddings.weight"  # the token table, in the bare encoder
    mlm_bias_key: str = "cls.predictions.bias"  # the MLM output bias, in the masked-LM (or pre-training) model
    absolute_positions: bool = True  # a learned position table (ModernBERT's positions are rotary)
    ffn_matmuls: int = 2  # H x I matmuls per feed-forward block (FLOPs): 2, or 3 for a gated (GeGLU) one
    note: str = ""  # why a role is missing, for the refusal
    base: str = ""  # a variant's: the model_type of the architecture whose blocks it reuses (see "Variants" above)
    remote_code: str = ""  # a variant's transformers modeling file in REMOTE_CODE, shipped in its saved directories

    def config_class(self) -> type:
        return getattr(importlib.import_module(self.module), self.config_name)

    def model_class(self, role: str, where: Any = None) -> type:
        """The class for a head ``role`` (see ``ROLES``); a role the architecture lacks is a ConfigError naming
        ``where`` (a directory, say)."""
        if role not in self.classes:
            wanted = next((k for k, v in ROLES.items() if v == role), role)
            prefix = f"{where}: " if where is not None else ""
            raise ConfigError(
                f"{prefix}a {self.model_type} model; {wanted} has no {self.model_type} counterpart{self.note}"
            )
        return getattr(importlib.import_module(self.module), self.classes[role])

    @property
    def presets(self) -> dict[str, tuple[int, ...]]:
        """Its size presets: name -> sizes (BERT's ``(layers, hidden, heads)``, ModernBERT's with the intermediate
        size too), as its config class's ``from_preset`` reads them."""
        return importlib.import_module(self.presets_module).PRESETS

    def preset(self, model_size: str) -> str:
        """A ``--model-size`` name in this architecture's presets: its own names as they are, BERT's mapped by size
        (``bert-mini`` -> ``modernbert-mini``), so one default size works for every architecture. A size it does not
        have is a ConfigError naming the flag and the sizes it has."""
        name = (
            model_size
            if model_size.startswith(self.preset_prefix)
            else self.preset_prefix + model_size.removeprefix("bert-")
        )
        if name not in self.presets:
            raise ConfigError(
                f"--model-size {model_size}: not a {self.title} size; choose one of {sorted(self.presets)}"
            )
        return name

    def build_for_pretraining(self, config: Any, tokenizer: Any, max_len: int = 0, **overrides: Any) -> Any:
        """A fresh, randomly initialised pre-training model (its ``pretraining_role``: BERT's ``BertForPreTraining``,
        ModernBERT's ``ModernBertForMaskedLM``) for ``tokenizer``'s vocabulary.

        ``config`` is a size preset (its own name or BERT's of the same size, see :meth:`preset`): the config then
        takes the tokenizer's vocabulary size and special-token ids (``special_ids``), ``max(min_positions,
        max_len)`` positions and ``overrides``. Or it is a config object of this architecture, with ``overrides``
        (its vocabulary must hold the tokenizer's). What a recipe adds (an output bias, embedding or position init,
        dropout) stays in the recipe; the model's ``config`` is the config it was built from."""
        if isinstance(config, str):
            ids = {key: getattr(tokenizer, attr) for key, attr in self.special_ids.items()}
            fields = {"vocab_size": len(tokenizer), "max_position_embeddings": max(self.min_positions, max_len), **ids}
            config = self.config_class().from_preset(self.preset(config), **{**fields, **overrides})  # overrides win
            if config.vocab_size < len(tokenizer):
                raise ConfigError(f"vocab_size is {config.vocab_size}; the tokenizer has {len(tokenizer)} tokens")
        else:
            if of_config(config) is not self:
                raise ConfigError(f"a {type(config).__name__} is not a {self.model_type} config")
            config = dataclasses.replace(config, **overrides) if overrides else config
            if config.vocab_size < len(tokenizer):
                raise ConfigError(f"vocab_size is {config.vocab_size}; the tokenizer has {len(tokenizer)} tokens")
        return self.model_class(self.pretraining_role)(config)

    def encoder_of(self, model: Any) -> Any:
        """The bare encoder (``BertModel``, ``ModernBertModel``) of a model of this architecture: the model itself,
        or its ``base_model_prefix`` attribute (``bert``, ``model``). A model without one is a ConfigError."""
        base = self.model_class("base")
        prefix = getattr(model, "base_model_prefix", None)
        encoder = model if prefix == "" else getattr(model, prefix, None) if prefix else None
        if not isinstance(encoder, base):
            raise ConfigError(f"{type(model).__name__} holds no {base.__name__} (a {self.model_type} encoder)")
        return encoder

    def word_embeddings(self, model: Any) -> Any:
        """The token embedding table (a parameter [V, H], tied to the MLM decoder) of a model of this
        architecture."""
        return self.encoder_of(model).get_parameter(self.word_embeddings_key)

    def mlm_bias(self, model: Any) -> Any:
        """The MLM output bias (a parameter [V]) of a masked-LM or pre-training model; None when it has none
        (a ModernBERT without ``decoder_bias``)."""
        owner, _, name = self.mlm_bias_key.rpartition(".")
        return getattr(model.get_submodule(owner), name, None)

    def info(self) -> dict[str, Any]:
        """What a server's ``/info`` reports about the architecture (TEI's route and bertkit's own fields): a
        variant's base too."""
        return {"architecture": self.model_type, **({"variant_of": self.base} if self.base else {})}

    def write_loader(self, directory: str | os.PathLike, config: dict[str, Any]) -> None:
        """What a saved directory of this architecture needs for transformers to load it, beside ``config`` (the
        config.json dict being written): nothing for an architecture transformers has; a variant's
        ``remote_code`` copied into ``directory`` and ``config["auto_map"]`` naming its classes in it (the same
        names as bertkit's), for ``AutoModel*.from_pretrained(directory, trust_remote_code=True)``; a masked
        next-token model's masked LM class (``NEXT_TOKEN_CODE``), which reads a [MASK] as bertkit does."""
        if self.remote_code:
            module = self._copy_code(directory, self.remote_code)
            config["auto_map"] = {
                "AutoConfig": f"{module}.{self.config_name}",
                **{AUTO_CLASSES[r]: f"{module}.{name}" for r, name in self.classes.items() if r in AUTO_CLASSES},
            }
        head = of_class_name((config.get("architectures") or [""])[0])  # (architecture, role) of the saved class
        if config.get(OBJECTIVE_KEY) == "mntp" and not self.base and head and head[1] in ("pretraining", "masked_lm"):
            # a masked next-token model with its MLM head: transformers' masked LM reading at j - 1, so that its
            # fill-mask pipeline (trust_remote_code=True) gives bertkit's answers; without the flag its own class
            # loads the same weights. A variant's directory keeps its own classes (not read shifted there)
            module = self._copy_code(directory, NEXT_TOKEN_CODE)
            name = self.classes["masked_lm"].replace("ForMaskedLM", "MntpForMaskedLM")
            config["auto_map"] = {"AutoModelForMaskedLM": f"{module}.{name}"}

    @staticmethod
    def _copy_code(directory: str | os.PathLike, file: str) -> str:
        """``file`` of REMOTE_CODE copied into ``directory``; its module name (what ``auto_map`` names)."""
        source = REMOTE_CODE / file
        (Path(directory) / source.name).write_bytes(source.read_bytes())
        return source.stem

    def class_names(self) -> set[str]:
        return set(self.classes.values())


REGISTRY: dict[str, Architecture] = {
    "bert": Architecture(
        model_type="bert",
        module="bertkit.modeling",
        config_name="BertConfig",
        classes={role: name for name, role in ROLES.items()},
        inputs=("input_ids", "attention_mask", "token_type_ids"),
        has_pooler=True,
        head_keys={
            "sequence_classification": "classifier.weight",
            "token_classification": "classifier.weight",
            "question_answering": "qa_outputs.weight",
        },
        features_role="pretraining",
        mlm_keys=("cls.predictions.",),
        pooler_keys=("bert.pooler.",),
    ),
    "modernbert": Architecture(
        model_type="modernbert",
        module="bertkit.modeling_modernbert",
        config_name="ModernBertConfig",
        classes={
            "base": "ModernBertModel",
            "masked_lm": "ModernBertForMaskedLM",
            "sequence_classification": "ModernBertForSequenceClassification",
            "token_classification": "ModernBertForTokenClassification",
            "question_answering": "ModernBertForQuestionAnswering",
            "multiple_choice": "ModernBertForMultipleChoice",
        },
        inputs=("input_ids", "attention_mask"),
        has_pooler=False,
        head_keys=dict.fromkeys(
            ("sequence_classification", "token_classification", "question_answering"), "classifier.weight"
        ),
        features_role="masked_lm",
        mlm_keys=("head.", "decoder."),
        pooler_keys=(),
        title="ModernBERT",
        preset_prefix="modernbert-",
        presets_module="bertkit.modeling_modernbert",
        pretraining_role="masked_lm",
        min_positions=8192,
        special_ids={  # its config names the tokenizer's special tokens; [CLS] and [SEP] open and close a text
            "pad_token_id": "pad_token_id",
            "cls_token_id": "cls_token_id",
            "sep_token_id": "sep_token_id",
            "bos_token_id": "cls_token_id",
            "eos_token_id": "sep_token_id",
        },
        word_embeddings_key="embeddings.tok_embeddings.weight",
        mlm_bias_key="decoder.bias",
        absolute_positions=False,
        ffn_matmuls=3,  # GeGLU: its input projection is H x 2I
        note=" (ModernBERT has no pooler and no next-sentence head)",
    ),
}
DEFAULT = "bert"  # a config.json without model_type (Google's bert_config.json, old HF files) is BERT's


def variant(base: str, model_type: str, module: str, rename: tuple[str, str], **changes: Any) -> Architecture:
    """The entry of a variant of the registered architecture ``base``: its entry with ``model_type``, ``module``
    (the variant's modeling module) and the config and class names renamed (``rename``: ("ModernBert",
    "ModernBertElc") makes ``ModernBertElcForMaskedLM`` of ``ModernBertForMaskedLM``); ``changes`` set any other
    field (``title``, ``remote_code``). Its presets, inputs and head layout are the base's."""
    parent = REGISTRY[base]
    old, new = rename
    return dataclasses.replace(
        parent,
        model_type=model_type,
        module=module,
        config_name=parent.config_name.replace(old, new, 1),
        classes={role: name.replace(old, new, 1) for role, name in parent.classes.items()},
        base=base,
        **changes,
    )


REGISTRY["modernbert-elc"] = variant(  # ELC-BERT's layer mix on ModernBERT's layers (variants/modernbert_elc.py)
    "modernbert",
    "modernbert-elc",
    "bertkit.variants.modernbert_elc",
    ("ModernBert", "ModernBertElc"),
    title="ModernBERT-ELC",
    remote_code="modeling_modernbert_elc.py",
)


def get(model_type: str | None) -> Architecture:
    """The architecture of a ``model_type``; None means BERT's. An unknown one is a ConfigError naming it."""
    arch = REGISTRY.get(model_type or DEFAULT)
    if arch is None:
        raise ConfigError(f"model_type {model_type!r} is not one bertkit knows ({', '.join(sorted(REGISTRY))})")
    return arch


def model_type(directory: str | os.PathLike) -> str | None:
    """``model_type`` of a directory's config.json ("bert", "modernbert", ...), None when absent or unreadable (the
    loader then names the problem). A :class:`bertkit.modeldir.ModelDir`'s is its architecture's."""
    if opened_dir(directory) is not None:
        return directory.model_type
    try:
        data = json.loads((Path(directory) / CONFIG_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    kind = data.get("model_type") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) else None  # a list or a number: the config's own loader refuses it


def of_directory(directory: str | os.PathLike) -> Architecture:
    """The architecture of a model directory (BERT's when its config.json names none, or is absent)."""
    if opened_dir(directory) is not None:
        return directory.architecture
    return REGISTRY.get(model_type(directory) or DEFAULT, REGISTRY[DEFAULT])


def of_config(config: Any) -> Architecture:
    """The architecture of a config object or a config.json dict."""
    kind = config.get("model_type") if isinstance(config, dict) else getattr(config, "model_type", None)
    return REGISTRY.get(kind if isinstance(kind, str) and kind else DEFAULT, REGISTRY[DEFAULT])


def names() -> tuple[str, ...]:
    """The architectures' names (``model_type``), the choices of an ``--arch`` flag."""
    return tuple(REGISTRY)


def preset_names() -> list[str]:
    """Every architecture's size presets, the choices of a ``--model-size`` flag (imports each presets module); a
    variant's are its base's."""
    return [name for arch in REGISTRY.values() if not arch.base for name in arch.presets]


def encoder_of(model: Any) -> Any:
    """The bare encoder inside ``model`` (itself when it is one), of whichever architecture its config names: see
    :meth:`Architecture.encoder_of`."""
    return of_config(getattr(model, "config", None)).encoder_of(model)


def base_classes() -> tuple[type, ...]:
    """Every architecture's bare encoder class (``BertModel``, ``ModernBertModel``): what an isinstance asks."""
    return tuple(arch.model_class("base") for arch in REGISTRY.values())


def of_preset(name: str) -> Architecture:
    """The architecture whose size presets include ``name`` (``modernbert-tiny``: ModernBERT's; ``bert-tiny``:
    BERT's); never a variant (its sizes are its base's)."""
    for arch in REGISTRY.values():
        if arch.model_type != DEFAULT and not arch.base and name.startswith(arch.preset_prefix):
            return arch
    return REGISTRY[DEFAULT]


def of_class_name(name: str) -> tuple[Architecture, str] | None:
    """(architecture, head role) of a class name such as ``ModernBertForSequenceClassification``; None when no
    architecture has it."""
    for arch in REGISTRY.values():
        for role, class_name in arch.classes.items():
            if class_name == name:
                return arch, role
    return None


def of_head(class_name: str, directory: str | os.PathLike) -> Architecture:
    """The architecture of a directory whose head class is ``class_name``: that class's, unless it is BERT's (the
    name a directory without ``architectures`` is given), when the directory's ``model_type`` decides."""
    found = of_class_name(class_name)
    return found[0] if found and found[0].model_type != DEFAULT else of_directory(directory)


def for_directory(model_class: type, directory: str | os.PathLike) -> type:
    """``model_class`` (a ``BertFor*``), or its counterpart (the same head role) in the architecture of
    ``directory``; a role the architecture lacks is refused naming the directory."""
    arch = of_directory(directory)
    if arch.model_type == DEFAULT:
        return model_class
    return arch.model_class(ROLES.get(model_class.__name__, model_class.__name__), where=directory)
