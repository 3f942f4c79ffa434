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
    from bertkit.embeddings.data import read_texts
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
