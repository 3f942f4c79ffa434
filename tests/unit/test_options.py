"""options.option(): flags built from dataclass fields (defaults, types, bools, paired bools, KEY=VALUE dicts, choices,
skip, groups in the help) and read back into the dataclass."""

import argparse
from dataclasses import dataclass

import pytest

from bertkit.options import add_options, from_args, option


def _dur(text: str) -> float:
    return float(text.rstrip("s"))


@dataclass
class _Args:
    lr: float = option(2e-5, help="peak lr", group="training")
    steps: int | None = option(None, help="max steps")
    precision: str = option("auto", choices=("auto", "fp32"), help="precision")
    nsp: bool = option(True, help="MLM only")
    quiet: bool = option(False, help="no output")
    budget: float | None = option(None, parse=_dur, metavar="DURATION")
    corpus: list[str] = option(default_factory=list, nargs="+", help="files")
    hidden: int = option(3, skip=True)


def _parse(argv):
    p = argparse.ArgumentParser()
    add_options(p, _Args)
    return p, from_args(_Args, p.parse_args(argv))


def test_defaults_come_from_the_dataclass():
    _, a = _parse([])
    assert a == _Args()


def test_flags_types_and_bools():
    _, a = _parse(["--lr", "1e-3", "--steps", "7", "--no-nsp", "--quiet", "--budget", "90s", "--corpus", "a", "b"])
    assert (a.lr, a.steps, a.nsp, a.quiet, a.budget, a.corpus) == (1e-3, 7, False, True, 90.0, ["a", "b"])


def test_choices_and_skip_are_enforced():
    with pytest.raises(SystemExit):
        _parse(["--precision", "fp8"])
    with pytest.raises(SystemExit):
        _parse(["--hidden", "4"])


def test_help_shows_defaults_and_groups():
    p, _ = _parse([])
    text = p.format_help()
    assert "training:" in text and "(default: 2e-05)" in text and "--no-nsp" in text


def test_shared_options_have_one_spelling_and_old_ones_still_work(caplog):
    """--clip and --warmup-fraction are the names everywhere; --max-grad-norm and --warmup-proportion still parse into
    them, with a deprecation warning."""
    from bertkit.recipes.finetune import FinetuneArgs

    p = argparse.ArgumentParser()
    add_options(p, FinetuneArgs)
    new = from_args(FinetuneArgs, p.parse_args(["--clip", "0.5", "--warmup-fraction", "0.2"]))
    assert not caplog.records
    old = from_args(FinetuneArgs, p.parse_args(["--max-grad-norm", "0.5", "--warmup-proportion", "0.2"]))
    assert (old.clip, old.warmup_fraction) == (new.clip, new.warmup_fraction) == (0.5, 0.2)
    assert [r.getMessage() for r in caplog.records] == [
        "--max-grad-norm is deprecated: use --clip",
        "--warmup-proportion is deprecated: use --warmup-fraction",
    ]
    assert "--max-grad-norm" not in p.format_help()


def test_the_training_commands_share_each_options_definition():
    import dataclasses

    from bertkit.embeddings.recipe import EmbeddingTrainArgs
    from bertkit.recipes.finetune import FinetuneArgs
    from bertkit.recipes.pretrain import PretrainConfig
    from bertkit.tasks.options import RunOptions

    shared = ("lr", "warmup_fraction", "clip", "max_steps", "seed", "device", "precision", "threads")
    classes = (PretrainConfig, FinetuneArgs, EmbeddingTrainArgs)
    for name in shared:
        fields = [{f.name: f for f in dataclasses.fields(c)}.get(name) for c in classes]
        assert all(fields), name
        helps = {f.metadata["help"] for f in fields}
        assert len(helps) == 1 or name in ("lr", "max_steps", "seed"), (name, helps)  # their help says the default
    assert {f.name for f in dataclasses.fields(RunOptions)} >= {"device", "precision"}


def test_passthrough_flags_come_back_as_the_argv_given():
    from bertkit.options import to_argv

    p = argparse.ArgumentParser()
    add_options(p, _Args, passthrough=True)
    args = p.parse_args(["--lr", "1e-3", "--no-nsp", "--corpus", "a", "b"])
    assert set(vars(args)) == {"lr", "nsp", "corpus"}  # nothing defaulted
    assert to_argv(_Args, args) == ["--lr", "0.001", "--no-nsp", "--corpus", "a", "--corpus", "b"]


def test_a_list_of_negative_numbers_is_a_value_not_a_flag():
    from bertkit.cli import join_negative_lists

    assert join_negative_lists(["embed", "--layers", "-1,-2,-3", "--x", "-1"]) == [
        "embed",
        "--layers=-1,-2,-3",
        "--x",
        "-1",
    ]


@pytest.mark.parametrize(
    "text,words",
    [
        ("--lr '1e-3", "cannot split it into flags (No closing quotation)"),
        ("--batch-size 8 --output /tmp/elsewhere", "--output is set by this command itself"),
        ("--seed=3", "--seed is set by this command itself"),
        ("--mod ../other", "--mod is set by this command itself"),  # argparse would expand it to --model
    ],
)
def test_a_string_of_flags_handed_on_refuses_bad_quoting_and_the_callers_own_flags(text, words):
    from bertkit.options import flag_string

    with pytest.raises(argparse.ArgumentTypeError, match=words.replace("(", r"\(").replace(")", r"\)")):
        flag_string(("--output", "--model", "--seed"))(text)
    assert flag_string(("--output", "--model"))("--batch-size 8 --label 'a b'") == [
        "--batch-size",
        "8",
        "--label",
        "a b",
    ]


@pytest.mark.parametrize(
    "text,words",
    [
        ("-o /tmp/elsewhere", "unrecognized arguments: -o /tmp/elsewhere"),
        ("--batch-size abc", "'--batch-size abc': argument --batch-size: invalid int value: 'abc'"),
        ("--bogus 1", "unrecognized arguments: --bogus 1"),  # refused here, not in each run handed it
        ("-- --batch-size 8", "unrecognized arguments: -- --batch-size 8"),
    ],
)
def test_a_string_of_flags_is_parsed_with_the_flags_of_the_command_it_goes_to(text, words):
    """flag_string(configure=...): the other command's parser decides (its flags, their values) when the caller's
    command line is parsed; the flags it requires are the caller's to give."""
    from bertkit.options import flag_string

    def configure(parser):
        parser.add_argument("--output", required=True)
        parser.add_argument("--batch-size", type=int, default=32)
        parser.add_argument("--quiet", action="store_true")

    split = flag_string(("--output",), configure)
    with pytest.raises(argparse.ArgumentTypeError) as e:
        split(text)
    assert words in str(e.value) and "\n" not in str(e.value)
    assert split("--batch-size 8 --quiet") == ["--batch-size", "8", "--quiet"]  # --output required there, not here


def test_check_bounds_holds_a_config_made_in_code_to_the_flags_table():
    """options.check_bounds: the range a numeric flag is parsed with (BOUNDS by name, a field's own bounds first,
    else >= 0) refuses the same value in a dataclass made in code, naming the flag; unset fields pass."""
    from bertkit.options import check_bounds

    @dataclass
    class Cfg:
        lr: float | None = option(None)  # BOUNDS: > 0
        every: int = option(5, bounds=(1, 10, False, False))  # its own
        count: int = option(0)  # default: >= 0
        name: str = option("x")

    check_bounds(Cfg(), ValueError)
    check_bounds(Cfg(lr=1e-3, every=10), ValueError)
    for bad, says in (
        ({"lr": 0.0}, "--lr must be > 0, got 0.0"),
        ({"every": 11}, "--every must be >= 1 and <= 10"),
        ({"count": -1}, "--count must be >= 0, got -1"),
        ({"lr": float("nan")}, "--lr must be > 0"),
    ):
        with pytest.raises(ValueError, match=says):
            check_bounds(Cfg(**bad), ValueError)


def test_paired_bools_and_key_value_dicts():
    """A ``bool | None`` with ``negative``: --nsp True, --no-nsp False, neither None, both refused. A ``dict`` field
    (key_value_option): each --set KEY=VALUE one key, the value read as JSON (else kept as text), the last of a key
    kept; a fresh dict per parse (the default untouched); an item with no '=' refused naming it."""
    from typing import Any

    from bertkit.options import key_value_option, parse_key_value

    @dataclass
    class Cfg:
        nsp: bool | None = option(None, negative=("--no-nsp", "MLM only"), help="NSP")
        overrides: dict[str, Any] = key_value_option("override a field", flag="--set")

    p = argparse.ArgumentParser()
    add_options(p, Cfg)
    read = lambda *argv: from_args(Cfg, p.parse_args(list(argv)))  # noqa: E731
    assert [read(*a).nsp for a in ([], ["--nsp"], ["--no-nsp"])] == [None, True, False]
    got = read("--set", "layers=2", "--set", "act=gelu", "--set", 'ids={"a": [1]}', "--set", "layers= 3")
    assert got.overrides == {"layers": 3, "act": "gelu", "ids": {"a": [1]}}
    assert read().overrides == {} and p.get_default("overrides") == {}
    assert "KEY=VALUE" in p.format_help() and "(default: {})" not in p.format_help()
    with pytest.raises(SystemExit):
        p.parse_args(["--nsp", "--no-nsp"])
    with pytest.raises(argparse.ArgumentTypeError, match="'layers': expected KEY=VALUE"):
        parse_key_value("layers")
