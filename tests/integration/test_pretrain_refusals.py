"""``bertkit pretrain`` refuses in one line and leaves no half-made output (issue 54, items 7, 8 and 10): a flag
whose fault shows only once the corpus is prepared leaves nothing in OUTPUT, so the corrected command runs; flags
that cannot go together are refused before anything is written; ``--resume`` on a finished run is refused and
leaves it as it was."""

from __future__ import annotations

import pytest
from tinymodels import TINY_BERT_FLAGS

TINY = [*TINY_BERT_FLAGS, "--max-steps", "2", "--batch-size", "4", "--precision", "fp32", "--quiet"]
TINY += ["--workers", "1", "--threads", "1"]


def _pretrain(corpus, out, *extra) -> list[str]:
    path, vocab = corpus
    return ["pretrain", "--corpus", str(path), "--vocab", str(vocab), "--output", str(out), *TINY, *extra]


def _refused(argv, capsys) -> str:
    """bertkit ARGV's exit 2 and its one line on stderr."""
    from bertkit.cli import main

    capsys.readouterr()
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (["--seq-len", "1"], "--seq-len: .*must be >= 8, got 1"),  # checked before anything is written
        (["--seq-len", "32", "--batch-size", "100000"], "fewer than 100000 instances"),  # only once the corpus is read
        # a later stage than the first (--two-phase's second, a ramp's end): checked before training, not on reaching it
        (["--two-phase", "--phase2-seq-len", "100000"], "fewer than 4 instances of 100000 tokens"),
        # an override only the vocabulary refutes, once it is read (any failure, not only a flag's, is cleaned up)
        (["--config-override", "vocab_size=10"], "--config-override: vocab_size is 10; the tokenizer has"),
    ],
    ids=["before-writing", "after-preparing", "a-later-stage", "override-refuted-by-the-vocabulary"],
)
def test_a_flag_that_fails_leaves_no_output_and_the_corrected_command_runs(alice_corpus, tmp_path, capsys, bad, says):
    from tinymodels import run_cli

    out = tmp_path / "run"
    assert __import__("re").search(says, _refused(_pretrain(alice_corpus, out, *bad), capsys))
    assert not out.exists()
    run_cli(_pretrain(alice_corpus, out, "--seq-len", "32"))
    assert (out / "model.safetensors").is_file()


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--resume", "--overwrite"], "--resume and --overwrite: choose one"),
        (["--generator-layers", "1"], "--generator-layers: only --objective electra has a generator"),
        (["--phase2-seq-len", "64"], "--phase2-seq-len: only --two-phase uses it"),
        (["--rtd-weight", "3"], "--rtd-weight: only --objective electra uses it"),
        (["--dupe-factor", "3"], "--dupe-factor: only --masking static uses it"),
        (["--blimp-pairs", "5"], "--blimp-pairs: only --blimp uses it"),
        (["--warmup-steps", "3"], "--warmup-steps 3: more than the run's --max-steps 2"),
        (
            ["--config-override", "max_position_embeddings=16"],
            "max_position_embeddings=16: the run feeds the model .* 32",
        ),
        (["--device", "foo"], "--device foo: not a device name"),
        (["--vocab-size", "300"], "--vocab-size: sizes a vocabulary trained on the corpus; --vocab gives one"),
        (["--init-from", "m", "--embedding-init", "cooccurrence"], "--embedding-init: initialises a fresh model"),
    ],
    ids=[
        "resume-overwrite",
        "generator-without-electra",
        "phase2-without-two-phase",
        "rtd-weight-without-electra",
        "dupe-factor-without-static",
        "blimp-pairs-without-blimp",
        "warmup-past-the-steps",
        "positions-below-seq-len",
        "not-a-device",
        "vocab-size-with-a-vocabulary",
        "fresh-init-with-init-from",
    ],
)
def test_flags_that_cannot_go_together_are_refused_before_writing(alice_corpus, tmp_path, capsys, flags, says):
    out = tmp_path / "run"
    assert __import__("re").search(says, _refused(_pretrain(alice_corpus, out, "--seq-len", "32", *flags), capsys))
    assert not out.exists()


def test_a_probe_pair_longer_than_the_positions_is_refused_before_training(alice_corpus, tmp_path, capsys):
    """Issue 60, item 6: a --blimp pair longer than the model's positions trained, then failed at the first probe
    on torch's 'sequence length exceeds max_position_embeddings', naming neither --blimp nor the file, and left a
    run the corrected command refused. It is refused before training, naming --blimp, the file and the line; no
    OUTPUT is left, and the corrected command runs."""
    import json

    from tinymodels import run_cli

    blimp = tmp_path / "blimp"
    blimp.mkdir()
    row = {"sentence_good": "the cat sat .", "sentence_bad": "the cat sit .", "field": "f", "UID": "a"}
    long = {**row, "sentence_good": "the cat sat on the mat . " * 20}
    (blimp / "a.jsonl").write_text(json.dumps(row) + "\n" + json.dumps(long) + "\n")
    out = tmp_path / "run"
    argv = _pretrain(alice_corpus, out, "--seq-len", "32", "--config-override", "max_position_embeddings=64")
    line = _refused([*argv, "--blimp", str(blimp)], capsys)
    assert f"--blimp {blimp / 'a.jsonl'}:2: a sentence of" in line and "longer than the model's 64 positions" in line
    assert not out.exists()
    (blimp / "a.jsonl").write_text(json.dumps(row) + "\n")
    run_cli([*argv, "--blimp", str(blimp)])
    assert (out / "model.safetensors").is_file()


def test_resume_on_a_finished_run_is_refused_and_leaves_it_unchanged(alice_corpus, tmp_path, capsys):
    """docs/operating.md: --resume refuses a finished run; a run directory written before run.json recorded
    ``finished`` is recognised by its model file, as one from today by the field."""
    import json

    from tinymodels import run_cli

    out = tmp_path / "run"
    argv = _pretrain(alice_corpus, out, "--seq-len", "32")
    run_cli(argv)
    assert json.loads((out / "run.json").read_text())["finished"] is True
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    line = _refused([*argv, "--resume"], capsys)
    assert "--resume:" in line and "holds a finished run" in line and "--overwrite" in line
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    record = json.loads((out / "run.json").read_text())
    del record["finished"]  # a run directory from before the field
    (out / "run.json").write_text(json.dumps(record))
    assert "holds a finished run" in _refused([*argv, "--resume"], capsys)


def test_a_model_too_large_for_memory_is_one_line_and_leaves_no_output(alice_corpus, tmp_path, capsys, monkeypatch):
    """torch's CPU allocator fails with a RuntimeError naming the bytes (a 1e8-position table asks 12 GB; faked here,
    since an overcommitting kernel may grant it): one line naming the size flags, and the prepared OUTPUT removed."""
    from bertkit import models

    def refuse(*args, **kwargs):
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: you tried "
            "to allocate 12800000000 bytes. Error code 12 (Cannot allocate memory)"
        )

    monkeypatch.setattr(models.Architecture, "build_for_pretraining", refuse)
    line = _refused(_pretrain(alice_corpus, tmp_path / "run", "--seq-len", "32"), capsys)
    assert "--model-size bert-tiny --config-override hidden_size=32" in line
    assert "does not fit in memory (a table of 11.9 GiB)" in line and not (tmp_path / "run").exists()
