"""bertkit.modeldir.ModelDir: a model directory read once. Serving one directory (its task pipeline and the encoder
routes, or an encoder-only directory after the pipeline finds no head) reads its config.json exactly once (6 times for
a head and 4 for an encoder before ModelDir), and so does evaluate / predict's loading of a fine-tuned one; what it
answers is what the path-taking readers answer."""

from __future__ import annotations

import pathlib

import pytest
from tinymodels import finetune_base

from bertkit import models
from bertkit.commands.serve import load_model
from bertkit.config import read_model_config
from bertkit.modeldir import ModelDir


@pytest.fixture
def config_reads(monkeypatch):
    """The number of times any code reads a file named config.json (every reader goes through Path.read_text or
    open)."""
    reads = []
    read_text, real_open = pathlib.Path.read_text, open

    def counted_read_text(self, *args, **kwargs):
        if self.name == "config.json":
            reads.append(self)
        return read_text(self, *args, **kwargs)

    def counted_open(file, *args, **kwargs):
        if str(file).endswith("config.json"):
            reads.append(file)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "read_text", counted_read_text)
    monkeypatch.setattr("builtins.open", counted_open)
    return reads


@pytest.fixture(scope="module")
def head_dir(tmp_path_factory):
    from bertkit.modeling import BertForSequenceClassification

    return finetune_base(tmp_path_factory.mktemp("head"), BertForSequenceClassification, seed=1, num_labels=3)


def test_serving_a_head_reads_config_json_once(head_dir, config_reads):
    served = load_model(str(head_dir), "cpu", "fp32")
    served.encoder()  # the encoder routes of the same model
    assert served.kind == "classification" and len(config_reads) == 1, config_reads


@pytest.mark.parametrize("arch", ["bert", "modernbert"])
def test_serving_an_encoder_reads_config_json_once(finetune_base_of, arch, config_reads):
    directory = finetune_base_of(arch)  # no head: the pipeline is refused, the Encoder serves
    config_reads.clear()  # the first test to ask built it
    served = load_model(str(directory), "cpu", "fp32")
    assert type(served).__name__ == "Encoder" and len(config_reads) == 1, config_reads


def test_answers_equal_the_path_readers(head_dir, finetune_base_of):
    opened = ModelDir.open(head_dir)
    assert ModelDir.open(opened) is opened and str(opened) == str(head_dir) and pathlib.Path(opened) == head_dir
    assert read_model_config(opened) == read_model_config(head_dir)
    assert opened.head == ("BertForSequenceClassification", "sequence_classification")
    assert opened.weights_format == "safetensors" and opened.weights() == head_dir / "model.safetensors"
    assert opened.tokenizer() is opened.tokenizer()  # loaded once
    assert opened.config == models.of_directory(head_dir).config_class().from_pretrained(head_dir)
    modern = ModelDir.open(finetune_base_of("modernbert"))
    assert modern.architecture is models.of_directory(modern.path) and modern.architecture.model_type == "modernbert"
    assert modern.head == ("ModernBertForMaskedLM", "masked_lm")  # the base model keeps its MLM head


def test_a_directory_without_files_keeps_its_errors(tmp_path):
    opened = ModelDir.open(tmp_path)  # reads nothing: the loader that asks names what is missing
    assert opened.weights_format is None and opened.architecture is models.get(None)
    with pytest.raises(FileNotFoundError, match="no model.safetensors, pytorch_model.bin or TensorFlow checkpoint"):
        opened.weights()
    with pytest.raises(Exception, match="no config.json \\(not a model directory\\)"):
        read_model_config(opened)


def test_evaluate_and_predict_read_config_json_once(sst2_tuned_of, config_reads):
    """``bertkit evaluate`` / ``predict``'s loading of a fine-tuned directory (task, model, tokenizer): 3 reads
    before."""
    import argparse

    from bertkit.tasks.options import load_finetuned

    directory = sst2_tuned_of("bert")  # built (once a session) before the reads are counted
    config_reads.clear()
    task, model, _tokenizer = load_finetuned(str(directory), None, argparse.Namespace())
    assert task.name == "sst2" and model.config.num_labels == 2 and len(config_reads) == 1, config_reads


def _word_level_dir(path: pathlib.Path, config_text: str) -> pathlib.Path:
    """A WordLevel tokenizer.json of 8 tokens (its loader reads config.json's vocab_size) and ``config_text``."""
    import json

    vocab = {w: i for i, w in enumerate(["<pad>", "<s>", "</s>", "<unk>", "<mask>", "w0", "w1", "w2"])}
    model = json.dumps({"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"})
    path.mkdir()
    (path / "tokenizer.json").write_text(
        '{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null, '
        f'"pre_tokenizer": {{"type": "Whitespace"}}, "post_processor": null, "decoder": null, "model": {model}}}'
    )
    (path / "config.json").write_text(config_text)
    return path


def test_a_tokenizer_json_reads_the_config_json_read_for_the_model(tmp_path, config_reads):
    """A tokenizer.json's loader checks its ids against config.json's vocab_size: from the ModelDir's one read (the
    tokenizer and the model's config: 2 reads before); a config.json it refuses keeps the tokenizer's message."""
    from bertkit.tokenization import load_tokenizer

    opened = ModelDir.open(_word_level_dir(tmp_path / "ok", '{"vocab_size": 8}'))
    assert opened.tokenizer().encode("w1 w2").ids == [1, 6, 7, 2] and read_model_config(opened)["vocab_size"] == 8
    assert len(config_reads) == 1, config_reads
    bad = _word_level_dir(tmp_path / "bad", "[1, 2]")
    with pytest.raises(Exception) as by_path:
        load_tokenizer(bad)
    with pytest.raises(Exception) as by_modeldir:
        ModelDir.open(bad).tokenizer()
    assert str(by_modeldir.value) == str(by_path.value) and "the model config" in str(by_path.value)


def test_the_onnx_backend_exporting_on_the_fly_reads_config_json_once(head_dir, config_reads):
    """load_pipeline(backend="onnx") on a directory without a graph exports one from the ModelDir it opened: 6 reads
    before ModelDir, 3 with it until the export took it too."""
    pytest.importorskip("onnxruntime")
    from bertkit.pipelines import load_pipeline

    pipe = load_pipeline(head_dir, backend="onnx")
    assert pipe.backend == "onnx" and len(config_reads) == 1, config_reads


def test_blimp_reads_config_json_once(tiny_dir, config_reads):
    """``evaluate --task blimp``'s loading: the pairs' check (tokenizer, positions), then the scorer, from one
    ModelDir (3 reads before)."""
    from bertkit.tasks.blimp import PllScorer, model_limits

    config_reads.clear()  # only the loading is counted
    opened = ModelDir.open(tiny_dir)
    tokenizer, positions = model_limits(opened)
    scorer = PllScorer.from_pretrained(opened)
    assert scorer.tokenizer is tokenizer and positions == scorer.model.config.max_position_embeddings
    assert len(config_reads) == 1, config_reads
