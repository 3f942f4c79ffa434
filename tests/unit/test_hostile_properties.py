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
