"""Issue 31, item 4: every numeric flag of every command is checked when the command line is parsed: nan, inf and
values out of its range (``bertkit.options.BOUNDS``: 0 where 0 means nothing, -1 everywhere but a few signed
flags) are one line naming the flag, exit 2, before anything is read or built. So are unknown
``--config-override`` keys and output paths that cannot be written."""

from __future__ import annotations

import argparse

import pytest

from bertkit.cli import COMMANDS, VARIANTS, CommandParser, UsageError, configure, main

MODULES = sorted(COMMANDS) + sorted(v.module for variants in VARIANTS.values() for v in variants)


def _configured(name: str, monkeypatch) -> tuple[CommandParser, list[argparse.Action]]:
    """``bertkit NAME``'s parser and every action added to it (groups included)."""
    actions: list[argparse.Action] = []
    add = argparse._ActionsContainer.add_argument

    def spy(self, *args, **kwargs):
        action = add(self, *args, **kwargs)
        actions.append(action)
        return action

    monkeypatch.setattr(argparse._ActionsContainer, "add_argument", spy)
    parser = CommandParser(prog=f"bertkit {name}")
    configure(COMMANDS[name][0] if name in COMMANDS else name, parser)
    monkeypatch.setattr(argparse._ActionsContainer, "add_argument", add)
    return parser, actions


def _required_argv(actions: list[argparse.Action]) -> list[str]:
    """Values for the required flags and positionals, so that a parse fails only for the flag under test."""
    argv: list[str] = []
    for a in actions:
        if a.option_strings and not a.required:
            continue
        value = str(a.choices[0]) if a.choices else "x"
        if hasattr(a.type, "bounds"):  # a required number (vocab extend --add)
            value = _legal(a.type.bounds, a.type.__name__ == "int")
        values = [value] * (a.nargs if isinstance(a.nargs, int) else 1)
        argv += ([a.option_strings[0]] if a.option_strings else []) + values
    return argv


def _legal(bounds: tuple, integer: bool) -> str:
    low, high, low_open, _high_open = bounds
    if low is None:
        return "-1"
    if not low_open:
        return str(low)
    if high is not None:
        return str((low + high) / 2)
    return str(low + 1) if integer else str(low + 0.5)


@pytest.mark.parametrize("name", MODULES)
def test_every_numeric_flag_refuses_nan_inf_and_values_out_of_range(name, monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)  # output paths given as "x" are probed here
    parser, actions = _configured(name, monkeypatch)
    plain = [a.option_strings for a in actions if a.type in (int, float)]
    assert not plain, f"numeric flags without bertkit.options.number's checks: {plain}"
    base = _required_argv(actions)
    parser.parse_args(base)  # the required values alone parse
    checked = [a for a in actions if hasattr(a.type, "bounds") and a.option_strings and a.nargs is None]
    for a in checked:
        flag, integer = a.option_strings[0], a.type.__name__ == "int"
        low, high, low_open, _ = a.type.bounds
        bad = ["nan", "inf", "-inf"]
        if low is not None:
            bad.append(str(low - 1))
        if low is not None and low_open:
            bad.append(str(low))
        if high is not None:
            bad.append(str(high + 1))
        for value in bad:
            with pytest.raises(UsageError) as e:
                parser.parse_args([*base, f"{flag}={value}"])
            err = str(e.value)
            assert "\n" not in err and f"error: {flag} " in err, (flag, value, err)
        good = _legal(a.type.bounds, integer)
        assert getattr(parser.parse_args([*base, flag, good]), a.dest) == (int(good) if integer else float(good))


@pytest.mark.parametrize(
    "argv, named",
    [
        (["finetune", "--task", "sst2", "--train", "t", "--model", "m", "--output", "o", "--lr", "-1"], "--lr"),
        (
            ["finetune", "--task", "sst2", "--train", "t", "--model", "m", "--output", "o", "--epochs", "nan"],
            "--epochs",
        ),
        (["finetune", "--task", "sst2", "--train", "t", "--model", "m", "--output", "o", "--lr", "0"], "--lr"),
        (["pretrain", "--corpus", "c", "--output", "o", "--max-steps", "0"], "--max-steps"),
        (["pretrain", "--corpus", "c", "--output", "o", "--max-steps", "1", "--batch-size", "inf"], "--batch-size"),
        (["serve", "--model", "m", "--max-batch-size", "0"], "--max-batch-size"),
        (["serve", "--model", "m", "--max-inputs", "-1"], "--max-inputs"),
        (["serve", "--model", "m", "--request-timeout", "0"], "--request-timeout"),
        (["prepare", "--corpus", "c", "--vocab", "v", "--eval-fraction", "1.5"], "--eval-fraction"),
        (["prepare", "--corpus", "c", "--vocab", "v", "--output", "/proc/x"], "--output /proc/x"),
        (["finetune", "--task", "sst2", "--train", "t", "--model", "m", "--output", "/proc/x"], "--output /proc/x"),
        (["pretrain", "--corpus", "c", "--output", "o", "--max-steps", "1", "--config-override", "bogus=1"], "bogus"),
        (
            ["pretrain", "--corpus", "c", "--output", "o", "--max-steps", "1", "--config-override", "hidden_size=-5"],
            "hidden_size",
        ),
        (  # issue 54: was 'an input file nests too deeply' (RecursionError), naming no flag
            ["pretrain", "--corpus", "c", "--output", "o", "--max-steps", "1"]
            + ["--config-override", "hidden_size=" + "[" * 100_000 + "]" * 100_000],
            "--config-override hidden_size: the value nests too deeply",
        ),
        (  # a bare error of the config class names the one override it is about, not every override given
            ["pretrain", "--corpus", "c", "--output", "o", "--max-steps", "1"]
            + ["--config-override", "hidden_size=64", "--config-override", 'id2label={"a": 1}'],
            "--config-override: BertConfig.id2label must be an object of label ids",
        ),
    ],
)
def test_the_issue_probes_are_one_line_and_exit_2(argv, named, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and named.split()[0] in err, err
    assert named in err or " " not in named.strip(), err  # a phrase is checked whole
    assert "Traceback" not in err and not (tmp_path / "o").exists()


def test_an_output_path_under_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    assert main(["vocab", "in.txt", "-o", str(tmp_path / "file" / "out")]) == 2
    assert "is a file, not a directory" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # the probe leaves nothing behind
