"""The sentence-transformers directory format: write it beside a bertkit model, read it back (ours or theirs).

A sentence-transformers directory is a Hugging Face model directory (``config.json``, weights, tokenizer files)
plus a pipeline of modules::

    modules.json                  [{"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"},
                                   {"idx": 1, "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                                   {"idx": 2, "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
    sentence_bert_config.json     {"max_seq_length": 128, "do_lower_case": false}
    1_Pooling/config.json         {"word_embedding_dimension": 768, "pooling_mode_mean_tokens": true, ...}
    config_sentence_transformers.json   {"similarity_fn_name": "cosine", "prompts": {}, ...}

The Transformer module runs the last layer; Pooling pools it (cls / mean / max / lasttoken); Normalize scales to unit
length. We write the classic layout (read by every sentence-transformers version since 2.x, by TEI and by MTEB) and
read both it and the newer one (``pooling_mode`` as a string, 6.x module paths, ``0_Transformer/`` subfolders).

This module reads JSON only (no torch), so ``Encoder.from_pretrained`` can consult it cheaply.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.errors import InputError
from bertkit.files import write_json

MODULES_NAME = "modules.json"
ST_CONFIG_NAME = "sentence_bert_config.json"
POOLING_DIR = "1_Pooling"
NORMALIZE_DIR = "2_Normalize"

# bertkit pooling -> the sentence-transformers Pooling mode that computes the same vector
TO_ST_POOLING = {"mean": "mean", "max": "max", "cls": "cls", "sep": "lasttoken"}
FROM_ST_POOLING = {v: k for k, v in TO_ST_POOLING.items()}
ST_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")  # their concatenation order
_FLAG = {
    "cls": "pooling_mode_cls_token",
    "max": "pooling_mode_max_tokens",
    "mean": "pooling_mode_mean_tokens",
    "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens",
    "weightedmean": "pooling_mode_weightedmean_tokens",
    "lasttoken": "pooling_mode_lasttoken",
}


@dataclass(frozen=True)
class SentenceSettings:
    """What a sentence-transformers directory says about encoding: the model folder (where config.json and the
    weights are), the pooling (bertkit's name), normalisation and the token limit."""

    model_dir: Path
    pooling: str
    normalize: bool
    max_seq_length: int | None


def write_sentence_transformers(
    directory: str | os.PathLike,
    *,
    pooling: str,
    normalize: bool,
    dim: int,
    max_seq_length: int | None,
    version: str = "",
) -> None:
    """Write the sentence-transformers files beside a saved model (``config.json``, weights, ``vocab.txt``).

    ``pooling`` is a bertkit pooling with a sentence-transformers twin (mean, max, cls, sep); the vectors are those of
    the last layer."""
    mode = TO_ST_POOLING.get(pooling)
    if mode is None:
        raise InputError(
            f"--pooling {pooling} has no sentence-transformers equivalent: use one of {', '.join(TO_ST_POOLING)}"
        )
    directory = Path(directory)
    (directory / POOLING_DIR).mkdir(parents=True, exist_ok=True)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": POOLING_DIR, "type": "sentence_transformers.models.Pooling"},
    ]
    if normalize:
        (directory / NORMALIZE_DIR).mkdir(exist_ok=True)
        modules.append({"idx": 2, "name": "2", "path": NORMALIZE_DIR, "type": "sentence_transformers.models.Normalize"})
    pool_config: dict[str, Any] = {"word_embedding_dimension": int(dim)}
    pool_config.update({flag: m == mode for m, flag in _FLAG.items()})
    pool_config["include_prompt"] = True
    write_json(directory / POOLING_DIR / "config.json", pool_config, sort_keys=False)
    write_json(directory / ST_CONFIG_NAME, {"max_seq_length": max_seq_length, "do_lower_case": False}, sort_keys=False)
    write_json(
        directory / "config_sentence_transformers.json",
        {
            "__version__": {"bertkit": version},
            "prompts": {},
            "default_prompt_name": None,
            "similarity_fn_name": "cosine",
        },
        sort_keys=False,
    )
    write_json(directory / MODULES_NAME, modules, sort_keys=False)  # last: its presence marks a complete directory


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: cannot read ({e})") from None


def _modes(config: dict[str, Any], path: Path) -> list[str]:
    """The active pooling modes of a Pooling config, old (booleans) or new (``pooling_mode`` string / list)."""
    if "pooling_mode" in config:
        raw = config["pooling_mode"]
        modes = [raw] if isinstance(raw, str) else list(raw or [])
        modes = ["mean" if m == "mean_tokens" else "max" if m == "max_tokens" else m for m in modes]
    else:
        modes = [m for m in ST_MODES if config.get(_FLAG[m])]
    if not modes:
        raise InputError(f"{path}: no pooling mode is set")
    return modes


def read_sentence_transformers(path: str | os.PathLike) -> SentenceSettings | None:
    """The settings of a sentence-transformers directory, or None when ``path`` has no ``modules.json``.

    Raises InputError naming the file for a pipeline bertkit cannot reproduce exactly (a Dense layer, a pooling
    such as mean_sqrt_len_tokens or several concatenated, a non-BERT module)."""
    path = Path(path)
    modules_file = path / MODULES_NAME
    if not modules_file.is_file():
        return None
    modules = _load_json(modules_file)
    if not isinstance(modules, list):
        raise InputError(f"{modules_file}: expected a list of modules")
    model_dir, pooling, normalize = None, None, False
    for module in sorted(modules, key=lambda m: m.get("idx", 0)):
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        where = path / str(module.get("path", ""))
        if kind == "Transformer" and model_dir is None:
            model_dir = where
        elif kind == "Pooling" and pooling is None:
            config_file = where / "config.json"
            modes = _modes(_load_json(config_file), config_file)
            if len(modes) != 1 or modes[0] not in FROM_ST_POOLING:
                raise InputError(
                    f"{config_file}: pooling {'+'.join(modes)} has no bertkit equivalent (supported: "
                    f"{', '.join(FROM_ST_POOLING)}, one at a time)"
                )
            pooling = FROM_ST_POOLING[modes[0]]
        elif kind == "Normalize":
            normalize = True
        else:
            raise InputError(
                f"{modules_file}: module {module.get('type')!r} is not supported: bertkit's Encoder "
                "loads a Transformer (BERT), a Pooling and a Normalize module"
            )
    if model_dir is None or pooling is None:
        raise InputError(f"{modules_file}: needs a Transformer and a Pooling module")
    max_seq_length = None
    for name in (ST_CONFIG_NAME, "sentence_bert_config.json"):
        cfg_file = model_dir / name
        if cfg_file.is_file():
            value = _load_json(cfg_file).get("max_seq_length")
            max_seq_length = int(value) if isinstance(value, (int, float)) and value > 0 else None
            break
    return SentenceSettings(model_dir, pooling, normalize, max_seq_length)
