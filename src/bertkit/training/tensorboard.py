"""Metrics records -> TensorBoard event files, with neither TensorFlow nor the ``tensorboard`` package installed.

An event file is a sequence of TFRecords (``uint64 length, masked crc32c(length), data, masked crc32c(data)``), each
holding one serialized ``tensorflow.Event`` protobuf. Only the few fields scalars need are written, encoded by hand:

    Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
    Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }

The first record carries ``file_version = "brain.Event:2"``, as TensorBoard expects. Files are named
``events.out.tfevents.<seconds>.<host>`` so TensorBoard finds them in a run directory.

    with EventWriter("runs/my-bert") as tb:
        tb.add_record({"step": 10, "loss": 7.2, "mlm_acc": 0.05, "elapsed_s": 3.1})
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bertkit.files import atomic_write

# ----------------------------------------------------------------------------------------------- crc32c


def _crc_table() -> list[int]:
    poly = 0x82F63B78  # Castagnoli, reflected
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord(data: bytes) -> bytes:
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc(header)) + data + struct.pack("<I", masked_crc(data))


# ----------------------------------------------------------------------------------------------- protobuf


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # int64 two's complement, as protobuf encodes negatives
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field_bytes(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def scalar_event(step: int, values: dict[str, float], wall_time: float) -> bytes:
    """A serialized Event with one Summary holding ``values`` (tag -> float)."""
    summary = b""
    for tag, value in values.items():
        v = _field_bytes(1, tag.encode("utf-8")) + _varint(2 << 3 | 5) + struct.pack("<f", float(value))
        summary += _field_bytes(1, v)
    return (
        _varint(1 << 3 | 1)
        + struct.pack("<d", wall_time)
        + _varint(2 << 3 | 0)
        + _varint(int(step))
        + _field_bytes(5, summary)
    )


def version_event(wall_time: float) -> bytes:
    return _varint(1 << 3 | 1) + struct.pack("<d", wall_time) + _field_bytes(3, b"brain.Event:2")


# ----------------------------------------------------------------------------------------------- records


def record_scalars(record: dict[str, Any]) -> dict[str, float]:
    """A metrics.jsonl line's plottable numbers as TensorBoard tags: ``train/loss``, ``eval/mlm_acc`` (for the
    held-out ``eval_*`` fields), ``dev/accuracy`` (finetune's dev records)."""
    out = {}
    dev = "train_loss" in record  # finetune's history records: dev metrics + the training loss
    for key, value in record.items():
        if key in ("step", "epoch", "elapsed_s") or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if key.startswith("eval_"):
            tag = "eval/" + key[5:]
        elif key == "train_loss":
            tag = "train/loss"
        elif key == "train_mlm_acc":  # pretrain's training-window accuracy (80/10/10 inputs)
            tag = "train/mlm_acc"
        else:
            tag = ("dev/" if dev else "train/") + key
        out[tag] = float(value)
    return out


def event_file_name(wall_time: float | None = None) -> str:
    return f"events.out.tfevents.{int(wall_time or time.time())}.{socket.gethostname() or 'localhost'}"


class EventWriter:
    """Appends scalar events to one event file in ``directory`` (created on the first record).

    For a live run: call :meth:`add_record` with each metrics line as it is written. The file is appended to
    and flushed per record; TensorBoard reads a file that grows, and ignores a torn last record.
    """

    def __init__(self, directory: str | os.PathLike, start_time: float | None = None):
        self.directory = Path(directory)
        self.start = time.time() if start_time is None else start_time
        self.path = self.directory / event_file_name(self.start)
        self._f = None

    def _open(self):
        if self._f is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._f = open(self.path, "ab")
            self._f.write(tfrecord(version_event(self.start)))
        return self._f

    def add_scalars(self, step: int, values: dict[str, float], wall_time: float | None = None) -> None:
        if not values:
            return
        f = self._open()
        f.write(tfrecord(scalar_event(step, values, time.time() if wall_time is None else wall_time)))
        f.flush()

    def add_record(self, record: dict[str, Any]) -> None:
        """One metrics record (needs ``step``); its wall time is ``start + elapsed_s`` when it carries one."""
        if "step" not in record:
            return
        wall = self.start + float(record["elapsed_s"]) if isinstance(record.get("elapsed_s"), (int, float)) else None
        self.add_scalars(int(record["step"]), record_scalars(record), wall)

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def convert_records(
    records: Iterable[dict[str, Any]], directory: str | os.PathLike, start_time: float | None = None
) -> Path:
    """Write ``records`` (metrics.jsonl lines) as one event file in ``directory``, atomically. Returns its path.

    Any event file an earlier conversion wrote there is replaced, so TensorBoard does not show the run twice."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    start = time.time() if start_time is None else start_time
    data = bytearray(tfrecord(version_event(start)))
    for r in records:
        if "step" not in r:
            continue
        wall = start + float(r["elapsed_s"]) if isinstance(r.get("elapsed_s"), (int, float)) else start
        values = record_scalars(r)
        if values:
            data += tfrecord(scalar_event(int(r["step"]), values, wall))
    for old in directory.glob("events.out.tfevents.*.bertkit-converted"):
        old.unlink()
    path = directory / (event_file_name(start) + ".bertkit-converted")
    atomic_write(path, lambda p: p.write_bytes(bytes(data)))
    return path


def convert_metrics(run_dir: str | os.PathLike) -> Path:
    """RUN_DIR/tensorboard from RUN_DIR/metrics.jsonl (one event file, rewritten atomically; exact after a resume
    too): the records' ``elapsed_s`` place them in time."""
    import json

    run_dir = Path(run_dir)
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    start = time.time() - max((float(r.get("elapsed_s", 0)) for r in records), default=0.0)
    return convert_records(records, run_dir / "tensorboard", start_time=start)
