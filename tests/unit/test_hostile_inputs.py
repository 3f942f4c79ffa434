"""Issue 24's leftover hostile-input probes: each bad input is a clear error naming the file (and line or key),
never a traceback, and a wrong-dtype weight is refused rather than cast."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from bertkit.data.tasks.conll import read_conll
from bertkit.data.tasks.glue import read_glue
from bertkit.data.tasks.readers import DataError, read_table
from bertkit.data.tasks.squad import read_squad
from bertkit.data.tasks.swag import read_swag
from bertkit.embeddings import data as emb_data
from bertkit.embeddings.evaluate import read_beir
from bertkit.errors import InputError


def _latin1(path, text: str):
    path.write_bytes(text.encode("cp1252"))
    return path


@pytest.mark.parametrize(
    "reader, name, text, line",  # each text's one non-ASCII character is on ``line``
    [
        (lambda p: read_conll(p), "ner.conll", "EU B-ORG\nrejects O\n\nPar\xe9s B-LOC\n", 4),
        (lambda p: read_glue(p, "sst2"), "train.tsv", "sentence\tlabel\nfine\t1\ncaf\xe9 noir\t0\n", 3),
        (lambda p: read_table(p, "text"), "train.tsv", "text\tlabel\nok\ta\nna\xefve\tb\n", 3),
        (
            lambda p: read_table(p, "text", fmt="jsonl"),
            "train.jsonl",
            '{"text": "ok", "label": "a"}\n{"text": "r\xe9sum\xe9", "label": "b"}\n',
            2,
        ),
        (lambda p: read_swag(p), "swag.csv", "sent1,sent2,ending0,ending1,label\na,b,c,d,0\nz\xe8,b,c,d,1\n", 3),
        (
            lambda p: read_squad(p),
            "dev.json",
            '{"version": "1.1", "data": [\n{"title": "Caf\xe9", "paragraphs": []}]}',
            2,
        ),
        (lambda p: emb_data.read_texts(p), "texts.txt", "one\ntwo\nthr\xe9e\n", 3),
        (lambda p: emb_data.read_pairs(p), "pairs.tsv", "anchor\tpositive\na\tb\nc\t\xe9\n", 3),
    ],
)
@pytest.mark.parametrize("bad", ["not UTF-8", "a NUL byte"])
def test_non_text_in_a_task_file_names_file_and_line(tmp_path, reader, name, text, line, bad):
    """The file's one non-ASCII character, written as Windows-1252 (not UTF-8), or as a NUL byte (a binary file)."""
    if bad == "a NUL byte":
        path = tmp_path / name
        path.write_text(re.sub(r"[^\x00-\x7f]", "\x00", text), encoding="utf-8")
    else:
        path = _latin1(tmp_path / name, text)
    with pytest.raises(DataError, match=bad) as e:
        reader(path)
    assert e.value.path == str(path) and e.value.line == line
    assert f"{path}:{line}: " + ("byte 0x" if bad == "not UTF-8" else "a NUL byte") in str(e.value)


def test_non_utf8_beir_qrels(tmp_path):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n')
    (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "y"}\n')
    _latin1(tmp_path / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nq1\td\xe91\t1\n")
    with pytest.raises(DataError, match=r"test.tsv:2: byte 0xe9 at column 5 is not UTF-8"):
        read_beir(tmp_path)


@pytest.mark.parametrize(
    "judgements, words",
    [
        ("q9\td1\t1\n", "(1 judged queries are not there, e.g. 'q9')"),  # no judged query is in queries.jsonl
        ("q1\td1\t0\n", "queries.jsonl"),  # none relevant
    ],
)
def test_beir_qrels_without_a_relevant_judgement_of_a_known_query_name_the_file(tmp_path, judgements, words):
    """Nothing to score is refused as the folder is read (before the corpus is embedded), naming the qrels file."""
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n')
    (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "y"}\n')
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + judgements)
    with pytest.raises(DataError, match="no relevant judgement") as e:
        read_beir(tmp_path)
    assert str(e.value).startswith(str(tmp_path / "qrels" / "test.tsv")) and words in str(e.value)


def test_utf8_with_bom_still_reads(tmp_path):
    p = tmp_path / "ner.conll"
    p.write_bytes(b"\xef\xbb\xbf" + "Par\xe9s B-LOC\n".encode())
    assert read_conll(p)[0].words == ["Par\xe9s"]


def test_deeply_nested_squad_json_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000)
    with pytest.raises(DataError, match="nested too deeply") as e:
        read_squad(path)
    assert e.value.path == str(path)
    path.write_text('{"data": ' + "[" * 100_000 + "]" * 100_000 + "}")  # valid JSON, still too deep
    with pytest.raises(DataError, match="nested too deeply"):
        read_squad(path)


def test_deeply_nested_jsonl_line_names_its_line(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"text": "ok", "label": "a"}\n' + "[" * 100_000 + "\n")
    with pytest.raises(DataError, match=r"train.jsonl:2: JSON nested too deeply"):
        read_table(path, "text")


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool, torch.uint8])
def test_float_weight_stored_as_integers_is_refused_naming_key_and_dtypes(tmp_path, dtype):
    from safetensors.torch import load_file, save_file

    from bertkit import BertConfig
    from bertkit.checkpoint import CheckpointError
    from bertkit.modeling import BertModel

    config = BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=20,
        max_position_embeddings=16,
    )
    BertModel(config).save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    state = load_file(str(weights))
    key = next(k for k in state if k.endswith("attention.self.query.weight"))
    state[key] = (state[key] * 100).to(dtype)
    save_file(state, str(weights))
    with pytest.raises(
        CheckpointError,
        match=rf"dtype mismatch for '{key}': checkpoint has "
        rf"{str(dtype)[6:]}, BertModel expects float32",
    ):
        BertModel.from_pretrained(tmp_path)


def test_half_precision_weights_still_load(tmp_path):
    from safetensors.torch import load_file, save_file

    from bertkit import BertConfig
    from bertkit.modeling import BertModel

    config = BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=20,
        max_position_embeddings=16,
    )
    BertModel(config).save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    state = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in load_file(str(weights)).items()}
    save_file(state, str(weights))
    loaded = BertModel.from_pretrained(tmp_path)
    key = next(iter(k for k in state if k.endswith("query.weight")))
    torch.testing.assert_close(loaded.state_dict()[key], state[key].float())


def test_ablate_accepts_a_corpus_directory_as_pretrain_does(tmp_path, capsys):
    from bertkit.experiments.ablate import AblateConfig, AblationStudy
    from bertkit.experiments.runner import ChildResult

    corpus = tmp_path / "books"
    (corpus / "part").mkdir(parents=True)
    (corpus / "a.txt").write_text("Alice was beginning to get very tired.\n")
    (corpus / "part" / "b.txt").write_text("So she was considering in her own mind.\n")
    (corpus / ".hidden.txt").write_text("left out\n")
    calls = []

    def fake_child(argv, log, stop=None, **kw):
        calls.append(argv)
        out = Path(argv[argv.index("--output") + 1])
        out.mkdir(parents=True, exist_ok=True)
        (out / "vocab.txt").write_text("[PAD]\n")
        return ChildResult(0, False, False, 0.0, log)

    study = AblationStudy(
        AblateConfig(corpus=[str(corpus)], output=tmp_path / "out", study="nsp", steps=2), run_child=fake_child
    )
    assert study.vocabulary() == tmp_path / "out" / "vocab" / "vocab.txt"
    files = calls[0][1 : calls[0].index("--output")]
    assert files == [str(corpus / "a.txt"), str(corpus / "part" / "b.txt")]  # the directory's text files


def test_embed_input_not_utf8_names_the_line(tmp_path):
    from bertkit.commands.embed import read_inputs

    path = _latin1(tmp_path / "texts.txt", "one\ncaf\xe9\n")
    with pytest.raises(DataError, match=r"texts.txt:2: byte 0xe9 at column 4 is not UTF-8"):
        read_inputs(str(path))
    path.write_bytes(b"\xef\xbb\xbfone\ntwo\n")  # a BOM is not part of the first text
    assert read_inputs(str(path))[0] == ["one", "two"]


def test_modernbert_float_weight_stored_as_int32_is_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    from bertkit import modeling_modernbert as mb
    from bertkit.checkpoint import CheckpointError

    config = mb.ModernBertConfig(
        vocab_size=99,
        hidden_size=32,
        intermediate_size=37,
        num_hidden_layers=2,
        num_attention_heads=4,
        local_attention=8,
        max_position_embeddings=64,
        pad_token_id=0,
    )
    mb.ModernBertForMaskedLM(config).save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    state = load_file(str(weights))
    key = next(k for k in state if k.endswith("Wqkv.weight"))
    state[key] = (state[key] * 100).to(torch.int32)
    save_file(state, str(weights))
    with pytest.raises(
        CheckpointError,
        match=rf"dtype mismatch for '{key}': checkpoint has int32, "
        r"ModernBertForMaskedLM expects float32",
    ):
        mb.ModernBertForMaskedLM.from_pretrained(tmp_path)


# ------------------------------------------------------------------------------------ issue 31: tokenizer.json

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>", "<mask>"]


def _tokenizer_dir(path: Path, vocab: dict[str, int], vocab_size: int | None, normalizer: str = "null") -> Path:
    """A WordLevel tokenizer.json (RoBERTa's special tokens) as text, so that hostile ones can be written too, and a
    config.json with ``vocab_size``."""
    import json

    path.mkdir(parents=True, exist_ok=True)
    model = json.dumps({"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"})
    (path / "tokenizer.json").write_text(
        '{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [], '
        f'"normalizer": {normalizer}, "pre_tokenizer": {{"type": "Whitespace"}}, "post_processor": null, '
        f'"decoder": null, "model": {model}}}'
    )
    if vocab_size is not None:
        (path / "config.json").write_text(json.dumps({"vocab_size": vocab_size}))
    return path


def _vocab(n: int) -> dict[str, int]:
    words = SPECIALS + [f"w{i}" for i in range(n - len(SPECIALS))]
    return {w: i for i, w in enumerate(words)}


def test_a_good_tokenizer_json_still_loads(tmp_path):
    from bertkit.tokenization.fast import load_tokenizer

    tok = load_tokenizer(_tokenizer_dir(tmp_path / "ok", _vocab(20), 20))
    assert tok.encode("w3 w4").ids == [1, 8, 9, 2]


@pytest.mark.parametrize("depth", [100, 5000])
def test_a_deeply_nested_tokenizer_json_is_one_error(tmp_path, depth):
    from bertkit.tokenization.fast import load_tokenizer
    from bertkit.tokenization.vocab import VocabError

    deep = '{"type": "Sequence", "normalizers": [' * depth + '{"type": "Lowercase"}' + "]}" * depth
    d = _tokenizer_dir(tmp_path / "deep", _vocab(20), 20, normalizer=deep)
    with pytest.raises(VocabError, match=r"tokenizer.json: nested (too deeply|more than 64 levels deep)"):
        load_tokenizer(d)


def test_a_tokenizer_json_far_larger_than_the_config_is_refused_before_it_is_read(tmp_path, monkeypatch):
    import json as json_module

    from bertkit.tokenization.fast import load_tokenizer
    from bertkit.tokenization.vocab import VocabError

    d = _tokenizer_dir(tmp_path / "big", _vocab(80_000), 30)  # ~1.5 MB for a model of 30 tokens
    parsed: list[int] = []
    loads = json_module.loads
    monkeypatch.setattr(json_module, "loads", lambda text, *a, **k: parsed.append(len(text)) or loads(text, *a, **k))
    with pytest.raises(VocabError, match=r"tokenizer.json: 1\.\d MB, far more than .* vocab_size 30 takes"):
        load_tokenizer(d)
    assert all(n < 1000 for n in parsed)  # config.json only: the tokenizer.json was never parsed


def test_token_ids_past_the_config_vocab_size_are_refused(tmp_path):
    from bertkit.tokenization.fast import load_tokenizer
    from bertkit.tokenization.vocab import VocabError

    with pytest.raises(VocabError, match=r"token ids reach 39, but config.json's vocab_size is 30"):
        load_tokenizer(_tokenizer_dir(tmp_path / "more", _vocab(40), 30))


def test_tokens_sharing_one_id_are_refused(tmp_path):
    from bertkit.tokenization.fast import FastTokenizer, load_tokenizer
    from bertkit.tokenization.vocab import VocabError

    vocab = {**_vocab(20), **{f"same{i}": 7 for i in range(100)}}
    d = _tokenizer_dir(tmp_path / "dup", vocab, 200)
    with pytest.raises(VocabError, match=r"model.vocab gives id 7 to 101 tokens \('w2', 'same0'"):
        load_tokenizer(d)
    with pytest.raises(VocabError, match="gives id 7 to 101 tokens"):  # the class's own loader checks too
        FastTokenizer.from_pretrained(d)


def test_a_deeply_nested_tokenizer_json_read_directly_is_one_error(tmp_path):
    """The tokenizer.json reader that ``--vocab DIR`` reaches without load_tokenizer's checks: deep nesting is a
    VocabError naming the file, not a RecursionError."""
    from bertkit.tokenization.vocab import VocabError, load_tokenizer_json, read_json_object

    path = tmp_path / "tokenizer.json"
    path.write_text('{"model": ' + "[" * 5000 + "]" * 5000 + "}", encoding="utf-8")
    with pytest.raises(VocabError, match=r"tokenizer.json: not a tokenizer.json \(nested too deeply\)"):
        load_tokenizer_json(path)
    with pytest.raises(VocabError, match=r"tokenizer.json: cannot read .* \(nested too deeply\)"):
        read_json_object(path)


@pytest.mark.parametrize(
    "task,options,positions,want",
    [
        ("sst2", {}, 64, 64),  # the default (128) cut to the positions the model has
        ("squad", {}, 200, 200),  # SQuAD's 384 too
        ("sst2", {"max_seq_length": 32}, 64, 32),
        ("sst2", {"max_seq_length": 100_000}, 512, "--max-seq-length 100000: the model in {d} has 512 positions"),
        ("conll2003", {"max_seq_length": 65}, 64, "--max-seq-length 65: the model in {d} has 64 positions"),
    ],
)
def test_max_seq_length_fits_the_models_positions(tmp_path, task, options, positions, want):
    from bertkit.tasks.options import task_for_model

    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": positions}), encoding="utf-8")
    if isinstance(want, int):
        assert task_for_model(task, options, tmp_path).max_seq_length == want
    else:
        with pytest.raises(InputError, match=re.escape(want.format(d=tmp_path))):
            task_for_model(task, options, tmp_path)


@pytest.mark.parametrize(
    "reader, name, text, column",
    [
        (lambda p, s: read_glue(p, "sst2", s), "train.tsv", "sentence\tlabel\nfine\t1\n   \t0\n", "sentence"),
        (
            lambda p, s: read_glue(p, "mrpc", s),
            "train.tsv",
            "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\ta\tb\n0\t3\t4\tc\t\n",
            "#2 String",
        ),
        (lambda p, s: read_table(p, "text", skip_bad_rows=s), "train.tsv", "text\tlabel\nok\ta\n\tb\n", "text"),
        (
            lambda p, s: read_table(p, "text", fmt="jsonl", skip_bad_rows=s),
            "train.jsonl",
            '{"text": "ok", "label": "a"}\n{"text": " ", "label": "b"}\n',
            "text",
        ),
        (
            lambda p, s: read_swag(p, s),
            "swag.csv",
            "sent1,sent2,ending0,ending1,label\na,b, ,d,0\nc,b,c,d,1\n",
            "ending0",
        ),
    ],
)
def test_a_row_with_empty_text_is_a_bad_row_naming_line_and_column(tmp_path, reader, name, text, column):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    line = 3 if name.endswith(".tsv") else 2  # swag.csv's and the JSONL's is on line 2
    with pytest.raises(DataError, match=re.escape(f"{path}:{line}: empty text in column {column!r}")):
        reader(path, False)
    assert len(reader(path, True)) == 1  # --skip-bad-rows leaves it out


def _break_tagger(d: Path, how: str) -> None:
    """Damage a saved feature-based tagger's files ``how``."""
    from safetensors.torch import load_file, save_file

    config = json.loads((d / "tagger_config.json").read_text())
    if how == "torn config":
        (d / "tagger_config.json").write_text('{"labels": ')
    elif how == "config without labels":
        (d / "tagger_config.json").write_text(json.dumps({k: v for k, v in config.items() if k != "labels"}))
    elif how == "layers not integers":
        (d / "tagger_config.json").write_text(json.dumps({**config, "layers": ["last"]}))
    elif how == "truncated weights":
        (d / "tagger.safetensors").write_bytes((d / "tagger.safetensors").read_bytes()[:100])
    elif how == "foreign weights":
        save_file({k + "_x": v for k, v in load_file(d / "tagger.safetensors").items()}, d / "tagger.safetensors")
    else:  # weights of another size than the config says
        (d / "tagger_config.json").write_text(json.dumps({**config, "hidden": config["hidden"] + 1}))


@pytest.mark.parametrize(
    "how, file, words",
    [
        ("torn config", "tagger_config.json", "not valid JSON"),
        ("config without labels", "tagger_config.json", "expected 'labels'"),
        ("layers not integers", "tagger_config.json", "'layers' (integers)"),
        ("truncated weights", "tagger.safetensors", "not a safetensors file"),
        ("foreign weights", "tagger.safetensors", "missing ['rnn."),
        ("another size", "tagger.safetensors", "does not fit"),
    ],
)
def test_a_damaged_feature_based_tagger_is_one_error_naming_its_file(tmp_path, how, file, words):
    """evaluate / predict / serve load a feature-based tagger through FeatureTagger.from_pretrained: each damaged
    file is an InputError naming it (were a JSONDecodeError, KeyError, SafetensorError and ValueError)."""
    from tinymodels import tiny_config

    from bertkit.modeling import BertModel
    from bertkit.tasks.tagging import FeatureTagger

    torch.manual_seed(0)
    FeatureTagger(BertModel(tiny_config(20, layers=1)), ["O", "B-X"], [-1], "bilstm", 8).save_pretrained(tmp_path)
    FeatureTagger.from_pretrained(tmp_path)  # whole, it loads
    _break_tagger(tmp_path, how)
    with pytest.raises(InputError, match=re.escape(words)) as e:
        FeatureTagger.from_pretrained(tmp_path)
    assert str(e.value).startswith(str(tmp_path / file)) and len(str(e.value).splitlines()) == 1


_STSB = "index\tsentence1\tsentence2\tscore\n0\tx\ty\t2.5\n"


def _read_scored(p, skip):
    return emb_data.read_scored(p, skip_bad_rows=skip)


@pytest.mark.parametrize(
    "reader, name, text, says",  # the bad value is on line 3 (line 2 of a JSONL file)
    [
        (
            lambda p, s: read_table(p, "text", regression=True, skip_bad_rows=s),
            "train.tsv",
            "text\tlabel\nok\t0.5\nfine\tnan\n",
            "label 'nan' in column 'label' is not a finite number",
        ),
        (lambda p, s: read_glue(p, "stsb", s), "train.tsv", _STSB + "1\ta\tb\t-inf\n", "label '-inf' is not a finite"),
        (_read_scored, "dev.tsv", "sentence1\tsentence2\tscore\na\tb\t1\nc\td\tinf\n", "score 'inf' in column 'score'"),
        (
            lambda p, s: read_table(p, "text", fmt="jsonl", skip_bad_rows=s),
            "train.jsonl",
            '{"text": "ok", "label": "a"}\n{"text": null, "label": "b"}\n',
            "field 'text' is null, not a text",
        ),
        (
            lambda p, s: read_table(p, "text", fmt="jsonl", skip_bad_rows=s),
            "train.jsonl",
            '{"text": "ok", "label": "a"}\n{"text": {"a": 1}, "label": "b"}\n',
            "field 'text' is an object, not a text",
        ),
        (
            lambda p, s: read_table(p, "text", fmt="jsonl", skip_bad_rows=s),
            "train.jsonl",
            '{"text": "ok", "label": "a"}\n{"text": "fine", "label": ["a"]}\n',
            "label in column 'label' is a list, not one class name",
        ),
        (  # its negative was dropped in silence: the first row decides the optional fields
            lambda p, s: emb_data.read_pairs(p, skip_bad_rows=s),
            "pairs.jsonl",
            '{"anchor": "a", "positive": "b"}\n{"anchor": "c", "positive": "d", "negative": "e"}\n',
            "field 'negative', which the first row (line 1) lacks",
        ),
    ],
)
def test_a_value_of_the_wrong_kind_is_a_bad_row_naming_line_and_field(tmp_path, reader, name, text, says):
    """Issue 54, item 10: a label or score that parses but is not a finite number (nan, inf: a NaN loss), and a JSONL
    text or label of another JSON type (null read as the text 'None' before), are bad rows naming file, line, field."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    line = 2 if name.endswith(".jsonl") else 3
    with pytest.raises(DataError, match=re.escape(f"{path}:{line}: {says}")):
        reader(path, False)
    assert len(reader(path, True)) == 1  # --skip-bad-rows leaves it out


@pytest.mark.parametrize(
    "reader, name, text",  # a 200,000-character text in one cell (csv's own limit is 131,072)
    [
        (lambda p: read_table(p, "text"), "train.csv", "text,label\nok,a\n{long},b\n"),
        (lambda p: read_swag(p), "swag.csv", "sent1,sent2,ending0,ending1,label\na,b,c,d,0\n{long},b,c,d,1\n"),
        (lambda p: emb_data.read_pairs(p), "pairs.tsv", "anchor\tpositive\na\tb\nc\t{long}\n"),
    ],
)
def test_a_long_text_in_one_cell_is_read(tmp_path, reader, name, text):
    """Issue 54, item 10: a 10 MB row of a CSV / TSV file stopped the readers with csv's traceback ('field larger
    than field limit'), where the same text alone on a line is read."""
    path = tmp_path / name
    path.write_text(text.replace("{long}", "word " * 40_000), encoding="utf-8")
    assert len(reader(path)) == 2


@pytest.mark.parametrize("column", [9, -9, 0])
def test_a_conll_tag_column_the_file_lacks_names_the_flag(tmp_path, column):
    path = tmp_path / "ner.conll"
    path.write_text("EU NNP B-ORG\nrejects VBZ O\n", encoding="utf-8")
    with pytest.raises(DataError, match=re.escape(f"{path}:1: --tag-column {column}: the file has 3 columns")):
        read_conll(path, tag_column=column)
    assert read_conll(path, tag_column=2)[0].tags == ["B-ORG", "O"]  # a column it has


@pytest.mark.parametrize(
    "question, says",
    [
        ({"id": "b", "question": "who?", "answers": [{"text": "", "answer_start": 0}]}, "answer '' at offset 0: empty"),
        (
            {"id": "b", "question": "who?", "answers": [{"text": "Bob.", "answer_start": -4}]},
            "answer 'Bob.' at offset -4: a negative offset",  # the slice [-4:0] would not match, [-4:] would
        ),
        ({"id": "b", "question": " ", "answers": [{"text": "Bob", "answer_start": 0}]}, "the question is empty"),
        (
            {"id": "a", "question": "who?", "answers": [{"text": "Bob", "answer_start": 0}]},
            "id a repeats article 0 paragraph 0 question 0's",  # predictions and metrics are keyed by the id
        ),
    ],
)
def test_a_squad_question_that_cannot_be_trained_on_names_its_line_and_id(tmp_path, question, says):
    """Issue 54, item 10: an empty answer span, a negative offset, an empty question and a repeated id were read."""
    first = {"id": "a", "question": "who?", "answers": [{"text": "Bob", "answer_start": 0}]}
    para = {"context": "Bob came. Ann left Bob.", "qas": [first, question]}
    path = tmp_path / "train.json"
    path.write_text(json.dumps({"version": "1.1", "data": [{"paragraphs": [para]}]}, indent=1), encoding="utf-8")
    qid = question["id"]
    line = [n for n, text in enumerate(path.read_text().splitlines(), 1) if f'"{qid}"' in text][0]
    with pytest.raises(
        DataError, match=re.escape(f"{path}:{line}: article 0 paragraph 0 question 1 (id {qid}): {says}")
    ):
        read_squad(path)
    assert len(read_squad(path, skip_bad_rows=True)[0]) == 1


@pytest.mark.parametrize(
    "task, name, text, says",
    [
        ("classification", "train.csv", "text,label\nok,pos\nfine,pos\n", "every row has the label 'pos'"),
        ("tagging", "train.conll", "EU O\nrejects O\n\nBob O\n", "every token has the tag 'O'"),
    ],
)
def test_a_training_file_with_one_label_is_refused_naming_it(tmp_path, task, name, text, says):
    """A one-label file made a 1-output head (transformers reads a 1-label classifier as regression; a 1-tag tagger's
    loss is 0): nothing was told apart."""
    from bertkit.tasks import get_task

    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    task = get_task(task)
    with pytest.raises(InputError, match=re.escape(f"{path}: {says}")):
        task.fit_labels(task.read(path))
