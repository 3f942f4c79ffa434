"""Issue 60: BLiMP's command as trustworthy as the rest. Each bad BLiMP file (not UTF-8, a pipe, a link to /dev/zero,
a link loop, a sentence that tokenizes to nothing or is longer than the model's positions) and each bad --output (the
data folder, the model folder, another model's folder, an existing file) is one line naming the file and line, or the
flag, before a pair is scored, and no output is made; --ties correct is BabyLM's rule, tie_rate says how many pairs
tie; SIGTERM ends --workers' processes too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tinymodels import FINETUNE_VOCAB, make_model_dir

from bertkit.cli import main

GOOD = {"sentence_good": "the film was good .", "sentence_bad": "the film were good .", "field": "f", "UID": "a"}


def _row(**fields) -> str:
    return json.dumps({**GOOD, **fields}, ensure_ascii=False) + "\n"


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """A tiny BERT with pre-training heads and 64 positions."""
    return make_model_dir(tmp_path_factory.mktemp("model"), FINETUNE_VOCAB, layers=1)


def _one_line(capsys, argv, *words) -> str:
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert all(w in err for w in words), err
    return err


def _bad_file(d: Path, kind: str) -> tuple[Path, str]:
    """A BLiMP folder whose a.jsonl is bad in ``kind``'s way, and the words its refusal holds."""
    d.mkdir()
    a = d / "a.jsonl"
    if kind == "Latin-1":
        a.write_bytes((_row() + _row(sentence_good="un caf\xe9 noir .")).encode("latin-1"))
        return d, f"{a}:2: byte 0xe9"
    if kind == "UTF-16":
        a.write_bytes((_row() + _row()).encode("utf-16"))
        return d, f"{a}:1: byte 0xff"
    if kind == "stray bytes":
        a.write_bytes(_row().encode() + b'{"sentence_good": "\x80\x81"}\n')
        return d, f"{a}:2: byte 0x80"
    if kind == "a FIFO":
        os.mkfifo(a)
        return d, f"{a}: not a regular file (a pipe, socket or device)"
    if kind == "a link to /dev/zero":
        a.symlink_to("/dev/zero")
        return d, f"{a}: not a regular file"
    if kind == "a link loop":
        (d / "b.jsonl").symlink_to(a)
        a.symlink_to(d / "b.jsonl")
        return d, f"{a}: a symbolic link loop"
    if kind == "zero-width spaces":
        a.write_text(_row() + _row(sentence_bad="\u200b\u200b"), encoding="utf-8")
        return d, f"{a}:2: the sentence '\\u200b\\u200b' tokenizes to nothing"
    if kind == "control characters":
        a.write_text(_row(sentence_good="\x01\x02 \x03") + _row(), encoding="utf-8")
        return d, f"{a}:1: the sentence '\\x01\\x02 \\x03' tokenizes to nothing"
    if kind == "longer than the positions":
        a.write_text(_row() + "\n" + _row(sentence_good="the film " * 40), encoding="utf-8")
        return d, f"{a}:3: a sentence of 82 tokens is longer than the model's 64 positions"
    raise AssertionError(kind)


BAD_FILES = [
    "Latin-1",
    "UTF-16",
    "stray bytes",
    "a FIFO",
    "a link to /dev/zero",
    "a link loop",
    "zero-width spaces",
    "control characters",
    "longer than the positions",
]


@pytest.mark.parametrize("kind", BAD_FILES)
def test_a_bad_blimp_file_is_one_line_naming_file_and_line_before_scoring(tmp_path, model, kind, capsys, monkeypatch):
    """Issue 60, items 1, 2, 6 and 10: `evaluate --task blimp` (and the pre-training probe's reader) refuse the file
    in one line naming it (and its line), before a pair is scored (a traceback, a silent 0.0 tie, a hang, memory
    growing at 750 MB/s before); no output is made."""
    from bertkit.tasks import blimp

    monkeypatch.setattr(blimp.PllScorer, "sentence_scores", lambda *a: pytest.fail("scored a pair"))
    data, words = _bad_file(tmp_path / "blimp", kind)
    out = tmp_path / "out"
    _one_line(capsys, ["evaluate", "--task", "blimp", "--model", model, "--data", data, "--output", out], words)
    assert not out.exists()


OUTPUTS = {  # --output, and the words of its refusal
    "the data folder": ("{data}", "--output {data}: is also --data"),
    "the model folder": ("{model}", "--output {model}: is also --model"),
    "another model's folder": ("{other}", "--output {other}: holds a model (config.json)"),
    "an existing file": ("{data}/a.jsonl", "--output {data}/a.jsonl: exists and is not a directory"),
    "earlier figures": ("{done}", "--output {done}: would replace its metrics.json; pass --overwrite"),
}


@pytest.mark.parametrize("case", list(OUTPUTS))
def test_a_bad_output_is_refused_naming_the_flag_before_scoring(tmp_path, model, case, capsys, monkeypatch):
    """Issue 60, items 3 and 4: the one output rule (outputs.check_output) before a pair is scored: never into the
    data folder (the next run reads pairs.jsonl as a paradigm), a model folder, or over a file or earlier figures;
    each input as it was."""
    from bertkit.tasks import blimp

    data = tmp_path / "blimp"
    data.mkdir()
    (data / "a.jsonl").write_text(_row(), encoding="utf-8")
    other = make_model_dir(tmp_path / "other", FINETUNE_VOCAB, layers=1)
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "metrics.json").write_text("{}")
    where = dict(data=data, model=model, other=other, done=tmp_path / "done")
    before = {p: p.read_bytes() for d in (data, model, other) for p in d.iterdir() if p.is_file()}
    monkeypatch.setattr(blimp.PllScorer, "sentence_scores", lambda *a: pytest.fail("scored a pair"))
    output, words = (x.format(**where) for x in OUTPUTS[case])
    _one_line(capsys, ["evaluate", "--task", "blimp", "--model", model, "--data", data, "--output", output], words)
    assert {p: p.read_bytes() for p in before} == before and not (data / "pairs.jsonl").exists()
    assert not (model / "metrics.json").exists() and not (other / "pairs.jsonl").exists()


@pytest.mark.parametrize("task", [["--task", "blimpp"], ["--task=blimpp"]])
def test_an_unknown_task_lists_every_task_evaluate_runs(task, capsys):
    """Issue 60, item 11: the "invalid choice" list of `evaluate --task` names blimp, sts and retrieval too."""
    assert main(["evaluate", *task, "--model", "m", "--data", "d"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'blimpp'" in err and all(f"'{t}'" in err for t in ("blimp", "sts", "retrieval", "sst2"))


def _flat_model(path: Path) -> Path:
    """A BERT whose MLM head ignores its input: every sentence of n tokens scores n log(1/V), so pairs of one
    length tie."""
    from bertkit.modeling import BertForPreTraining

    make_model_dir(path, FINETUNE_VOCAB, layers=1)
    flat = BertForPreTraining.from_pretrained(path)
    with torch.no_grad():
        flat.cls.predictions.transform.LayerNorm.weight.zero_()
        flat.cls.predictions.transform.LayerNorm.bias.zero_()
        flat.cls.predictions.bias.zero_()
    flat.save_pretrained(path)
    return path


@pytest.mark.parametrize("ties, expected", [("wrong", 0.0), ("correct", 50.0)])
def test_ties_wrong_or_correct_and_the_tie_rate(tmp_path, ties, expected):
    """Issue 62, item 2: a model built to tie scores each tie by --ties (wrong: bertkit's rule; correct: BabyLM's),
    and metrics.json's tie_rate counts the ties, per paradigm and overall, whatever the rule."""
    data = tmp_path / "blimp"
    data.mkdir()
    (data / "a.jsonl").write_text(
        _row(sentence_good="the film was good .", sentence_bad="film the was good .")  # same length: a tie
        + _row(sentence_good="alice saw bob .", sentence_bad="alice bob saw ."),
        encoding="utf-8",
    )
    (data / "b.jsonl").write_text(
        _row(UID="b", sentence_good="the film .", sentence_bad="the film was very very good .")  # shorter: right
        + _row(UID="b", sentence_good="the cast was great .", sentence_bad="cast the was great ."),  # a tie
        encoding="utf-8",
    )
    out = tmp_path / "out"
    argv = ["evaluate", "--task", "blimp", "--model", _flat_model(tmp_path / "flat"), "--data", data]
    assert main([str(a) for a in [*argv, "--output", out, "--ties", ties, "--quiet"]]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["ties"] == ties and metrics["tie_rate"] == {"overall": 75.0, "paradigms": {"a": 100.0, "b": 50.0}}
    assert metrics["paradigms"] == {"a": 2 * expected, "b": 50.0 + expected}
    rows = [json.loads(line) for line in (out / "pairs.jsonl").read_text().splitlines()]
    assert [r["right"] for r in rows] == [ties == "correct", ties == "correct", True, ties == "correct"]


def test_workers_are_never_more_than_the_sentences(monkeypatch):
    """Issue 60, item 5: --workers 5 on one pair's two sentences starts two processes (it started three idle ones
    too); on one sentence, none."""
    import multiprocessing
    from types import SimpleNamespace

    from bertkit.tasks import blimp

    started = []

    def pool(n):
        started.append(n)
        return SimpleNamespace(map=lambda f, jobs: [f(j) for j in jobs], close=lambda: 0, join=lambda: 0)

    monkeypatch.setattr(multiprocessing, "get_context", lambda *a: SimpleNamespace(Pool=pool))
    monkeypatch.setattr(blimp, "_score_part", lambda job: [float(len(s)) for s in job[1]])
    assert list(blimp.scores_in_processes("m", ["a b", "a b c"], workers=5)) == [3.0, 5.0] and started == [2]
    assert list(blimp.scores_in_processes("m", ["a b"], workers=5)) == [3.0] and started == [2]


def _children_of(pid: int) -> list[int]:
    """The spawned workers of process ``pid`` (its children running multiprocessing's spawn_main)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if not proc.name.isdigit() or b"spawn_main" not in (proc / "cmdline").read_bytes():
                continue
            if f"PPid:\t{pid}\n" in (proc / "status").read_text():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def _loads_torch(pid: int) -> bool:
    """Whether process ``pid`` has mapped torch's library (it is past its spawn data, importing or scoring)."""
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def _running(pid: int) -> bool:
    """Whether process ``pid`` still runs: not gone, and not a zombie (it has exited; only its reaping is left)."""
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_sigterm_ends_the_workers_too(tmp_path, model):
    """Issue 60, item 5: SIGTERM to `evaluate --task blimp --workers 2` ends its worker processes with it (they were
    re-parented and kept scoring); exit 143."""
    data = tmp_path / "blimp"
    data.mkdir()
    words = [w for w in FINETUNE_VOCAB.read_text().split() if w.isalpha()][:40]
    rows = [
        _row(sentence_good=" ".join(words[i % 40 : i % 40 + 12]) + f" {i}", sentence_bad=f"{i} .") for i in range(30000)
    ]  # about 10 s of scoring: a worker that kept scoring would still run well past the check below
    (data / "a.jsonl").write_text("".join(rows))
    argv = ["evaluate", "--task", "blimp", "--model", model, "--data", data, "--output", tmp_path / "out"]
    code = f"import sys; from bertkit.cli import main; sys.exit(main({[str(a) for a in argv]!r} + sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", code, "--workers", "2", "--threads", "1", "--quiet"])
    deadline = time.monotonic() + 60
    while len(_children_of(proc.pid)) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    workers = _children_of(proc.pid)
    assert len(workers) == 2 and proc.poll() is None
    # the signal once the workers are loading torch: one caught half-started (its spawn data not yet sent) would end
    # on its own reading the closed pipe, but late on a busy machine (this test flaked so)
    while not all(_loads_torch(w) for w in workers) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    deadline = time.monotonic() + 3
    while [w for w in workers if _running(w)] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [w for w in workers if _running(w)], "a worker outlived the command"


def test_a_long_sentence_is_said_to_be_slow_naming_its_file_and_line(tmp_path, capsys):
    """Issue 60, item 6: two ~700-word pairs ran over 120 s on ModernBERT without a word (PLL is one copy per token,
    each as long); a sentence over 128 tokens is named with its cost, and scored."""
    model = make_model_dir(tmp_path / "model", FINETUNE_VOCAB, layers=1, max_position_embeddings=256)
    data = tmp_path / "blimp"
    data.mkdir()
    (data / "a.jsonl").write_text(_row() + _row(sentence_bad="the film " * 80), encoding="utf-8")
    argv = ["evaluate", "--task", "blimp", "--model", model, "--data", data, "--output", tmp_path / "out", "--quiet"]
    assert main([str(a) for a in argv]) == 0
    err = capsys.readouterr().err
    assert f"{data / 'a.jsonl'}:2: a sentence of 162 tokens; its pseudo-log-likelihood runs 160 masked copies" in err
