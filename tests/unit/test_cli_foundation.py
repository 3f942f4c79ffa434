"""The `bertkit` command: `-h` lists every command, each command's `-h` works, an unknown command is an error, and
`--help` imports no torch."""

import subprocess
import sys

import pytest

from bertkit.cli import COMMANDS, main


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_command_help(name, capsys):
    with pytest.raises(SystemExit) as e:
        main([name, "-h"])
    assert e.value.code == 0
    assert f"bertkit {name}" in capsys.readouterr().out


def test_unknown_command_is_an_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["pretrian"])
    assert e.value.code == 2
    assert "pretrian" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--help"], ["evaluate", "--task", "blimp", "-h"]])
def test_help_does_not_import_torch(argv):
    """A routed task's -h too (evaluate_blimp keeps its torch imports function-local for it)."""
    code = (
        f"import sys; from bertkit.cli import main\ntry:\n main({argv!r})\nexcept SystemExit: pass\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("False")


def test_demo_runs(capsys):
    assert main(["demo", "--text", "a b c a"]) == 0
    out = capsys.readouterr().out
    assert "hidden states: 3 x (1, 6, 128)" in out
