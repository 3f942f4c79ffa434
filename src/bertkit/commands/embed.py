"""``bertkit embed``: embed every line of a file into ``.npy`` (an [N, D] array) or ``.jsonl`` (one object per line).

    bertkit embed --model runs/my-bert --input sentences.txt --output vecs.npy
    bertkit embed --model runs/my-bert --input sentences.txt --output vecs.jsonl --layers -1,-2,-3,-4 --pooling mean_max
    bertkit embed --model runs/my-bert --input pairs.tsv --output tokens.jsonl --pooling none

Input: ``.txt`` (one text per line), ``.tsv`` (text TAB pair per line, for sentence pairs) or ``.jsonl``
(``{"text": ..., "pair": ...}`` per line); ``-`` reads text lines from stdin. Empty lines are refused with their line
number (the output rows must line up with the input lines). The output is written atomically.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertkit.data.tasks.readers import jsonl_records, read_text
from bertkit.errors import InputError, MissingFileError
from bertkit.files import atomic_write
from bertkit.options import (
    backend_option,
    batch_size_option,
    device_option,
    layers_option,
    max_length_option,
    model_option,
    option,
    pooling_option,
    precision_option,
    quantize_option,
    quiet_option,
)
from bertkit.outputs import check_output_file, removed_on_failure


@dataclass(frozen=True, kw_only=True)
class EmbedConfig:
    """What ``bertkit embed`` reads, writes and how it pools."""

    model: str = model_option("model directory: config.json, weights, vocab.txt")
    input: str = option(required=True, help="a .txt / .tsv / .jsonl file, or - for stdin")
    output: Path = option(required=True, parse=Path, help="out.npy (pooled vectors) or out.jsonl")
    layers: str | None = layers_option(
        "comma-separated layers, concatenated (default: the model's saved setting, else -2; -1 is the last layer, 0 "
        "the embeddings)"
    )
    pooling: str | None = pooling_option(
        "mean, max, mean_max, cls, cls_pooled, first, last/sep, none (per-token vectors; needs .jsonl); default: the "
        "model's saved pooling, else mean"
    )
    normalize: bool = option(False, help="L2-normalise the vectors (default: as the model was saved, else no)")
    batch_size: int = batch_size_option(64)
    max_length: int | None = max_length_option(
        None,
        "tokens per input (default: the model's max_seq_length, else its max_position_embeddings: 512 for BERT, "
        "8192 for ModernBERT-base)",
    )
    quantize: str | None = quantize_option()
    backend: str = backend_option()
    quiet: bool = quiet_option()
    device: str | None = device_option()  # default: cuda when available; cpu for int8 / onnx
    precision: str = precision_option()


CONFIG = EmbedConfig


def read_inputs(path: str) -> tuple[list[str], list[str] | None]:
    """Texts (and pairs) from a file; InputError naming the file and line for anything malformed."""
    if path == "-":
        lines, name, kind = sys.stdin.read().splitlines(), "<stdin>", "txt"
    else:
        p = Path(path)
        if not p.is_file():
            raise MissingFileError(f"{p}: {'not a regular file' if p.exists() else 'no such input file'} (--input)")
        lines = read_text(p).splitlines()  # a byte that is not UTF-8: an error naming the line, as every reader
        name, kind = str(p), p.suffix.lower().lstrip(".")
    texts: list[str] = []
    pairs: list[str] = []
    for n, text, pair in _rows(lines, name, kind):
        if not text.strip():
            raise InputError(f"{name} line {n}: empty text (every line must hold one text)")
        if texts and (pair is None) != (len(pairs) == 0):
            raise InputError(f"{name} line {n}: some lines have a pair and others do not")
        texts.append(text)
        if pair is not None:
            pairs.append(pair)
    if not texts:
        raise InputError(f"{name}: no texts")
    return texts, (pairs or None)


def _rows(lines: list[str], name: str, kind: str) -> Iterator[tuple[int, str, str | None]]:
    """(line number, text, pair or None) per input line; blank JSONL lines are skipped, as every JSONL reader's."""
    if kind == "jsonl":
        for n, obj in jsonl_records(lines):
            if isinstance(obj, str):  # what is wrong with the line
                raise InputError(f"{name} line {n}: {obj}")
            if not isinstance(obj.get("text"), str):
                raise InputError(f"{name} line {n}: expected an object with a string field 'text'")
            if "pair" in obj and not isinstance(obj["pair"], str):
                raise InputError(f"{name} line {n}: field 'pair' must be a string")
            yield n, obj["text"], obj.get("pair")
        return
    for n, line in enumerate(lines, 1):
        if kind != "tsv":
            yield n, line, None
            continue
        parts = line.split("\t")
        if len(parts) > 2:
            raise InputError(f"{name} line {n}: expected 'text' or 'text<TAB>pair', got {len(parts)} columns")
        yield n, parts[0], (parts[1] if len(parts) == 2 else None)


def run(cfg: EmbedConfig) -> int:
    from bertkit.features import resolve_pooling  # torch: kept out of `bertkit embed -h`
    from bertkit.training.rundir import check_writable

    out = cfg.output
    if out.suffix not in (".npy", ".jsonl"):
        raise InputError(f"--output must end in .npy or .jsonl, got {out}")
    check_output_file(out, {"--input": cfg.input})  # a .jsonl input is never written over
    try:
        pooling = resolve_pooling(cfg.pooling) if cfg.pooling is not None else None
    except InputError as e:
        raise InputError(f"--pooling {cfg.pooling}: {e}") from None
    if pooling == "none" and out.suffix == ".npy":
        raise InputError("--pooling none gives one [T_i, D] array per text: write it to a .jsonl file")
    with removed_on_failure(out.parent):  # a failed run leaves no directory it made
        check_writable(out.parent, "--output")  # before the work, not after it
        return _embed(cfg, out, pooling)


def _embed(cfg: EmbedConfig, out: Path, pooling: str | None) -> int:
    from bertkit.features import Encoder, flag_spec, parse_layers  # torch: kept out of `bertkit embed -h`
    from bertkit.precision import resolve_device

    texts, pairs = read_inputs(cfg.input)
    device = resolve_device(cfg.device, cpu_only=cfg.quantize is not None or cfg.backend == "onnx")
    encoder = Encoder.from_pretrained(
        cfg.model, device=device, precision=cfg.precision, quantize=cfg.quantize, backend=cfg.backend
    )
    flag_spec(encoder, cfg.layers, pooling)  # --layers against this model, in one line naming the flag
    pooling = pooling or encoder.defaults.pooling  # unnamed: a sentence-embedding model's own (Encoder.defaults)
    layers = parse_layers(cfg.layers) if cfg.layers is not None else encoder.default_layers()
    result = encoder.encode(
        texts,
        pairs,
        layers=layers,
        pooling=pooling,
        normalize=True if cfg.normalize else None,
        batch_size=cfg.batch_size,
        max_length=cfg.max_length,
        show_tokens=pooling == "none",
        show_progress=False if cfg.quiet else None,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".npy":

        def write_npy(p: Path) -> None:
            with open(p, "wb") as f:  # a file object: np.save would add ".npy" to the temp file's name
                np.save(f, result)

        atomic_write(out, write_npy)
        shape = result.shape
    else:
        vectors, tokens = result if pooling == "none" else (result, None)

        def write(p: Path) -> None:
            with open(p, "w", encoding="utf-8") as f:
                for i, text in enumerate(texts):
                    row = {"text": text}
                    if pairs is not None:
                        row["pair"] = pairs[i]
                    if tokens is not None:
                        row["tokens"] = tokens[i]
                    row["embedding"] = np.round(vectors[i].astype(np.float64), 7).tolist()
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")

        atomic_write(out, write)
        shape = (len(texts), vectors[0].shape[-1]) if len(texts) else (0,)
    if not cfg.quiet:
        print(
            f"bertkit embed: {len(texts)} texts -> {out} ({'x'.join(map(str, shape))}, layers {list(layers)}, "
            f"pooling {pooling})",
            file=sys.stderr,
        )
    return 0
