"""Issue 61, item 1: every command is one config dataclass plus one function that takes it. Walks every command
(and each variant ``bertkit.cli.VARIANTS`` picks) and checks that ``bertkit X -h`` lists only flags of X's config,
and that every field of that config is read (an attribute of that name is read in the command's module or the
modules of its config's classes). Also: the one dispatch mechanism picks the module a command line names."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import inspect
import sys
from pathlib import Path

import pytest

from bertkit.cli import COMMANDS, VARIANTS, configure, select
from bertkit.options import field_flags, option

MODULES = sorted({m for m, _ in COMMANDS.values()} | {v.module for vs in VARIANTS.values() for v in vs})


def listed_flags(module) -> set[str]:
    """Every flag (option string or positional name) ``bertkit X -h`` shows, but -h."""
    parser = argparse.ArgumentParser(prog="x")
    configure(module, parser)
    out = set()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        out |= set(action.option_strings) if action.option_strings else {action.dest}
    return out


def homes(module) -> list[Path]:
    """The command's module, and the package of each class of its config (where the function hands it: the study's
    runner, the server's routes)."""
    out = [Path(module.__file__)]
    for cls in module.CONFIG.__mro__[:-1]:
        package = cls.__module__.split(".")[1]  # bertkit.serve.core.service -> serve
        if package != "commands":
            out += sorted((Path(module.__file__).parents[1] / package).rglob("*.py"))
    return out


def attributes_read(*sources: str) -> set[str]:
    """Every ``x.NAME`` in ``sources``."""
    names = set()
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Attribute):
                names.add(node.attr)
    return names


@pytest.mark.parametrize("name", MODULES)
def test_help_lists_only_the_flags_the_command_reads(name):
    module = importlib.import_module(name)
    assert dataclasses.is_dataclass(module.CONFIG) and module.CONFIG.__dataclass_params__.frozen, name
    assert list(inspect.signature(module.run).parameters), name
    flags = field_flags(module.CONFIG)
    listed = listed_flags(module)
    if hasattr(module, "configure"):  # kept for callers that build their own parser: the same flags
        parser = argparse.ArgumentParser(prog="x")
        module.configure(parser)
        assert {s for a in parser._actions for s in a.option_strings} - {"-h", "--help"} <= listed, name
    of_fields = {flag for names in flags.values() for flag in names}
    assert listed <= of_fields, f"{name}: flags of no config field: {sorted(listed - of_fields)}"
    assert {names[0] for names in flags.values()} <= listed, name  # and every field's flag is listed
    read = attributes_read(*(p.read_text(encoding="utf-8") for p in homes(module)))
    unread = [field for field in flags if field not in read]
    assert not unread, f"{name}: flags no code reads: {unread}"


def test_the_walk_sees_a_flag_no_code_reads():
    @dataclasses.dataclass(frozen=True)
    class Config:
        kept: int = option(1, help="read")
        dropped: bool = option(False, help="never read")

    module = type(sys)("fake")
    module.CONFIG = Config
    assert listed_flags(module) == {"--kept", "--dropped"}
    read = attributes_read("def run(cfg):\n    return cfg.kept\n")
    assert [field for field in field_flags(Config) if field not in read] == ["dropped"]


@pytest.mark.parametrize(
    "argv,module,rest",
    [
        (["vocab", "extend", "--add", "3"], "bertkit.commands.vocab_extend", ["--add", "3"]),
        (["vocab", "a.txt", "-o", "d"], "bertkit.commands.vocab", ["a.txt", "-o", "d"]),
        (["finetune", "--task", "simcse"], "bertkit.commands.finetune_embeddings", ["--task", "simcse"]),
        (["finetune", "--task=sst2"], "bertkit.commands.finetune", ["--task=sst2"]),
        (["evaluate", "--task", "blimp"], "bertkit.commands.evaluate_blimp", ["--task", "blimp"]),
        (["evaluate", "--task", "sts"], "bertkit.commands.evaluate_embeddings", ["--task", "sts"]),
        (["evaluate", "--model", "m"], "bertkit.commands.evaluate", ["--model", "m"]),
    ],
)
def test_one_mechanism_picks_the_module_of_a_command_line(argv, module, rest):
    assert select(argv[0], argv[1:])[:2] == (module, rest)
