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


# ------------------------------------------------------------------------------------------------ issue 54


def _files(d):
    """{relative path: bytes} of every file under ``d``: what a refused command must leave as it was."""
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _one_line_refusal(capsys, argv, *words):
    """``bertkit ARGV`` in this process exits 2 with one line on stderr holding ``words``, no traceback."""
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert all(w in err for w in words), err
    return err


@pytest.mark.parametrize(
    "command", ["distill", "finetune", "embeddings", "vocab extend", "vocab", "convert", "prepare"]
)
def test_an_output_that_is_an_input_is_refused_and_the_input_left_as_it_was(
    tmp_path, tiny_dir, tf_dir, ft, command, capsys
):
    """Issue 54, items 1 and 5: no command writes over what it reads (distill over its teacher, above all)."""
    model = shutil.copytree(tf_dir if command == "convert" else tiny_dir, tmp_path / "model")
    train = ft / "sst2_train.tsv"
    argv, words = {
        "distill": (["distill", "--teacher", model, "--student", "bert-tiny", "--train", train], "is also --teacher"),
        "finetune": (["finetune", "--task", "sst2", "--train", train, "--model", model], "is also --model"),
        "embeddings": (["finetune", "--task", "simcse", "--train", train, "--model", model], "is also --model"),
        "vocab extend": (["vocab", "extend", "--model", model, "--corpus", train, "--add", "3"], "is also --model"),
        "vocab": (["vocab", model / "vocab.txt", "--vocab-size", "200"], "would replace FILES"),
        "convert": (["convert", "--tf-checkpoint", model], "is also --tf-checkpoint"),
        "prepare": (["prepare", "--corpus", train, "--vocab", model], "is also --vocab"),
    }[command]
    before = _files(model)
    overwrite = [] if command == "prepare" else ["--overwrite"]  # it has no --overwrite
    _one_line_refusal(capsys, [*argv, "--output", model, *overwrite], words)
    assert _files(model) == before


def _corpus_argv(command, path, out, tiny_dir):
    """``bertkit COMMAND`` reading the corpus ``path`` into ``out``, at the tiny sizes."""
    from tinymodels import TINY_PRETRAIN

    return {
        "vocab": ["vocab", path, "--output", out, "--vocab-size", "160", "--min-frequency", "1", "--quiet"],
        "vocab extend": ["vocab", "extend", "--model", tiny_dir, "--corpus", path, "--add", "4", "--min-saving", "1"],
        "prepare": ["prepare", "--corpus", path, "--vocab", tiny_dir, "--quiet"],
        "pretrain": ["pretrain", "--corpus", path, *TINY_PRETRAIN, "--max-steps", "1", "--quiet"],
        "ablate": ["ablate", "--corpus", path, "--study", "nsp", "--steps", "1"],
    }[command] + ([] if command == "vocab" else ["--output", out])


def test_vocab_commands_read_a_compressed_corpus_as_its_text(tmp_path, tiny_dir, ft):
    """Issue 54, item 4: `vocab` and `vocab extend` read a compressed file as its text (prepare's reader): the same
    vocabulary as the plain file gives."""
    import gzip

    plain = tmp_path / "plain.txt"
    rows = [line.split("\t")[0] + "\n" for line in ft.joinpath("sst2_train.tsv").open()]
    plain.write_text("".join(rows) + "the xylophone zephyr was quixotic .\n" * 9)  # words the model splits poorly
    given = tmp_path / "c.txt.gz"
    given.write_bytes(gzip.compress(plain.read_bytes()))
    for command in ("vocab", "vocab extend"):
        a, b = tmp_path / command / "a", tmp_path / command / "b"
        assert main([str(x) for x in _corpus_argv(command, plain, a, tiny_dir)]) == 0
        assert main([str(x) for x in _corpus_argv(command, given, b, tiny_dir)]) == 0
        assert (a / "vocab.txt").read_bytes() == (b / "vocab.txt").read_bytes()
    assert (b / "vocab.txt").read_bytes() != (tiny_dir / "vocab.txt").read_bytes()  # the extension added tokens


NOT_TEXT = {  # a corpus file's bytes (None: a FIFO), and the words every reader refuses it with
    "binary": (b"\x7fELF\x00\x01" * 500, "{path}: not a text corpus: it holds NUL bytes"),
    "empty": (b"\n", "the corpus ({path}) holds no text"),
    "whitespace": (b"  \n\t\n \r\n", "the corpus ({path}) holds no text"),
    "UTF-16": ("a text\n".encode("utf-16"), "{path}: not a text corpus: UTF-16 or UTF-32 text"),
    "a gzip cut short": (__import__("gzip").compress(b"a text\n" * 999)[:40], "{path}: cannot read: Compressed file"),
    "a FIFO": (None, "{path}: not a regular file (a pipe, socket or device)"),  # reading it would wait for ever
}


@pytest.mark.parametrize("command", ["vocab", "vocab extend", "prepare", "pretrain", "ablate"])
@pytest.mark.parametrize("corpus", list(NOT_TEXT))
def test_every_corpus_reader_refuses_what_is_not_text_alike(tmp_path, tiny_dir, command, corpus, capsys):
    """Issues 54, items 4 and 9: one reader decides for `vocab`, `vocab extend`, `prepare`, `pretrain` and `ablate`:
    a binary, empty, blank, UTF-16, truncated or special file is refused in the same one line, before OUTPUT is
    made."""
    import os

    content, words = NOT_TEXT[corpus]
    path = tmp_path / "corpus.txt"
    if content is None:
        os.mkfifo(path)
    else:
        path.write_bytes(content)
    _one_line_refusal(capsys, _corpus_argv(command, path, tmp_path / "out", tiny_dir), words.format(path=path))
    assert not (tmp_path / "out").exists()


def _hostile_model_dirs(tmp_path, tiny_dir):
    """deep/: a config.json nested 100,000 deep; onnx/: an exported-looking directory whose model.onnx is cut short."""
    deep = shutil.copytree(tiny_dir, tmp_path / "deep")
    (deep / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    onnx = tmp_path / "onnx"
    onnx.mkdir()
    for name in ("config.json", "vocab.txt"):
        shutil.copy(tiny_dir / name, onnx / name)
    (onnx / "model.onnx").write_bytes(b"\x08\x07\x12\x07pytorch\x1a\x052.0.0:\xff\xff\xff")  # a truncated protobuf
    return deep, onnx


REFUSED = {
    "embed, deep config": (
        ["embed", "--model", "{deep}", "--input", "{texts}", "--output", "{out}.npy"],
        "config.json: nested too deeply",
    ),
    "export, deep config": (["export", "--onnx", "{deep}", "{out}"], "config.json: nested too deeply"),
    "convert, deep config": (
        ["convert", "--tf-checkpoint", "{tf}", "--config", "{deep}/config.json", "--output", "{out}"],
        "nested too deeply",
    ),
    "serve, deep config": (["serve", "--model", "{deep}"], "config.json: nested too deeply"),
    "predict, corrupt onnx": (
        [
            "predict",
            "--model",
            "{onnx}",
            "--backend",
            "onnx",
            "--task",
            "sst2",
            "--data",
            "{train}",
            "--output",
            "{out}",
        ],
        "model.onnx: not a readable ONNX graph",
    ),
    "evaluate, corrupt onnx": (
        ["evaluate", "--model", "{onnx}", "--backend", "onnx", "--task", "sst2", "--data", "{train}"],
        "model.onnx: not a readable ONNX graph",
    ),
    "serve, corrupt onnx": (
        ["serve", "--model", "{onnx}", "--backend", "onnx"],
        "model.onnx: not a readable ONNX graph",
    ),
    "embed --layers 9 into new directories": (
        ["embed", "--model", "{model}", "--input", "{texts}", "--output", "{out}/new/x.npy", "--layers", "9"],
        "layer 9 is out of range for a 1-layer model",
    ),
    "downstream --output over --model": (
        ["downstream", "--model", "{model}", "--data-dir", "{tmp}", "--output", "{model}"],
        ": is also --model; write to a new directory",
    ),
    "export --opset 1000": (
        ["export", "--onnx", "{model}", "{out}", "--opset", "1000"],
        "--opset 1000: this exporter writes opsets 14 to",
    ),
    "export --opset 7": (["export", "--onnx", "{model}", "{out}", "--opset", "7"], "--opset 7: "),
    "vocab --holdout not text": (
        ["vocab", "{texts}", "--output", "{out}", "--vocab-size", "200", "--holdout", "{deep}/model.safetensors"],
        "model.safetensors: not a text corpus",  # refused before the training, not after it wrote the vocabulary
    ),
    "vocab over an existing vocab.txt": (
        ["vocab", "{texts}", "--output", "{deep}/vocab.txt", "--vocab-size", "200"],
        "vocab.txt; pass --overwrite",
    ),
    "vocab --vocab-size 50": (
        ["vocab", "{texts}", "--output", "{out}", "--vocab-size", "50"],
        "--vocab-size 50: leaves no room",
    ),
    "finetune --max-seq-length 100000": (
        [
            "finetune",
            "--task",
            "sst2",
            "--train",
            "{train}",
            "--model",
            "{model}",
            "--output",
            "{out}",
            "--max-seq-length",
            "100000",
        ],
        "--max-seq-length 100000: the model in",
    ),
    "finetune --max-seq-length 1": (
        [
            "finetune",
            "--task",
            "sst2",
            "--train",
            "{train}",
            "--model",
            "{model}",
            "--output",
            "{out}",
            "--max-seq-length",
            "1",
        ],
        "--max-seq-length must be >= 3",
    ),
    "serve --api-key ''": (["serve", "--model", "{model}", "--api-key", ""], "--api-key is empty"),
    "serve --device cuda": (["serve", "--model", "{model}", "--device", "cuda"], "--device cuda: "),
    "downstream, bad quoting": (
        [
            "downstream",
            "--model",
            "{model}",
            "--data-dir",
            "{tmp}",
            "--output",
            "{out}",
            "--finetune-args",
            "--lr '1e-3",
        ],
        "cannot split it into flags",
    ),
    "downstream, the meter's flag": (
        [
            "downstream",
            "--model",
            "{model}",
            "--data-dir",
            "{tmp}",
            "--output",
            "{out}",
            "--finetune-args",
            "--output /tmp/elsewhere",
        ],
        "--output is set by this command itself",
    ),
    "downstream, a flag finetune lacks": (
        ["downstream", "--model", "{model}", "--data-dir", "{tmp}", "--output", "{out}", "--finetune-args", "-o x"],
        "--finetune-args '-o x': unrecognized arguments: -o x",
    ),
    "glue --max-time-per-run 0": (
        ["glue", "--model", "{model}", "--data", "{tmp}", "--output", "{out}", "--max-time-per-run", "0"],
        "--max-time-per-run 0: must be > 0",
    ),
    # what every cell would fail on is refused before the study makes its directory
    "glue, --model not a model": (
        ["glue", "--model", "{tmp}", "--data", "{tmp}", "--output", "{out}"],
        "no config.json or bert_config.json",
    ),
    "glue, no task in --data": (
        ["glue", "--model", "{model}", "--data", "{deep}", "--output", "{out}"],
        "no GLUE task to fine-tune was found",
    ),
    "downstream, no task files": (
        ["downstream", "--model", "{model}", "--data-dir", "{deep}", "--output", "{out}", "--tasks", "cola"],
        "no CoLA files",
    ),
    "ablate --values out of range": (
        ["ablate", "--corpus", "{texts}", "--study", "mask-rate", "--steps", "2", "--values", "2", "--output", "{out}"],
        "--values: mask rate 2.0 is not between 0 and 1",
    ),
    "ablate --vocab not a vocabulary": (
        [
            *("ablate", "--corpus", "{texts}", "--study", "nsp", "--steps", "2", "--output", "{out}"),
            *("--vocab", "{deep}/model.safetensors"),
        ],
        "model.safetensors: not a UTF-8 text vocabulary",
    ),
    "convert, no checkpoint at the prefix": (
        ["convert", "--tf-checkpoint", "{tmp}/nope", "--output", "{out}"],
        "/nope: no TensorFlow checkpoint",
    ),
    "glue --output inside --data": (
        ["glue", "--model", "{model}", "--data", "{tmp}", "--output", "{tmp}/out"],
        "is inside --data",
    ),
    "ablate --output inside its corpus directory": (
        ["ablate", "--corpus", "{tmp}", "--study", "nsp", "--steps", "2", "--output", "{tmp}/out"],
        "is inside --corpus",
    ),
    "downstream --max-time-per-run 0": (
        ["downstream", "--model", "{model}", "--data-dir", "{tmp}", "--output", "{out}", "--max-time-per-run", "0"],
        "--max-time-per-run 0: must be > 0",
    ),
    "vocab extend --output /proc/x": (
        ["vocab", "extend", "--model", "{model}", "--corpus", "{texts}", "--add", "3", "--output", "/proc/x"],
        "--output /proc/x: cannot write there",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_hostile_input_is_a_one_line_refusal_and_leaves_no_output(tmp_path, tiny_dir, tf_dir, ft, case, capsys):
    """Issue 54, items 2, 6, 9 and 10: each bad file or flag ends in one line naming it (exit 2), never a traceback,
    and the output named is not made."""
    import torch

    if case == "serve --device cuda" and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    deep, onnx = _hostile_model_dirs(tmp_path, tiny_dir)
    texts = tmp_path / "texts.txt"
    texts.write_text("the film is good .\nthe film is bad .\n")
    where = dict(
        deep=deep, onnx=onnx, model=tiny_dir, tf=tf_dir, texts=texts, train=ft / "sst2_train.tsv", tmp=tmp_path
    )
    argv, words = REFUSED[case]
    _one_line_refusal(capsys, [a.format(out=tmp_path / "out", **where) for a in argv], words)
    assert not list(tmp_path.glob("out*"))
