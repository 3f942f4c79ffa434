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
