"""Task files as a pre-training corpus (task-adaptive pre-training): which files are task files, the text each
example gives (pairs as two paragraphs, labels never), and ``bertkit pretrain --init-from`` on them."""

from __future__ import annotations

import json

import pytest

from bertkit.cli import main
from bertkit.data.pretraining.corpus import detect_format, iter_blocks
from bertkit.data.pretraining.task_text import task_documents, task_examples
from bertkit.data.tasks.readers import DataError
from tests.tinymodels import FINETUNE_FIXTURES as F
from tests.tinymodels import finetune_base


def _tsv_rows(name: str) -> list[list[str]]:
    """A TSV fixture's rows split on tabs by hand (no quoting: GLUE's text holds unbalanced quotes)."""
    lines = (F / name).read_text(encoding="utf-8-sig").splitlines()
    return [line.split("\t") for line in lines if line.strip()]


def test_glue_files_give_their_text_columns_and_pairs():
    rows = _tsv_rows("sst2_train.tsv")
    assert task_examples(F / "sst2_train.tsv") == [(r[0], None) for r in rows[1:]]  # header: sentence, label
    rows = _tsv_rows("mrpc_train.tsv")
    assert task_examples(F / "mrpc_train.tsv") == [(r[3], r[4]) for r in rows[1:]]  # #1 String, #2 String
    rows = _tsv_rows("cola_train.tsv")  # no header: source, label, mark, sentence
    assert task_examples(F / "cola_train.tsv") == [(r[3], None) for r in rows]
    pair = _tsv_rows("mrpc_train.tsv")[1]
    assert next(task_documents(F / "mrpc_train.tsv")) == f"{pair[3].strip()}\n\n{pair[4].strip()}"


def test_tsv_headers_pick_the_pair_and_labels_are_never_checked(tmp_path):
    qnli = tmp_path / "qnli.tsv"  # "sentence" is also SST-2's column: the pair wins
    qnli.write_text('index\tquestion\tsentence\tlabel\n0\tWho " came?\tShe came.\tentailment\n')
    assert task_examples(qnli) == [('Who " came?', "She came.")]
    own = tmp_path / "reviews.tsv"  # labels outside any GLUE label space, a column named by --text-field
    own.write_text("id\treview\tlabel\n1\tgreat film\tpos\n2\tdull\tneg\n")
    assert task_examples(own, text_field="review") == [("great film", None), ("dull", None)]
    short = tmp_path / "short.tsv"
    short.write_text("sentence1\tsentence2\na\tb\nc\n")
    with pytest.raises(DataError, match=r"short\.tsv:3: expected 2 tab-separated columns, got 1"):
        task_examples(short)


def test_generic_and_conll_files():
    generic = [json.loads(line) for line in (F / "generic_train.jsonl").read_text().splitlines() if line.strip()]
    assert task_examples(F / "generic_train.jsonl", text_field="review") == [(g["review"], None) for g in generic]
    assert task_examples(F / "generic_train.csv", text_field="review")[0] == (generic[0]["review"], None)
    blocks = [b for b in (F / "conll_train.txt").read_text().split("\n\n") if b.strip()]
    first = next(b for b in blocks if not b.startswith("-DOCSTART-"))
    words = [line.split()[0] for line in first.splitlines() if line.strip()]
    assert task_examples(F / "conll_train.txt")[0] == (" ".join(words), None)


def test_pairs_in_jsonl_and_bad_files(tmp_path):
    pairs = tmp_path / "nli.jsonl"
    pairs.write_text('{"premise": "a cat sat .", "hypothesis": "an animal sat .", "label": "entailment"}\n')
    assert detect_format(pairs) == "task"
    assert list(task_documents(pairs)) == ["a cat sat .\n\nan animal sat ."]
    plain = tmp_path / "docs.jsonl"
    plain.write_text('{"text": "a document ."}\n')
    assert detect_format(plain) == "jsonl"  # an ordinary JSONL corpus stays one
    bad = tmp_path / "bad.csv"
    bad.write_text("id,label\n1,pos\n")
    with pytest.raises(DataError, match=r"bad\.csv:1: no text column in \['id', 'label'\].*--text-field"):
        task_examples(bad)


def test_corpus_auto_reads_task_files_and_books_as_before(tmp_path):
    assert [detect_format(F / n) for n in ("sst2_train.tsv", "generic_train.csv", "conll_train.txt")] == ["task"] * 3
    book = tmp_path / "book.txt"
    book.write_text("It was a dark night. The rain fell.\nIt fell all night long, and on until the morning.\n")
    assert detect_format(book) in ("prose", "google")  # not a task file
    blocks = list(iter_blocks([F / "mrpc_train.tsv"]))
    docs = [t for b in blocks for t in b.items]
    assert docs == list(task_documents(F / "mrpc_train.tsv"))


def test_pretrain_init_from_on_task_files(tmp_path, capsys):
    model = finetune_base(tmp_path / "model")
    files = [F / "sst2_train.tsv", F / "mrpc_train.tsv", F / "conll_train.txt", F / "cola_train.tsv"]
    out = tmp_path / "tapt"
    argv = ["pretrain", "--init-from", str(model), "--corpus", *map(str, files), "--output", str(out)]
    argv += ["--max-steps", "2", "--seq-len", "32", "--batch-size", "4", "--workers", "1", "--precision", "fp32"]
    assert main([*argv, "--threads", "1", "--quiet"]) == 0
    meta = json.loads((out / "data" / "shards" / "meta.json").read_text())
    documents = meta["eval"]["documents"] + sum(s["documents"] for s in meta["shards"])
    assert documents == sum(len(task_examples(f)) for f in files)  # an example, a document
    assert (out / "model.safetensors").is_file()
