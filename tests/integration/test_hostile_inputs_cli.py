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


@pytest.fixture(scope="module")
def wrong_dirs(tmp_path_factory, tiny_dir):
    """Model directories that are wrong in kinds issue 54's probes did not try: another architecture's model_type,
    a vocabulary larger than the embedding table, and an exported directory whose model.onnx is the graph of the
    bare encoder (not of its classifier head)."""
    import json

    from bertkit.export import export_onnx

    root = tmp_path_factory.mktemp("wrong")
    gpt2 = shutil.copytree(tiny_dir, root / "gpt2")
    config = json.loads((gpt2 / "config.json").read_text())
    (gpt2 / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    big = shutil.copytree(tiny_dir, root / "bigvocab")
    with open(big / "vocab.txt", "a", encoding="utf-8") as f:
        f.writelines(f"extra{i}\n" for i in range(20))
    other = root / "othergraph"
    other.mkdir()
    for name in ("config.json", "vocab.txt"):
        shutil.copy(tiny_dir / name, other / name)
    export_onnx(tiny_dir, root / "encoder.onnx", hidden_states=True, check=False)
    shutil.copy(root / "encoder.onnx", other / "model.onnx")
    # an exported every-layer directory whose encoder.onnx is a 2-layer model's, under the 1-layer config
    from tinymodels import FINETUNE_VOCAB, make_model_dir

    deeper = shutil.copytree(other, root / "deepergraph")
    (deeper / "model.onnx").unlink()
    export_onnx(make_model_dir(root / "two", FINETUNE_VOCAB, layers=2), deeper, hidden_states=True, check=False)
    shutil.copy(tiny_dir / "config.json", deeper / "config.json")
    return {"gpt2": gpt2, "bigvocab": big, "othergraph": other, "deepergraph": deeper}


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
    # issue 54, item 10: --resume with --overwrite, refused by every training command as pretrain refuses it
    "finetune --resume --overwrite": (
        ["finetune", "--task", "sst2", "--train", "{train}", "--model", "{model}", "--output", "{out}", "--resume"]
        + ["--overwrite"],
        "--resume and --overwrite: choose one",
    ),
    "finetune --task simcse --resume --overwrite": (
        ["finetune", "--task", "simcse", "--train", "{texts}", "--model", "{model}", "--output", "{out}", "--resume"]
        + ["--overwrite"],
        "--resume and --overwrite: choose one",
    ),
    "distill --resume --overwrite": (
        ["distill", "--teacher", "{model}", "--student", "bert-tiny", "--train", "{train}", "--output", "{out}"]
        + ["--resume", "--overwrite"],
        "--resume and --overwrite: choose one",
    ),
    "finetune --task simcse --max-seq-length 100000": (
        ["finetune", "--task", "simcse", "--train", "{texts}", "--model", "{model}", "--output", "{out}"]
        + ["--max-seq-length", "100000"],
        "--max-seq-length 100000: the model in",
    ),
    # item 10: a task flag the task does not use, or the same column twice, is refused (it was silently ignored)
    "finetune --task sst2 --doc-stride 5": (
        ["finetune", "--task", "sst2", "--train", "{train}", "--model", "{model}", "--output", "{out}"]
        + ["--doc-stride", "5"],
        "--doc-stride: --task sst2 does not use it",
    ),
    "finetune --task simcse --scale 10": (
        ["finetune", "--task", "simcse", "--train", "{texts}", "--model", "{model}", "--output", "{out}"]
        + ["--scale", "10"],
        "--scale: --task simcse does not use it (only pairs, sts)",
    ),
    "finetune --task simcse --matryoshka-dims 100000": (  # item 7: found at the first step, OUTPUT made
        ["finetune", "--task", "simcse", "--train", "{texts}", "--model", "{model}", "--output", "{out}"]
        + ["--matryoshka-dims", "100000"],
        "--matryoshka-dims 100000: larger than the model's embedding size 32",
    ),
    "predict --task sst2 --doc-stride 5": (
        ["predict", "--model", "{model}", "--task", "sst2", "--data", "{train}", "--output", "{out}", "--doc-stride"]
        + ["5"],
        "--doc-stride: --task sst2 does not use it",
    ),
    "finetune --tagger without --feature-based": (
        ["finetune", "--task", "conll2003", "--train", "{train}", "--model", "{model}", "--output", "{out}"]
        + ["--tagger", "mlp"],
        "--tagger: only --feature-based uses it",
    ),
    "finetune --label-column = --text-column": (
        ["finetune", "--task", "classification", "--train", "{train}", "--model", "{model}", "--output", "{out}"]
        + ["--text-column", "sentence", "--label-column", "sentence"],
        "--label-column 'sentence': the same column as --text-column",
    ),
    "finetune --feature-layers ''": (
        ["finetune", "--task", "conll2003", "--train", "{train}", "--model", "{model}", "--output", "{out}"]
        + ["--feature-based", "--feature-layers", ""],
        "--feature-layers must be comma-separated integers, got ''",
    ),
    # item 7: a corpus refused only once prepare reads it (the output made by then is removed)
    "prepare, a binary corpus": (
        ["prepare", "--corpus", "{tf}/bert_model.ckpt.data-00000-of-00001", "--vocab", "{model}", "--output", "{out}"]
        + ["--workers", "1", "--quiet"],
        "bert_model.ckpt.data-00000-of-00001: not a text corpus",
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
    "pretrain --output inside its corpus directory": (
        ["pretrain", "--corpus", "{tmp}", "--vocab", "{model}/vocab.txt", "--max-steps", "2", "--output", "{tmp}/out"],
        "is inside --corpus",
    ),
    "downstream --max-time-per-run 0": (
        ["downstream", "--model", "{model}", "--data-dir", "{tmp}", "--output", "{out}", "--max-time-per-run", "0"],
        "--max-time-per-run 0: must be > 0",
    ),
    # issue 54's kin, from the probes of the loaders (model directories, ONNX graphs, devices, layers, limits)
    "embed, another architecture's config": (
        ["embed", "--model", "{gpt2}", "--input", "{texts}", "--output", "{out}.npy"],
        "config.json: model_type 'gpt2' is not a model bertkit reads",
    ),
    "export, another architecture's config": (["export", "--onnx", "{gpt2}", "{out}"], "model_type 'gpt2'"),
    "similarity, a vocabulary larger than the model's": (
        ["similarity", "--model", "{bigvocab}", "a film", "a movie"],
        "bigvocab: the tokenizer (vocab.txt / tokenizer.json) has",
    ),
    "predict, a vocabulary larger than the model's": (
        ["predict", "--model", "{bigvocab}", "--task", "sst2", "--data", "{train}", "--output", "{out}"],
        "bigvocab: the tokenizer (vocab.txt / tokenizer.json) has",
    ),
    "export, a vocabulary larger than the model's": (
        ["export", "--onnx", "{bigvocab}", "{out}"],
        "bigvocab: the tokenizer (vocab.txt / tokenizer.json) has",
    ),
    "evaluate, the graph of another model": (
        ["evaluate", "--model", "{othergraph}", "--task", "sst2", "--data", "{train}", "--output", "{out}"],
        "model.onnx: the graph has no output 'logits'",
    ),
    "embed --backend onnx, an every-layer graph of another depth": (
        ["embed", "--model", "{deepergraph}", "--input", "{texts}", "--output", "{out}.npy", "--backend", "onnx"],
        "encoder.onnx: a graph of 2 layers, config.json gives 1",
    ),
    "predict --output under a file": (
        ["predict", "--model", "{model}", "--task", "sst2", "--data", "{train}", "--output", "{texts}/out"],
        "texts.txt is a file, not a directory",
    ),
    "attention --output /proc/x.png": (
        ["attention", "--model", "{model}", "--output", "/proc/x.png", "the film"],
        "--output /proc/x.png: cannot write there",
    ),
    "fill-mask on a classifier": (["fill-mask", "--model", "{model}", "a [MASK] film"], "has no masked-LM head"),
    "embed --output over its --input": (
        ["embed", "--model", "{model}", "--input", "{tmp}/in.jsonl", "--output", "{tmp}/in.jsonl"],
        "is also --input; write to a new file",
    ),
    "embed --input a directory": (
        ["embed", "--model", "{model}", "--input", "{tmp}", "--output", "{out}.npy"],
        ": not a regular file (--input)",
    ),
    "serve --layers 9": (["serve", "--model", "{model}", "--layers", "9"], "--layers 9: layer 9 is out of range"),
    "serve --layers 1,,2": (["serve", "--model", "{model}", "--layers", "1,,2"], "--layers item 2 is empty"),
    "embed --layers -0": (
        ["embed", "--model", "{model}", "--input", "{texts}", "--output", "{out}.npy", "--layers", "-0"],
        "--layers -0: -0 is not a layer",
    ),
    "serve --pooling foo": (["serve", "--model", "{model}", "--pooling", "foo"], "--pooling foo: unknown pooling"),
    "serve --threads huge": (["serve", "--model", "{model}", "--threads", "10000000000000"], "--threads must be"),
    "predict --output the model": (
        ["predict", "--model", "{model}", "--task", "sst2", "--data", "{train}", "--output", "{model}"],
        "is also --model",
    ),
    "serve --max-batch-tokens under one input": (
        ["serve", "--model", "{model}", "--max-batch-tokens", "10"],
        "--max-batch-tokens 10: must hold one input of the maximum length (64",
    ),
    "serve --model ''": (["serve", "--model", ""], "--model '': names no model directory"),
    "serve --host ''": (["serve", "--model", "{model}", "--host", ""], "--host is empty"),
    "serve --log-level loud": (["serve", "--model", "{model}", "--log-level", "loud"], "--log-level invalid choice"),
    "finetune --task rerank, one passage": (
        ["finetune", "--task", "rerank", "--train", "{rerank}", "--model", "{model}", "--output", "{out}"],
        "--train: query 'what is a' has no passage but its own positives",
    ),
    "finetune --matryoshka-dims 9999": (
        ["finetune", "--task", "simcse", "--train", "{texts}", "--model", "{model}", "--output", "{out}"]
        + ["--matryoshka-dims", "9999,8", "--quiet"],
        "--matryoshka-dims 9999: larger than the model's embedding size 32",
    ),
    "finetune --matryoshka-dims 0": (
        ["finetune", "--task", "simcse", "--train", "{texts}", "--model", "{model}", "--output", "{out}"]
        + ["--matryoshka-dims", "0", "--quiet"],
        "--matryoshka-dims must be comma-separated positive integers, got '0'",
    ),
    "vocab extend --output /proc/x": (
        ["vocab", "extend", "--model", "{model}", "--corpus", "{texts}", "--add", "3", "--output", "/proc/x"],
        "--output /proc/x: cannot write there",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_hostile_input_is_a_one_line_refusal_and_leaves_no_output(
    tmp_path, tiny_dir, tf_dir, ft, wrong_dirs, case, capsys
):
    """Issue 54, items 2, 6, 9 and 10: each bad file or flag ends in one line naming it (exit 2), never a traceback,
    and the output named is not made."""
    import torch

    if case == "serve --device cuda" and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    deep, onnx = _hostile_model_dirs(tmp_path, tiny_dir)
    texts = tmp_path / "texts.txt"
    texts.write_text("the film is good .\nthe film is bad .\n")
    (tmp_path / "in.jsonl").write_text('{"text": "the film is good ."}\n')
    rerank = tmp_path / "rerank.tsv"
    rerank.write_text("query\tpositive\nwhat is a\tthe a\n")
    inputs = _files(tmp_path)
    where = dict(
        deep=deep,
        onnx=onnx,
        model=tiny_dir,
        tf=tf_dir,
        texts=texts,
        train=ft / "sst2_train.tsv",
        tmp=tmp_path,
        rerank=rerank,
        **wrong_dirs,
    )
    before = _files(tiny_dir)
    argv, words = REFUSED[case]
    _one_line_refusal(capsys, [a.format(out=tmp_path / "out", **where) for a in argv], words)
    assert not list(tmp_path.glob("out*")) and _files(tiny_dir) == before
    assert {k: v for k, v in _files(tmp_path).items() if k in inputs} == inputs  # no input written over


@pytest.mark.parametrize("command", ["embed", "similarity"])
def test_default_layers_fit_a_one_layer_model_in_every_command(tmp_path, tiny_dir, command, capsys):
    """Issue 54, item 3's kin: `similarity` took the default layer -2 as given and refused a 1-layer model; it now
    fits the defaults to the model as `embed` and `serve` do, saying so in one line."""
    texts = tmp_path / "texts.txt"
    texts.write_text("the film is good .\nthe film is bad .\n")
    argv = {
        "embed": ["embed", "--model", tiny_dir, "--input", texts, "--output", tmp_path / "e.npy", "--quiet"],
        "similarity": ["similarity", "--model", tiny_dir, "the film is good", "the film is bad"],
    }[command]
    assert main([str(a) for a in argv]) == 0
    assert "the default layers -2 do not all exist in this 1-layer model: using -1" in capsys.readouterr().err


@pytest.mark.parametrize("loader", ["Encoder", "load_pipeline"])
@pytest.mark.parametrize(
    "kwargs,words",
    [
        ({"device": "gpu"}, "device gpu: not a device name"),
        ({"device": ""}, "device is empty"),
        ({"device": "cpu:1"}, "device cpu:1: there is one cpu device"),
        ({"precision": "fp8"}, "precision must be one of"),
    ],
)
def test_the_library_loaders_refuse_bad_arguments_naming_them(tiny_dir, loader, kwargs, words):
    """``Encoder.from_pretrained`` and ``load_pipeline`` check ``device`` and ``precision`` before reading the model,
    as the commands' flags are: a BertkitError naming the argument (was torch's AssertionError or RuntimeError)."""
    from bertkit import Encoder, load_pipeline
    from bertkit.errors import InputError

    with pytest.raises(InputError, match=words):
        {"Encoder": Encoder.from_pretrained, "load_pipeline": load_pipeline}[loader](tiny_dir, **kwargs)


def test_a_task_head_too_large_for_memory_is_one_line_and_leaves_no_output(tiny_dir, ft, tmp_path, capsys, monkeypatch):
    """finetune --tagger-hidden 1000000000 asked the allocator for 477 GiB (a RuntimeError traceback); faked here, as
    an overcommitting kernel may grant it. errors.allocation_failure reads the error; the command names the model."""
    from bertkit.commands import finetune

    def refuse(*args, **kwargs):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 512000000000 bytes.")

    monkeypatch.setattr(finetune, "load_model", refuse)
    argv = ["finetune", "--task", "sst2", "--train", ft / "sst2_train.tsv", "--model", tiny_dir, "--output"]
    _one_line_refusal(capsys, [*argv, tmp_path / "out"], "does not fit in memory (a table of 476.8 GiB)")
    assert not (tmp_path / "out").exists()


def test_a_run_refused_before_its_first_checkpoint_leaves_nothing_and_the_corrected_command_runs(
    tiny_dir, ft, tmp_path, capsys, monkeypatch
):
    """Issue 54, item 7, for finetune (the embedding tasks and distill run under the same outputs.removed_if_refused):
    a refusal after the run made OUTPUT (run.json and metrics, faked here) removes it, so the corrected command is
    not refused as 'a different run'; a run stopped by a signal keeps its checkpoint for --resume."""
    from bertkit.commands import finetune
    from bertkit.errors import InputError
    from bertkit.training.interrupt import Interrupted

    out = tmp_path / "out"
    real = finetune.finetune

    def fails(error):
        def run(*args, **kwargs):
            (out / "checkpoints").mkdir(parents=True)
            (out / "run.json").write_text("{}")
            if isinstance(error, Interrupted):
                (out / "checkpoints" / "step-3.pt").write_bytes(b"")
            raise error

        return run

    argv = ["finetune", "--task", "sst2", "--train", ft / "sst2_train.tsv", "--model", tiny_dir, "--output", out]
    argv += ["--epochs", "1", "--max-train-examples", "8", "--quiet", "--precision", "fp32"]
    monkeypatch.setattr(finetune, "finetune", fails(InputError("--lr: refused late")))
    _one_line_refusal(capsys, argv, "--lr: refused late")
    assert not out.exists()
    monkeypatch.setattr(finetune, "finetune", real)
    assert main([str(a) for a in argv]) == 0 and (out / "model.safetensors").is_file()  # the corrected command
    shutil.rmtree(out)
    monkeypatch.setattr(finetune, "finetune", fails(Interrupted("stopped")))
    assert main([str(a) for a in argv]) != 0 and (out / "checkpoints" / "step-3.pt").is_file()  # kept for --resume
