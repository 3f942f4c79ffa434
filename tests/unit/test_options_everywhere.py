"""One definition per option (docs/design.md, habit 13), for every command: ``--device``, ``--precision``, ``--threads``
and ``--seed`` come from ``bertkit.options`` (``device_option``, ``precision_option``...), never from a command's own
``add_argument``. Checked by reading src/bertkit/commands/ with ``ast``, and by building each command's parser."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import pytest

from bertkit.cli import COMMANDS, VARIANTS, configure
from bertkit.options import DEVICE_HELP, PRECISION_HELP, PRECISIONS

SRC = Path(__file__).resolve().parents[2] / "src" / "bertkit"
# every command module: commands/, the variants among them (bertkit.cli.VARIANTS) included
COMMAND_SOURCES = sorted((SRC / "commands").glob("*.py")) + sorted((SRC / "embeddings").glob("*_cli.py"))
SHARED_FLAGS = ("--device", "--precision", "--threads", "--seed")
# every command that loads, builds or trains a model: each takes --device and --precision
MODEL_COMMANDS = (
    "embed",
    "similarity",
    "fill-mask",
    "attention",
    "serve",
    "probe",
    "quickstart",
    "pretrain",
    "finetune",
    "distill",
    "evaluate",
    "predict",
)


def hand_written_shared_flags(source: str, name: str = "<src>") -> list[str]:
    """``file:line --flag`` for each ``*.add_argument("--device" ...)`` (any of SHARED_FLAGS) in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            for arg in node.args:
                if isinstance(arg, ast.Constant) and arg.value in SHARED_FLAGS:
                    found.append(f"{name}:{node.lineno} {arg.value}")
    return found


def test_no_command_defines_device_precision_threads_or_seed_itself():
    assert len(COMMAND_SOURCES) > len(COMMANDS)  # the files were found
    found = [hit for p in COMMAND_SOURCES for hit in hand_written_shared_flags(p.read_text(encoding="utf-8"), p.name)]
    assert not found, "build these from bertkit.options (device_option, seed_option...): " + str(found)


def test_the_source_rule_sees_a_hand_written_flag():
    source = (
        'def configure(parser):\n    g = parser.add_argument_group("x")\n'
        '    g.add_argument("--device", default="cpu")\n    parser.add_argument("--model")\n'
    )
    assert hand_written_shared_flags(source) == ["<src>:3 --device"]


def _parser(name: str) -> argparse.ArgumentParser:
    """``bertkit NAME``'s parser; NAME may also be a module (the embedding tasks' delegated modules)."""
    parser = argparse.ArgumentParser(prog=f"bertkit {name}")
    configure(COMMANDS[name][0] if name in COMMANDS else name, parser)
    return parser


def _flat(text: str) -> str:
    return " ".join(text.split())  # the help as one line, whatever argparse's wrapping


@pytest.mark.parametrize(
    "name", sorted(COMMANDS) + sorted(v.module for variants in VARIANTS.values() for v in variants)
)
def test_each_device_and_precision_flag_has_the_shared_help(name):
    parser = _parser(name)
    text = _flat(parser.format_help())
    if name in MODEL_COMMANDS or name.startswith("bertkit.embeddings."):
        assert "--device DEVICE" in text and "--precision {" in text, name
        assert parser.get_default("device") is None  # auto: cuda when available (bertkit.precision.resolve_device)
        assert parser.get_default("precision") in PRECISIONS
    if "--device" in text:
        assert _flat(DEVICE_HELP) in text, name
    if "--precision" in text:
        assert _flat(PRECISION_HELP) in text, name
        assert "{" + ",".join(PRECISIONS) + "}" in text, name  # every precision, in every command


def test_commands_that_print_exact_numbers_default_to_fp32():
    for name in ("fill-mask", "similarity", "attention"):
        assert _parser(name).get_default("precision") == "fp32", name
    for name in ("embed", "serve", "probe", "quickstart"):
        assert _parser(name).get_default("precision") == "auto", name


def test_the_old_spellings_still_parse():
    """Every flag spelling these commands took before keeps working (serve --threads 0 = torch's default)."""
    args = _parser("serve").parse_args(["--model", "m", "--device", "cpu", "--precision", "bf16", "--threads", "0"])
    assert (args.device, args.precision, args.threads) == ("cpu", "bf16", 0)
    args = _parser("quickstart").parse_args(["--seed", "3", "--threads", "2", "--lr", "1e-3", "--precision", "fp32"])
    assert (args.seed, args.threads, args.lr, args.precision, args.device) == (3, 2, 1e-3, "fp32", None)
    args = _parser("probe").parse_args(["--model", "m", "--task", "stsb", "--dev", "d", "--seed", "5"])
    assert (args.seed, args.device, args.precision) == (5, None, "auto")


def test_auto_device_stays_on_the_cpu_for_cpu_only_work(monkeypatch):
    """``--quantize int8`` and ``--backend onnx`` run on the CPU only: with no --device they must not pick a GPU."""
    import torch

    from bertkit.precision import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device(None) == "cuda"
    assert resolve_device(None, cpu_only=True) == "cpu"
    assert resolve_device("cuda:1", cpu_only=True) == "cuda:1"  # a device named is a device honoured


@pytest.mark.parametrize(
    "name,gpus,words",
    [
        ("cuda", 0, "--device cuda: "),  # a CPU-only torch, or no GPU visible
        ("cuda:2", 2, "--device cuda:2: only 2 GPU(s) are visible"),
        ("banana", 0, "--device banana: not a device name"),
        ("meta", 0, "--device meta: bertkit runs on cpu, cuda or mps"),
        ("", 0, "--device is empty"),  # --device "$DEV" with DEV unset: never taken as auto
        ("  ", 2, "--device is empty"),
        ("cpu:1", 0, "--device cpu:1: there is one cpu device"),  # torch takes it, and runs on the CPU
        ("CPU", 0, "--device CPU: not a device name"),
    ],
)
def test_a_device_this_machine_lacks_is_refused_naming_the_flag(monkeypatch, name, gpus, words):
    """The one check every --device flag goes through (``resolve_device``), before anything is loaded."""
    import torch

    from bertkit.errors import InputError
    from bertkit.precision import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    with pytest.raises(InputError) as e:
        resolve_device(name)
    assert str(e.value).startswith(words) and "\n" not in str(e.value)
    assert resolve_device("cpu") == "cpu"
