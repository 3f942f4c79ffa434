"""Google's TensorFlow BERT checkpoints (``bert_model.ckpt.index`` + ``.data-*``), read without TensorFlow.

A TF2-format checkpoint ("tensor bundle") is an index, which is a LevelDB-format table mapping each variable name to a
``BundleEntryProto`` (dtype, shape, data shard, offset, size), plus data files holding the raw little-endian tensor
bytes. This module parses both with the standard library and numpy, then maps Google's variable names onto
bertkit's (= Hugging Face's) state-dict keys by a short declarative table:

    "/" -> ".", "layer_N" -> "layer.N", "kernel" -> "weight" (transposed), "gamma" / "beta" -> "weight" / "bias",
    "*_embeddings" -> "*_embeddings.weight", plus the output layers named below; ``adam_m`` / ``adam_v`` slots and
    ``global_step`` are dropped. Any other variable is an error naming it.

``bertkit.BertForPreTraining.from_pretrained("uncased_L-4_H-256_A-4/")`` reads such a directory directly
(``bert_config.json`` + ``bert_model.ckpt.*``); ``bertkit convert`` writes it out as a safetensors model directory.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

import numpy as np
import torch

from bertkit.errors import InputError, MissingFileError

# TF DataType enum -> numpy dtype (the ones a BERT checkpoint can hold)
_DTYPES = {1: np.float32, 2: np.float64, 3: np.int32, 9: np.int64, 10: np.bool_, 19: np.float16}
_DT_BFLOAT16 = 14
_TABLE_MAGIC = 0xDB4775248B80FB57

# Google variable name (after the generic rules) -> bertkit key, for the names the rules do not cover
_OUTPUT_LAYERS = {
    "cls.predictions.output_bias": "cls.predictions.bias",
    "cls.seq_relationship.output_weights": "cls.seq_relationship.weight",  # stored [2, H]: torch layout already
    "cls.seq_relationship.output_bias": "cls.seq_relationship.bias",
    "output_weights": "classifier.weight",  # run_classifier.py: [num_labels, H]
    "output_bias": "classifier.bias",
    "cls.squad.output_weights": "qa_outputs.weight",  # run_squad.py: [2, H]
    "cls.squad.output_bias": "qa_outputs.bias",
}
_DROPPED = re.compile(r"(^|/)(adam_m|adam_v|global_step|bad_steps|loss_scale|good_steps)$")


class TFCheckpointError(InputError):
    """The checkpoint files are unreadable or hold a variable that has no place in BERT; names file and variable."""


# --------------------------------------------------------------------------------------------- binary formats


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise IndexError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _proto_fields(buf: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) pairs of a protobuf message: varints as ints, length-delimited as bytes."""
    out, pos = [], 0
    while pos < len(buf):
        tag, pos = _varint(buf, pos)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = int.from_bytes(buf[pos : pos + 8], "little"), pos + 8
        elif wire == 2:
            n, pos = _varint(buf, pos)
            value, pos = buf[pos : pos + n], pos + n
        elif wire == 5:
            value, pos = int.from_bytes(buf[pos : pos + 4], "little"), pos + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        out.append((field, value))
    return out


def _block(data: bytes, offset: int, size: int, origin: str) -> list[tuple[bytes, bytes]]:
    """The (key, value) entries of one table block (prefix-compressed keys, restart array at the end)."""
    if offset + size + 5 > len(data):
        raise TFCheckpointError(f"{origin}: block at {offset} runs past the end of the file (truncated?)")
    if data[offset + size] != 0:
        raise TFCheckpointError(f"{origin}: compressed table blocks are not supported (type {data[offset + size]})")
    block = data[offset : offset + size]
    (num_restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    end = len(block) - 4 - 4 * num_restarts
    entries, pos, key = [], 0, b""
    while pos < end:
        shared, pos = _varint(block, pos)
        non_shared, pos = _varint(block, pos)
        value_len, pos = _varint(block, pos)
        key = key[:shared] + block[pos : pos + non_shared]
        pos += non_shared
        entries.append((key, block[pos : pos + value_len]))
        pos += value_len
    return entries


def _read_index(path: Path) -> dict[str, bytes]:
    data = path.read_bytes()
    origin = str(path)
    if len(data) < 48 or struct.unpack_from("<Q", data, len(data) - 8)[0] != _TABLE_MAGIC:
        raise TFCheckpointError(f"{origin}: not a TensorFlow checkpoint index (bad table magic)")
    footer = data[-48:]
    _meta_offset, pos = _varint(footer, 0)
    _meta_size, pos = _varint(footer, pos)
    index_offset, pos = _varint(footer, pos)
    index_size, pos = _varint(footer, pos)
    entries: dict[str, bytes] = {}
    for _last_key, handle in _block(data, index_offset, index_size, origin):
        block_offset, p = _varint(handle, 0)
        block_size, _ = _varint(handle, p)
        for key, value in _block(data, block_offset, block_size, origin):
            entries[key.decode("utf-8")] = value
    return entries


def read_tf_checkpoint(prefix: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every variable of a TF checkpoint, by name. ``prefix`` is the path without ``.index`` (e.g.
    ``uncased_L-4_H-256_A-4/bert_model.ckpt``); a path ending in ``.index`` works too."""
    prefix = str(prefix).removesuffix(".index")
    index = Path(prefix + ".index")
    if not index.is_file():
        raise MissingFileError(f"{index}: no such TensorFlow checkpoint index")
    try:
        entries = _read_index(index)
    except (IndexError, struct.error, ValueError) as e:
        if isinstance(e, TFCheckpointError):
            raise
        raise TFCheckpointError(f"{index}: unreadable checkpoint index ({e})") from None
    header = dict(_proto_fields(entries.pop("", b"")))
    num_shards = int(header.get(1, 1))
    if header.get(2, 0) not in (0, 1):  # BundleHeaderProto.endianness: 0 LITTLE, 1 BIG
        raise TFCheckpointError(f"{index}: unknown endianness {header.get(2)}")
    big_endian = header.get(2, 0) == 1
    shards: dict[int, bytes] = {}
    out: dict[str, np.ndarray] = {}
    for name, value in entries.items():
        fields = _proto_fields(value)
        entry: dict[int, int | bytes] = {}
        dims: list[int] = []
        for field, v in fields:
            if field == 2:  # TensorShapeProto: repeated Dim dim = 2 { int64 size = 1 }
                for f2, dim in _proto_fields(v):
                    if f2 == 2:
                        dims.append(int(dict(_proto_fields(dim)).get(1, 0)))
            else:
                entry[field] = v
        if 7 in entry:
            raise TFCheckpointError(f"{index}: variable {name!r} is partitioned (slices), which is not supported")
        dtype, shard, offset, size = (int(entry.get(k, 0)) for k in (1, 3, 4, 5))
        if shard not in shards:
            data_path = Path(f"{prefix}.data-{shard:05d}-of-{num_shards:05d}")
            if not data_path.is_file():
                raise MissingFileError(f"{data_path}: data shard of {index} is missing")
            shards[shard] = data_path.read_bytes()
        raw = shards[shard][offset : offset + size]
        if len(raw) != size:
            raise TFCheckpointError(
                f"{prefix}.data-{shard:05d}-of-{num_shards:05d}: variable {name!r} runs past "
                f"the end of the file (truncated?)"
            )
        if dtype == _DT_BFLOAT16:
            bits = np.frombuffer(raw, dtype=">u2" if big_endian else "<u2").astype(np.uint32) << 16
            array = bits.view(np.float32)
        elif dtype in _DTYPES:
            array = np.frombuffer(raw, dtype=np.dtype(_DTYPES[dtype]).newbyteorder(">" if big_endian else "<"))
        else:
            raise TFCheckpointError(f"{index}: variable {name!r} has unsupported TF dtype {dtype}")
        count = int(np.prod(dims)) if dims else 1
        if array.size != count:
            raise TFCheckpointError(f"{index}: variable {name!r} has {array.size} values for shape {tuple(dims)}")
        out[name] = array.reshape(dims).astype(array.dtype.newbyteorder("="))
    return out


# --------------------------------------------------------------------------------------------- names


def tf_name_to_key(name: str) -> tuple[str, bool] | None:
    """(bertkit key, transpose?) for a Google variable name; None for optimizer state and step counters."""
    if _DROPPED.search(name):
        return None
    key = re.sub(r"layer_(\d+)", r"layer.\1", name).replace("/", ".")
    if key in _OUTPUT_LAYERS:
        return _OUTPUT_LAYERS[key], False
    leaf = key.rsplit(".", 1)[-1]
    if leaf == "kernel":
        return key[: -len("kernel")] + "weight", True
    if leaf in ("gamma", "beta"):
        return key[: -len(leaf)] + ("weight" if leaf == "gamma" else "bias"), False
    if leaf.endswith("_embeddings"):
        return key + ".weight", False
    if leaf == "bias":
        return key, False
    raise TFCheckpointError(f"variable {name!r} has no place in a BERT model")


def tf_state_dict(prefix: str | os.PathLike) -> dict[str, torch.Tensor]:
    """A Google TF BERT checkpoint as a bertkit / HF state dict (fp32 tensors; optimizer slots dropped)."""
    state = {}
    for name, array in read_tf_checkpoint(prefix).items():
        try:
            mapped = tf_name_to_key(name)
        except TFCheckpointError as e:
            raise TFCheckpointError(f"{prefix}: {e}") from None
        if mapped is None:
            continue
        key, transpose = mapped
        tensor = torch.from_numpy(np.ascontiguousarray(array.T if transpose else array))
        state[key] = tensor.float() if tensor.is_floating_point() else tensor
    return state


def find_tf_checkpoint(directory: Path) -> Path | None:
    """The checkpoint prefix in a Google model directory (``bert_model.ckpt`` first, else the only ``*.index``)."""
    if (directory / "bert_model.ckpt.index").is_file():
        return directory / "bert_model.ckpt"
    indexes = sorted(directory.glob("*.index"))
    if len(indexes) == 1:
        return indexes[0].with_suffix("")
    return None
