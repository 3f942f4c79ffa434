"""Hostile inputs through the commands: a non-UTF-8 task file stops `finetune` and `predict` with exit 2 naming
file and line, and `ablate` checks a corpus directory as `pretrain` does. The readers' own checks are in
tests/unit/test_hostile_inputs.py."""

from __future__ import annotations

import shutil

import pytest
import torch

from bertkit.cli import main


def _latin1(path, text: str):
    path.write_bytes(text.encode("cp1252"))
    return path


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, fixtures_dir):
    from bertkit import BertConfig
    from bertkit.modeling import BertForSequenceClassification

    vocab = fixtures_dir / "finetune" / "vocab.txt"
    d = tmp_path_factory.mktemp("tiny")
    torch.manual_seed(0)
    size = sum(1 for line in vocab.read_text(encoding="utf-8").splitlines() if line)
    config = BertConfig(
        vocab_size=size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=64,
        num_labels=2,
    )
    BertForSequenceClassification(config).save_pretrained(d)
    shutil.copy(vocab, d / "vocab.txt")
    return d


def test_finetune_and_predict_on_non_utf8_tsv_exit_with_file_and_line(tiny_dir, fixtures_dir, tmp_path, capsys):
    ft = fixtures_dir / "finetune"
    good = (ft / "sst2_train.tsv").read_text(encoding="utf-8").splitlines()
    bad = _latin1(tmp_path / "train.tsv", "\n".join(good[:5] + ["un caf\xe9 noir\t1"] + good[5:]) + "\n")
    code = main(
        [
            "finetune",
            "--task",
            "sst2",
            "--train",
            str(bad),
            "--dev",
            str(ft / "sst2_dev.tsv"),
            "--model",
            str(tiny_dir),
            "--output",
            str(tmp_path / "out"),
            "--epochs",
            "1",
            "--quiet",
            "--precision",
            "fp32",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and f"{bad}:6: byte 0xe9" in err and "Traceback" not in err
    code = main(
        [
            "predict",
            "--model",
            str(tiny_dir),
            "--task",
            "sst2",
            "--data",
            str(bad),
            "--quiet",
            "--output",
            str(tmp_path / "pred"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and f"{bad}:6: byte 0xe9" in err and "Traceback" not in err


def test_ablate_command_checks_a_corpus_directory_as_pretrain_does(tmp_path, capsys):
    """The command: a directory is checked as pretrain checks it (was "no such file" for any directory)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    assert (
        main(["ablate", "--corpus", str(empty), "--output", str(tmp_path / "o2"), "--study", "nsp", "--steps", "2"])
        == 2
    )
    assert f"{empty}: a directory with no text files" in capsys.readouterr().err
    assert (
        main(
            [
                "ablate",
                "--corpus",
                str(tmp_path / "nothing"),
                "--output",
                str(tmp_path / "o3"),
                "--study",
                "nsp",
                "--steps",
                "2",
            ]
        )
        == 2
    )
    assert "no such corpus file or directory" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ issue 31


def _corpus_with_a_link_out(tmp_path):
    from tinycorpus import google_format

    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    d = tmp_path / "corpus"
    d.mkdir()
    (d / "a.txt").write_text(google_format([[f"Sentence {j} of {i}." for j in range(20)] for i in range(20)]))
    (d / "etc").symlink_to(etc, target_is_directory=True)
    return d


def test_prepare_skips_a_link_out_of_the_corpus_and_says_how_many_files_it_read(tmp_path, capsys):
    import json

    from tinycorpus import TOKENIZER_VOCAB

    d = _corpus_with_a_link_out(tmp_path)
    out = tmp_path / "shards"
    argv = ["prepare", "--corpus", str(d), "--vocab", str(TOKENIZER_VOCAB), "--workers", "1", "--quiet"]
    assert main([*argv, "--output", str(out)]) == 0
    captured = capsys.readouterr()
    assert f"{d / 'etc'}: a symbolic link to" in captured.err and "--follow-symlinks" in captured.err
    assert "read 1 of 2 file(s) found (skipped: 1 symbolic link leaving the corpus)" in captured.out
    files = [f[0] for f in json.loads((out / "meta.json").read_text())["fingerprint"]["files"]]
    assert files == [str((d / "a.txt").resolve())]
    assert main([*argv, "--output", str(tmp_path / "followed"), "--follow-symlinks"]) == 0
    assert "read 2 of 2 file(s) found" in capsys.readouterr().out
    meta = json.loads((tmp_path / "followed" / "meta.json").read_text())
    assert str((tmp_path / "etc" / "passwd").resolve()) in [f[0] for f in meta["fingerprint"]["files"]]


def test_prepare_refuses_a_dataset_naming_a_file_outside(tmp_path, capsys):
    import json

    from tinycorpus import TOKENIZER_VOCAB

    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "state.json").write_text(json.dumps({"_data_files": [{"filename": "../../../../etc/passwd"}]}))
    argv = ["prepare", "--corpus", str(ds), "--vocab", str(TOKENIZER_VOCAB), "--output", str(tmp_path / "o")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{ds / 'state.json'}: names the file '../../../../etc/passwd', outside" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "o").exists()
