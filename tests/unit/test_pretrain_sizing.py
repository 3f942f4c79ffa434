"""The budget recipe sized to the corpus and the machine (issue 62, item 4): the corpus's text size read from its
files' headers, and the size chosen from how often the budget would read the corpus over."""

from __future__ import annotations

import gzip
import json

import pytest
import zstandard

from bertkit.recipes.pretrain import PretrainConfig, resolve, sizing, tables

TEXT = ("The quick brown fox jumps over the lazy dog. " * 2000).encode()


@pytest.mark.parametrize(
    "write, expected",
    [
        (lambda: TEXT, len(TEXT)),
        (lambda: gzip.compress(TEXT), len(TEXT)),
        (lambda: zstandard.ZstdCompressor().compress(TEXT), len(TEXT)),
        # a zstd frame that does not record its size: the compressed size times the ratio
        (lambda: zstandard.ZstdCompressor(write_content_size=False).compress(TEXT), None),
    ],
    ids=["plain", "gzip", "zstd", "zstd-unsized"],
)
def test_text_bytes_reads_the_decompressed_size_from_the_header(tmp_path, write, expected):
    path = tmp_path / "corpus.txt"
    path.write_bytes(write())
    if expected is None:
        expected = int(path.stat().st_size * sizing.COMPRESSION_RATIO)
    assert sizing.text_bytes(path) == expected


def test_corpus_tokens_counts_every_file_and_gives_up_on_what_it_cannot_list(tmp_path):
    (tmp_path / "a.txt").write_bytes(TEXT)
    (tmp_path / "b.txt.gz").write_bytes(gzip.compress(TEXT))
    assert sizing.corpus_tokens([tmp_path]) == int(2 * len(TEXT) / sizing.BYTES_PER_TOKEN)
    assert sizing.corpus_tokens([tmp_path / "missing"]) is None


def test_choose_sizes_up_where_the_larger_reads_enough_or_the_smaller_would_repeat():
    tiny, mini = sizing.LADDER
    assert tiny == tables.bert_size(tables.MODEL_DEFAULTS["budget"]["model"])  # the ladder starts at the recipe's
    few, enough = sizing.MINI_FROM_TOKENS * 0.9, sizing.MINI_FROM_TOKENS
    big = sizing.Sizing(100_000_000_000, {tiny: 5 * few, mini: few})  # read far less than once, mini too little
    assert sizing.choose(big)[0] == tiny
    size, why = sizing.choose(sizing.Sizing(100_000_000_000, {tiny: 5 * enough, mini: enough}))
    assert size == mini and why.endswith(f"at least {enough / 1e6:.1f}M tokens for the larger")
    small = sizing.Sizing(100_000, {tiny: 10e6, mini: 2e6})  # tiny would read it 100 times: a size up
    size, why = sizing.choose(small)
    assert size == mini and "the smaller would read it 100 times" in why and "20 passes" in why
    unknown = sizing.Sizing(None, {tiny: 10e6, mini: 2e6})  # a table corpus: its size unknown, the reads alone
    size, why = sizing.choose(unknown)
    assert size == tiny and why == "the budget reads about 10.0M tokens (the corpus's size unknown)"
    assert sizing.choose(sizing.Sizing(None, {tiny: 5 * enough, mini: enough}))[0] == mini


def test_resolve_sizes_the_budget_to_the_corpus_and_says_why(tmp_path, monkeypatch):
    (tmp_path / "corpus.txt").write_bytes(TEXT)  # 90 kB: about 22,500 tokens
    rates = {}
    monkeypatch.setattr(sizing, "tokens_per_second", lambda config, *a: rates[config["hidden_size"]])
    cfg = lambda seconds: resolve(PretrainConfig(corpus=[str(tmp_path)], output="o", max_time=seconds))  # noqa: E731
    rates.update({128: 1.0, 256: 0.2})  # tiny reads 54 tokens in a minute, mini 324 in 30: tiny at any budget
    assert cfg(60).model_size == "modernbert-tiny" and cfg(1800).model_size == "modernbert-tiny"
    rates.update({128: 1.0, 256: 10_000.0})  # mini reads 16.2M tokens in 30 minutes: enough for the larger
    assert cfg(1800).model_size == "modernbert-mini" and "for the larger" in cfg(1800).chosen
    named = resolve(PretrainConfig(corpus=[str(tmp_path)], output="o", max_time=1800, model_size="modernbert-tiny"))
    assert named.model_size == "modernbert-tiny" and "for the larger" not in named.chosen  # a named size stays
    rates.update({128: 10_000.0, 256: 2_000.0})  # tiny would read it 24 times in a minute
    chosen = cfg(60)
    assert chosen.arch == "modernbert" and chosen.model_size == "modernbert-mini"
    assert "the corpus holds about 22.5k tokens" in chosen.chosen
    assert "the smaller would read it 24 times" in chosen.chosen
    # a run resumed keeps the size it chose, whatever the probe measures now (another size is another run)
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"config": {"model_size": "modernbert-tiny"}}))
    resumed = resolve(PretrainConfig(corpus=[str(tmp_path)], output=str(out), max_time=60, resume=True))
    assert resumed.model_size == "modernbert-tiny" and "the size the resumed run chose" in resumed.chosen
    assert resolve(PretrainConfig(corpus=[str(tmp_path)], output=str(out), max_time=60)).model_size == "modernbert-mini"
    # a size the user names, another architecture or a GPU: not sized
    assert resolve(PretrainConfig(corpus=[str(tmp_path)], output="o", max_time=60, arch="bert")).model_size == (
        "bert-tiny"
    )


def test_the_rate_estimate_reads_a_scheduled_mask_rate_as_its_mean(tmp_path, monkeypatch):
    """The step's FLOPs at the schedule's mean rate (``--mask-prob 0.4:0.15`` once failed the run's resolve), on
    this CPU's measured peak (fixed here): more masked positions, more head FLOPs, fewer tokens a second."""
    from bertkit.recipes.pretrain import flops

    (tmp_path / "corpus.txt").write_bytes(TEXT)
    monkeypatch.setattr(flops, "cpu_peak", lambda precision: 1e11)
    seen = lambda p: sizing.estimate(  # noqa: E731
        PretrainConfig(corpus=[str(tmp_path)], output="o", max_time=60, mask_prob=p), "modernbert", 60, 8000
    ).reads[sizing.LADDER[0]]
    assert seen("0.4:0.2") == pytest.approx(seen(0.3)) and seen(0.15) > seen(0.3) > seen(0.45)


def test_the_budget_builds_its_own_size_at_its_own_shape_and_says_so(tmp_path, monkeypatch):
    """tiny, as the budget chooses it, at ``tables.BUDGET_SHAPES``' depth (over its preset); an override the user
    gives wins, a size the user names is its preset, and the rate estimate counts the layers the run builds."""
    (tmp_path / "corpus.txt").write_bytes(TEXT)
    seen = {}  # hidden size -> the config last estimated at that width
    monkeypatch.setattr(
        sizing, "tokens_per_second", lambda config, *a: seen.update({config["hidden_size"]: config}) or 1.0
    )
    run = lambda **kw: resolve(PretrainConfig(corpus=[str(tmp_path)], output="o", max_time=60, **kw))  # noqa: E731
    shape = tables.BUDGET_SHAPES["bert-tiny"]
    chosen = run()
    assert chosen.model_size == "modernbert-tiny" and chosen.config_overrides == shape
    assert "modernbert-tiny with num_hidden_layers=6 (" in chosen.chosen
    assert seen[128]["num_hidden_layers"] == shape["num_hidden_layers"]  # the estimate's tiny is the one built
    own = run(config_overrides={"num_hidden_layers": 2})
    assert own.config_overrides == {"num_hidden_layers": 2} and "with num_hidden_layers" not in own.chosen
    assert seen[128]["num_hidden_layers"] == 2
    named = run(model_size="modernbert-tiny")
    assert named.config_overrides == {} and "with num_hidden_layers" not in named.chosen
    assert run(arch="bert").config_overrides == {}  # another architecture: its preset
    variant = run(arch="modernbert-elc")  # a variant of the recipe's architecture: the recipe's size and shape
    assert variant.arch == "modernbert-elc" and variant.config_overrides == shape
