"""The one rule for outputs (bertkit.outputs): an output that is one of the command's inputs, lies inside one or
holds one, is refused; so is an existing output that holds files unless --overwrite; a failed command removes the
output directory it made and leaves one that existed. The commands' own calls are tested in
integration/test_hostile_inputs_cli.py."""

from __future__ import annotations

import os

import pytest

from bertkit.errors import InputError
from bertkit.outputs import check_output, removed_on_failure


@pytest.fixture
def tree(tmp_path):
    """model/ (a model directory with a config), data/train.tsv, full/ (holds a file), empty/, a file."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.tsv").write_text("a\t1\n")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "old.txt").write_text("x")
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    os.symlink(tmp_path / "model", tmp_path / "link")
    return tmp_path


@pytest.mark.parametrize(
    "output,inputs,kwargs,words",
    [
        ("model", {"--model": "model"}, {"overwrite": True}, "--output {out}: is also --model"),
        ("link", {"--teacher": "model"}, {"overwrite": True}, "--output {out}: is also --teacher"),
        ("model", {"--corpus": ["data/train.tsv", "model"]}, {"overwrite": None}, "is also --corpus"),
        ("data", {"--train": "data/train.tsv"}, {"writes": ("train.tsv",), "overwrite": None}, "would replace --train"),
        ("file", {}, {"overwrite": True}, "--output {out}: exists and is not a directory"),
        ("full", {}, {}, "--output {out}: already exists and is not empty; pass --overwrite"),
        ("full", {}, {"flag": "--onnx OUT"}, "--onnx OUT {out}: already exists"),
        ("model/extended", {"--model": "model"}, {}, "--output {out}: is inside --model"),  # a corpus dir reads it back
        ("link/new", {"--teacher": "model"}, {}, "--output {out}: is inside --teacher"),
        ("data", {"--train": "data/train.tsv"}, {"overwrite": None}, "--output {out}: holds --train"),  # --overwrite
        (".", {"--model": "model"}, {"overwrite": True}, "--output {out}: holds --model"),  # clears what it holds
        ("model", {}, {"writes": ("config.json",), "whole": False}, "--output {out}: would replace its config.json"),
        # an evaluation's figures (issue 60: evaluate and BLiMP wrote metrics.json over a fine-tuned model's)
        ("model", {}, {"overwrite": None, "figures": True}, "--output {out}: holds a model (config.json)"),
    ],
)
def test_an_output_that_is_an_input_or_holds_files_is_refused_naming_the_flag(tree, output, inputs, kwargs, words):
    inputs = {k: [tree / p for p in v] if isinstance(v, list) else tree / v for k, v in inputs.items()}
    before = sorted(p.relative_to(tree) for p in tree.rglob("*"))
    with pytest.raises(InputError) as e:
        check_output(tree / output, inputs, **kwargs)
    assert words.format(out=tree / output) in str(e.value) and "\n" not in str(e.value)
    assert sorted(p.relative_to(tree) for p in tree.rglob("*")) == before  # nothing made, nothing removed


@pytest.mark.parametrize(
    "output,inputs,kwargs",
    [
        ("new/dir", {"--model": "model"}, {}),
        ("empty", {"--model": "model"}, {}),
        ("full", {"--model": "model"}, {"overwrite": True}),
        ("full", {"--model": "model"}, {"overwrite": None}),  # the run directory judges (finetune --resume)
        # writes only vocab.txt beside the corpus (vocab -o data/vocab.txt): an input beside it is no concern
        ("data", {"--train": "data/train.tsv"}, {"writes": ("vocab.txt",), "overwrite": None, "whole": False}),
    ],
)
def test_an_output_that_replaces_nothing_it_reads_is_accepted(tree, output, inputs, kwargs):
    inputs = {k: tree / v for k, v in inputs.items()}
    assert check_output(tree / output, inputs, **kwargs) == tree / output
    assert not (tree / "new").exists()  # checking writes nothing


@pytest.mark.parametrize("existed", [False, True])
def test_a_failed_command_removes_only_the_output_directory_it_made(tmp_path, existed):
    out = tmp_path / "out"
    with pytest.raises(RuntimeError), removed_on_failure(out / "a" / "b"):  # parents it made go too
        (out / "a" / "b").mkdir(parents=True)
        raise RuntimeError("a late failure")
    assert not out.exists()
    if existed:
        out.mkdir()
        (out / "kept.txt").write_text("x")
    with pytest.raises(RuntimeError), removed_on_failure(out):
        out.mkdir(exist_ok=True)
        (out / "half.bin").write_bytes(b"1")
        raise RuntimeError("a late failure")
    assert out.exists() == existed
    assert not existed or sorted(p.name for p in out.iterdir()) == ["half.bin", "kept.txt"]
    with removed_on_failure(out):  # a success keeps what it wrote
        out.mkdir(exist_ok=True)
    assert out.is_dir()


def test_an_output_file_that_is_an_input_or_a_directory_is_refused(tmp_path):
    """``check_output_file``: the rule for a command that writes one file (``embed --output``): never over an input
    (the same file through a link too), never onto a directory."""
    from bertkit.outputs import check_output_file

    data = tmp_path / "in.jsonl"
    data.write_text("{}\n")
    (tmp_path / "link.jsonl").symlink_to(data)
    with pytest.raises(InputError, match="is also --input"):
        check_output_file(tmp_path / "link.jsonl", {"--input": data})
    with pytest.raises(InputError, match="is a directory"):
        check_output_file(tmp_path, {"--input": data})
    assert check_output_file(tmp_path / "out.jsonl", {"--input": data}) == tmp_path / "out.jsonl"
