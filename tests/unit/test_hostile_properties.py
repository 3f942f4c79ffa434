"""Issue 54's moonshot: random file contents and flag strings thrown at each command's validation step (the readers
and checks a command runs before it writes anything) end in a result or in one ``BertkitError`` line naming what is
wrong, never in another exception (the traceback ``cli.main`` would print)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertkit.errors import BertkitError

# bytes a task file, corpus or config is made of: mostly text (tabs, newlines, quotes, braces), sometimes not
TEXTY = st.one_of(
    st.binary(max_size=400),
    st.text(alphabet=st.sampled_from(list('ab é\t\n,"{}[]:01-\x00\r')), max_size=300).map(lambda t: t.encode()),
    st.lists(st.text(max_size=12), max_size=6).map(lambda row: ("\t".join(row) + "\n").encode() * 3),
)
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _readers():
    from bertkit.config import BertConfig, read_config_file
    from bertkit.data.pretraining.corpus import corpus_texts
    from bertkit.data.tasks.conll import read_conll
    from bertkit.data.tasks.glue import read_glue
    from bertkit.data.tasks.readers import read_table
    from bertkit.data.tasks.squad import read_squad
    from bertkit.data.tasks.swag import read_swag
    from bertkit.embeddings.data import read_pairs, read_scored, read_texts
    from bertkit.tokenization import load_tokenizer

    return {
        "glue sst2 (finetune --train)": ("train.tsv", lambda p: read_glue(p, "sst2", require_label=True)),
        "glue mrpc": ("train.tsv", lambda p: read_glue(p, "mrpc")),
        "generic tsv": ("train.tsv", lambda p: read_table(p, "text")),
        "generic jsonl": ("train.jsonl", lambda p: read_table(p, "text", fmt="jsonl")),
        "conll": ("train.txt", read_conll),
        "squad": ("train.json", read_squad),
        "swag": ("train.csv", read_swag),
        "embedding texts": ("texts.txt", read_texts),
        "embedding pairs jsonl (finetune --task pairs)": ("pairs.jsonl", read_pairs),
        "STS scores (--dev of the embedding tasks)": ("dev.tsv", read_scored),
        "corpus (vocab, vocab extend, prepare)": ("corpus.txt", lambda p: list(corpus_texts([p]))),
        "config.json": ("config.json", read_config_file),
        "model config": ("config.json", lambda p: BertConfig.from_pretrained(p.parent)),
        "vocab.txt": ("vocab.txt", lambda p: load_tokenizer(p.parent)),
    }


@pytest.mark.parametrize("reader", list(_readers()))
@SETTINGS
@given(content=TEXTY)
def test_any_file_content_is_read_or_refused_in_one_line(reader, content):
    name, read = _readers()[reader]
    d = Path(tempfile.mkdtemp(prefix="bertkit-prop-"))
    try:
        path = d / name
        path.write_bytes(content)
        try:
            read(path)
        except BertkitError as e:
            assert str(e).strip() and "\n" not in str(e).strip(), str(e)
    finally:
        shutil.rmtree(d)


@SETTINGS
@given(text=st.text(max_size=60))
def test_any_flag_string_handed_on_is_split_or_refused_in_one_line(text):
    import argparse

    from bertkit.options import flag_string

    try:
        argv = flag_string(("--output", "--model", "--seed"))(text)
    except argparse.ArgumentTypeError as e:
        assert "\n" not in str(e)
    else:
        assert not any(a.split("=")[0] in ("--output", "--model", "--seed") for a in argv)


@SETTINGS
@given(
    config=st.recursive(
        st.none() | st.booleans() | st.integers(-3, 10**6) | st.floats(allow_nan=True) | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
        max_leaves=12,
    ),
    length=st.one_of(st.none(), st.integers(-5, 10**6)),
)
def test_any_config_with_any_max_seq_length_is_fitted_or_refused_in_one_line(config, length):
    """finetune / predict's model-dependent bound (--max-seq-length against max_position_embeddings) on any
    config.json a directory may hold."""
    from bertkit.tasks.options import task_for_model

    d = Path(tempfile.mkdtemp(prefix="bertkit-prop-"))
    try:
        (d / "config.json").write_text(json.dumps({"max_position_embeddings": config}), encoding="utf-8")
        options = {} if length is None else {"max_seq_length": length}
        try:
            task = task_for_model("sst2", options, d)
        except BertkitError as e:
            assert "\n" not in str(e).strip()
        else:
            positions = config if isinstance(config, int) and not isinstance(config, bool) and config > 0 else None
            assert positions is None or task.max_seq_length <= positions
    finally:
        shutil.rmtree(d)


# a JSON value of any kind a hand-edited config.json may hold: huge and negative numbers, NaN, strings, nesting
ANY_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**40), 10**40)
    | st.sampled_from([0, 1, 2, 10**9, -1])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


@pytest.fixture(scope="module")
def loadable_dirs(tmp_path_factory):
    """A tiny BERT with a classifier head and a tiny ModernBERT, each with weights and vocab.txt."""
    from tinymodels import FINETUNE_VOCAB, make_model_dir, read_vocab
    from tinymodernbert import make_modernbert_dir

    from bertkit.modeling import BertForSequenceClassification

    root = tmp_path_factory.mktemp("loadable")
    bert = make_model_dir(root / "bert", FINETUNE_VOCAB, cls=BertForSequenceClassification, layers=1, num_labels=2)
    modern = make_modernbert_dir(root / "modernbert", read_vocab(FINETUNE_VOCAB), num_hidden_layers=1)
    return {"bert": bert, "modernbert": modern}


@pytest.mark.parametrize("arch", ["bert", "modernbert"])
@SETTINGS
@given(
    changes=st.dictionaries(
        st.sampled_from(
            [
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "intermediate_size",
                "vocab_size",
                "max_position_embeddings",
                "type_vocab_size",
                "pad_token_id",
                "layer_norm_eps",
                "hidden_dropout_prob",
                "hidden_act",
                "model_type",
                "architectures",
                "id2label",
                "label2id",
                "num_labels",
                "local_attention",
                "global_attn_every_n_layers",
                "norm_eps",
            ]
        ),
        ANY_JSON,
        min_size=1,
        max_size=3,
    )
)
def test_any_value_in_a_model_config_is_loaded_or_refused_in_one_line(loadable_dirs, arch, changes):
    """Item 9's kin: any value in any field of a model directory's config.json (weights and vocabulary as they
    were) ends, through the loader every inference command uses (``Encoder.from_pretrained``) and the pipeline
    loader, in a model or in one BertkitError line, never another exception, and never a model built from sizes
    the weights do not hold (10**9 layers, 10**40 hidden units: the size check comes before any allocation)."""
    from bertkit import Encoder, load_pipeline

    source = loadable_dirs[arch]
    d = Path(tempfile.mkdtemp(prefix="bertkit-prop-"))
    try:
        for f in source.iterdir():
            shutil.copy(f, d / f.name)
        config = json.loads((source / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**config, **changes}), encoding="utf-8")
        for load in (lambda: Encoder.from_pretrained(d, precision="fp32"), lambda: load_pipeline(d)):
            try:
                load()
            except BertkitError as e:
                assert str(e).strip() and "\n" not in str(e).strip(), str(e)
    finally:
        shutil.rmtree(d)


def _with_st_layout(directory: Path) -> None:
    """Make a model directory a sentence-transformers one: Transformer + mean Pooling + Normalize."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (directory / "modules.json").write_text(json.dumps(modules))
    (directory / "1_Pooling").mkdir()
    (directory / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 32}))


SIDE_FILE_KEYS = [
    "task",
    "labels",
    "max_seq_length",
    "text_column",
    "regression",
    "doc_stride",
    "name",
    "idx",
    "path",
    "type",
    "pooling_mode",
    "pooling_mode_cls_token",
]
SIDE_FILE = st.one_of(
    ANY_JSON.map(json.dumps),
    st.dictionaries(st.sampled_from(SIDE_FILE_KEYS), ANY_JSON, max_size=3).map(json.dumps),
    st.lists(st.dictionaries(st.sampled_from(["idx", "path", "type"]), ANY_JSON | st.just("../.."), max_size=3)).map(
        json.dumps
    ),
)


@pytest.mark.parametrize(
    "name", ["finetune_config.json", "modules.json", "1_Pooling/config.json", "sentence_bert_config.json"]
)
@SETTINGS
@given(text=SIDE_FILE)
def test_any_side_file_of_a_model_directory_is_read_or_refused_in_one_line(loadable_dirs, name, text):
    """The files a model directory holds beside config.json (the fine-tuned task's settings, sentence-transformers'
    modules and pooling): any JSON in them ends in a model or one BertkitError line through the loaders that read
    them (load_pipeline, Encoder.from_pretrained); the property found a null, a list or a nested list there
    ending in AttributeError, TypeError or RecursionError."""
    from bertkit import Encoder, load_pipeline

    d = Path(tempfile.mkdtemp(prefix="bertkit-prop-"))
    try:
        shutil.copytree(loadable_dirs["bert"], d, dirs_exist_ok=True)
        if name != "finetune_config.json":
            _with_st_layout(d)
        (d / name).write_text(text, encoding="utf-8")
        load = (lambda: load_pipeline(d)) if name == "finetune_config.json" else (lambda: Encoder.from_pretrained(d))
        try:
            load()
        except BertkitError as e:
            assert str(e).strip() and "\n" not in str(e).strip(), str(e)
    finally:
        shutil.rmtree(d)
