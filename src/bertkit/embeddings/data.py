"""Readers for embedding training and evaluation data.

    read_texts   one text per line (plain text), or one column of a TSV / CSV / JSONL file      (--task simcse)
    read_pairs   (anchor, positive[, hard negative]) rows of a TSV / CSV / JSONL file            (--task pairs)
    read_nli     premise / hypothesis / label rows -> (premise, entailment, contradiction)     (--task pairs --nli)
    read_squad_pairs  SQuAD JSON -> (question, answer sentence) or (question, paragraph)       (--squad-pairs)
    read_scored  (text, text, score) rows, STS-B's GLUE file included                         (--task sts, --dev)
    read_training_rows  the training file read the way --task and the data flags say          (bertkit finetune)
    TextRows.token_ids  each row's token ids, every distinct text tokenized once
    column       one column of a training batch, padded (the one collate, bertkit.batches)

A row with a missing or empty text, or a non-numeric score, is a ``DataError`` naming ``file:line``; with
``skip_bad_rows`` it is counted and left out. TSV files are read without quote handling (as GLUE's are); CSV
files with standard quoting; JSONL one object per line.
"""

from __future__ import annotations

import csv
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.data.pretraining.splitter import sentence_spans
from bertkit.data.tasks.readers import DataError, RowGuard, check_file, finite_number, jsonl_records, open_text
from bertkit.data.tasks.squad import read_squad
from bertkit.errors import InputError

logger = logging.getLogger(__name__)

TABLE_FORMATS = ("csv", "tsv", "jsonl")
NLI_LABELS = {
    "entailment": "entailment",
    "0": "entailment",
    "neutral": "neutral",
    "1": "neutral",
    "contradiction": "contradiction",
    "2": "contradiction",
}  # 0/1/2: the Hugging Face SNLI/MNLI ids


@dataclass
class TextRows:
    """Rows of texts: ``rows[i]`` = (anchor, positive, negative...) or (text,), ``scores[i]`` a float or absent."""

    rows: list[tuple[str, ...]]
    scores: list[float] | None = None
    path: str = ""
    skipped: int = 0
    lines: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def width(self) -> int:
        return len(self.rows[0]) if self.rows else 0

    def column(self, k: int) -> list[str]:
        return [r[k] for r in self.rows]

    def token_ids(self, tokenizer, max_length: int) -> list[list[list[int]]]:
        """``[row][column]`` -> the text's token ids (truncated to ``max_length``). Each distinct text is tokenized
        once: texts repeat across rows (anchors, SQuAD sentences)."""
        distinct = list(dict.fromkeys(t for r in self.rows for t in r))
        encodings = tokenizer.encode_batch(distinct, max_length=max_length, truncation=True)
        ids_of = {t: e.ids for t, e in zip(distinct, encodings)}
        return [[ids_of[t] for t in r] for r in self.rows]


def table_format(path: Path, fmt: str | None) -> str | None:
    """csv / tsv / jsonl from ``fmt`` or the extension; None for anything else (plain text)."""
    if fmt:
        if fmt not in TABLE_FORMATS + ("text",):
            raise DataError(path, None, f"unknown format {fmt!r}: choose csv, tsv, jsonl or text")
        return None if fmt == "text" else fmt
    return {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl"}.get(path.suffix.lower())


def _reader(f, fmt: str):
    return csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE) if fmt == "tsv" else csv.reader(f)


def iter_records(path: Path, fmt: str) -> tuple[list[str] | None, Iterator[tuple[int, dict[str, Any] | str]]]:
    """(header columns or None for JSONL, iterator of (line, record or what is wrong with it)). The file is opened
    only while the iterator runs."""
    header = None
    if fmt != "jsonl":
        with open_text(path, newline="") as f:
            first = next(_reader(f, fmt), None)
        if first is None:
            raise DataError(path, None, "the file is empty")
        header = [c.strip() for c in first]

    def records() -> Iterator[tuple[int, dict[str, Any] | str]]:
        with open_text(path, newline="") as f:
            if fmt == "jsonl":
                yield from jsonl_records(f)
                return
            reader = _reader(f, fmt)
            next(reader)
            for row in reader:
                n = reader.line_num
                if not row or not any(c.strip() for c in row):
                    continue
                if len(row) != len(header):
                    yield n, f"expected {len(header)} columns (as the header), got {len(row)}"
                    continue
                yield n, dict(zip(header, row))

    return header, records()


def _text(record: dict[str, Any], column: str) -> str | None:
    value = record.get(column)
    if value is None or isinstance(value, bool | list | dict):  # JSONL: not a text (nor a number written as one)
        return None
    value = str(value).strip()
    return value or None


def read_texts(
    path: str | os.PathLike, text_column: str | None = None, fmt: str | None = None, skip_bad_rows: bool = False
) -> TextRows:
    """One text per line of a plain-text file (blank lines skipped), or column ``text_column`` (default ``text``)
    of a TSV / CSV / JSONL file."""
    path = check_file(path)
    kind = table_format(path, fmt)
    if kind is None:
        rows, lines = [], []
        with open_text(path) as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    rows.append((line.strip(),))
                    lines.append(n)
        if not rows:
            raise DataError(path, None, "no text lines")
        return TextRows(rows, path=str(path), lines=lines)
    return _read_columns(path, kind, [text_column or "text"], None, skip_bad_rows, ())


def read_pairs(
    path: str | os.PathLike,
    text_column: str | None = None,
    pair_column: str | None = None,
    negative_column: str | None = None,
    fmt: str | None = None,
    skip_bad_rows: bool = False,
) -> TextRows:
    """(anchor, positive[, negative]) rows. Columns default to ``anchor``, ``positive`` and (when the file has it)
    ``negative``; several negative columns may be given comma-separated."""
    path = check_file(path)
    kind = table_format(path, fmt)
    if kind is None:
        raise DataError(
            path,
            None,
            "--task pairs needs (anchor, positive) rows, but this is a plain-text file with "
            "one text per line: use a TSV / CSV / JSONL file with --text-column and --pair-column, "
            "or --task simcse for unlabelled text",
        )
    negatives = [c.strip() for c in negative_column.split(",") if c.strip()] if negative_column else ["negative"]
    optional = () if negative_column else ("negative",)  # the default negative column is used when present
    columns = [text_column or "anchor", pair_column or "positive", *negatives]
    return _read_columns(path, kind, columns, None, skip_bad_rows, optional)


def read_scored(
    path: str | os.PathLike,
    text_column: str | None = None,
    pair_column: str | None = None,
    label_column: str | None = None,
    fmt: str | None = None,
    skip_bad_rows: bool = False,
) -> TextRows:
    """(text, text, score) rows; columns default to ``sentence1``, ``sentence2``, ``score`` (the GLUE STS-B and
    Hugging Face stsb names). Scores are read as they are (any range)."""
    path = check_file(path)
    kind = table_format(path, fmt)
    if kind is None:
        raise DataError(path, None, "--task sts needs (text, text, score) rows: use a TSV / CSV / JSONL file")
    return _read_columns(
        path, kind, [text_column or "sentence1", pair_column or "sentence2"], label_column or "score", skip_bad_rows, ()
    )


def _read_columns(
    path: Path,
    kind: str,
    columns: Sequence[str],
    score_column: str | None,
    skip_bad_rows: bool,
    optional: Sequence[str],
) -> TextRows:
    header, records = iter_records(path, kind)
    if header is not None:
        if len(header) == 1 and len(columns) > 1:
            raise DataError(
                path,
                1,
                f"this task needs {len(columns)} text columns ({', '.join(columns)}), but the "
                f"file has one column {header}: use --task simcse for one text per row",
            )
        columns = [c for c in columns if c in header or c not in optional]
        for c in [*columns, *([score_column] if score_column else [])]:
            if c not in header:
                flag = "--label-column" if c == score_column else "--text-column / --pair-column / --negative-column"
                raise DataError(path, 1, f"no column {c!r} in the header {header} (choose with {flag})")
    guard = RowGuard(path, skip_bad_rows)
    out = TextRows([], [] if score_column else None, path=str(path))
    present_optional: set[str] | None = None
    first = 0  # the line of the first JSONL record: it decides the optional fields
    for n, record in records:
        if isinstance(record, str):
            guard.bad(n, record)
            continue
        if header is None and present_optional is None:  # JSONL: an optional field counts if the first row has it
            present_optional, first = {c for c in optional if c in record}, n
            columns = [c for c in columns if c not in optional or c in present_optional]
        extra = [c for c in optional if present_optional is not None and c not in present_optional and c in record]
        if extra:  # its text would be dropped in silence: every row has the field, or none does
            guard.bad(n, f"field {extra[0]!r}, which the first row (line {first}) lacks: give it on every row or none")
            continue
        texts = [_text(record, c) for c in columns]
        missing = [c for c, t in zip(columns, texts) if t is None]
        if missing:
            guard.bad(n, f"missing or empty text in column {missing[0]!r}")
            continue
        if score_column:
            raw = record.get(score_column)
            score = finite_number(raw)
            if score is None:
                guard.bad(n, f"score {raw!r} in column {score_column!r} is not a finite number")
                continue
            out.scores.append(score)
        out.rows.append(tuple(texts))
        out.lines.append(n)
    _finish(guard, out)
    return out


def _finish(guard: RowGuard, out: TextRows) -> None:
    if guard.skipped:
        logger.warning(
            "skipped %d bad rows of %s (kept %d); first: %s",
            guard.skipped,
            guard.path,
            len(out.rows),
            guard.first_error,
        )
    if not out.rows:
        raise DataError(
            guard.path, None, "no usable rows" + (f" ({guard.skipped} bad rows skipped)" if guard.skipped else "")
        )
    out.skipped = guard.skipped


def read_nli(
    path: str | os.PathLike,
    premise_column: str | None = None,
    hypothesis_column: str | None = None,
    label_column: str | None = None,
    fmt: str | None = None,
    skip_bad_rows: bool = False,
) -> TextRows:
    """NLI rows (premise, hypothesis, label) -> (premise, entailed hypothesis, contradicting hypothesis) triplets:
    entailment pairs are the positives, the same premise's contradictions the hard negatives. Labels are
    ``entailment`` / ``neutral`` / ``contradiction`` or Hugging Face's ids 0 / 1 / 2; neutral rows are unused.
    A premise with entailments but no contradiction gives (premise, hypothesis) pairs only when no premise of the
    file has a contradiction (a batch needs one shape)."""
    path = check_file(path)
    kind = table_format(path, fmt)
    if kind is None:
        raise DataError(path, None, "--nli needs a TSV / CSV / JSONL file with premise, hypothesis and label columns")
    premise_column = premise_column or "premise"
    hypothesis_column = hypothesis_column or "hypothesis"
    label_column = label_column or "label"
    header, records = iter_records(path, kind)
    if header is not None:
        for c in (premise_column, hypothesis_column, label_column):
            if c not in header:
                raise DataError(
                    path,
                    1,
                    f"no column {c!r} in the header {header} (choose with --text-column / "
                    "--pair-column / --label-column)",
                )
    guard = RowGuard(path, skip_bad_rows)
    entail: dict[str, list[tuple[str, int]]] = {}
    contra: dict[str, list[str]] = {}
    for n, record in records:
        if isinstance(record, str):
            guard.bad(n, record)
            continue
        premise, hypothesis = _text(record, premise_column), _text(record, hypothesis_column)
        if premise is None or hypothesis is None:
            column = premise_column if premise is None else hypothesis_column
            guard.bad(n, f"missing or empty text in column {column!r}")
            continue
        raw = str(record.get(label_column, "")).strip().lower()
        label = NLI_LABELS.get(raw)
        if label is None:
            guard.bad(
                n,
                f"label {record.get(label_column)!r} in column {label_column!r} is not entailment, neutral "
                "or contradiction (or 0 / 1 / 2)",
            )
            continue
        if label == "entailment":
            entail.setdefault(premise, []).append((hypothesis, n))
        elif label == "contradiction":
            contra.setdefault(premise, []).append(hypothesis)
    out = TextRows([], path=str(path))
    any_contra = any(p in contra for p in entail)
    dropped = 0
    for premise, hyps in entail.items():
        negs = contra.get(premise, [])
        for k, (hyp, n) in enumerate(hyps):
            if any_contra and not negs:
                dropped += 1
                continue
            out.rows.append((premise, hyp, negs[k % len(negs)]) if any_contra else (premise, hyp))
            out.lines.append(n)
    if dropped:
        logger.info("%s: %d entailment pairs have no contradiction for their premise and were left out", path, dropped)
    _finish(guard, out)
    return out


def column(seqs: Sequence[Sequence[int]], pad_id: int, device: Any = None):
    """One column of a training batch (each row's token ids) padded to its longest, as the embedding loop feeds
    it to the model: a ``gradcache.Column`` (input_ids, token_type_ids all 0, attention_mask) on ``device``, from
    the one collate (:func:`bertkit.batches.collate`)."""
    # torch: `bertkit evaluate --task sts -h` imports this module without it
    from bertkit.batches import collate
    from bertkit.embeddings.gradcache import Column

    return Column(*collate(seqs, None, pad_id, device=device))


def read_squad_pairs(path: str | os.PathLike, mode: str = "sentence", skip_bad_rows: bool = False) -> TextRows:
    """SQuAD JSON -> (question, the sentence holding the first answer) or (question, paragraph) pairs.
    Unanswerable (v2.0) questions are left out."""

    if mode not in ("sentence", "paragraph"):
        raise InputError(f"--squad-pairs must be sentence or paragraph, got {mode!r}")
    examples, _ = read_squad(path, skip_bad_rows=skip_bad_rows, require_answers=False)
    out = TextRows([], path=str(path), skipped=examples.skipped)
    spans_of: dict[str, list[tuple[int, int]]] = {}
    for ex in examples:
        if ex.is_impossible or not ex.answers or not ex.question.strip():
            continue
        if mode == "paragraph":
            out.rows.append((ex.question.strip(), ex.context.strip()))
            continue
        spans = spans_of.get(ex.context)
        if spans is None:
            spans = spans_of[ex.context] = sentence_spans(ex.context)
        start = ex.answers[0][1]
        sentence = next((ex.context[a:b] for a, b in spans if a <= start < b), None)
        if sentence is None:  # the answer starts in the whitespace between sentences
            sentence = next((ex.context[a:b] for a, b in spans if a >= start), ex.context[spans[-1][0] : spans[-1][1]])
        out.rows.append((ex.question.strip(), sentence))
    if not out.rows:
        raise DataError(path, None, "no answerable questions")
    return out


def read_training_rows(args) -> TextRows:
    """The training file read the way ``--task`` and the data flags say (``args``: an ``EmbeddingTrainArgs``),
    cut to ``--max-train-examples`` rows."""
    common = dict(fmt=args.data_format, skip_bad_rows=args.skip_bad_rows)
    if args.task == "simcse":
        rows = read_texts(args.train, args.text_column, **common)
    elif args.task == "sts":
        rows = read_scored(args.train, args.text_column, args.pair_column, args.label_column, **common)
    elif args.squad_pairs:
        rows = read_squad_pairs(args.train, args.squad_pairs, args.skip_bad_rows)
    elif args.nli:
        rows = read_nli(args.train, args.text_column, args.pair_column, args.label_column, **common)
    else:
        rows = read_pairs(args.train, args.text_column, args.pair_column, args.negative_column, **common)
    if args.max_train_examples:
        del rows.rows[args.max_train_examples :]
        if rows.scores is not None:
            del rows.scores[args.max_train_examples :]
    return rows
