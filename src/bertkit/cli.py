"""The ``bertkit`` command: a dict of subcommands -> modules, parsed with argparse.

A command module exposes ``CONFIG``, a frozen dataclass validated when made whose fields are the command's flags
(``bertkit.options.option``), and ``run(config) -> int | None``, which takes one; optionally ``DESCRIPTION`` (the
help's paragraph) and ``EPILOG`` (its last line). Every command is made so: :func:`configure` builds its flags,
:func:`config_of` its config.

One mechanism picks the module of a command line: a command's ``variants`` (:class:`Variant`), each a module with
its own config chosen by a first word (``bertkit vocab extend``) or by a ``--task`` value (``finetune --task simcse``,
``evaluate --task blimp``); none chosen: the command's own module. Nothing but this module imports a command module.
Modules are imported only when their command runs (or its ``-h`` is asked for), so ``bertkit --help`` is instant and
does not import torch.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from typing import Any, NamedTuple

from bertkit import __version__
from bertkit.console import show_on_stderr
from bertkit.embeddings import EMBEDDING_TASKS, EVALUATION_TASKS
from bertkit.errors import BertkitError
from bertkit.options import add_options, from_args


class Variant(NamedTuple):
    """A run of a command that another module (its own config, its own flags) takes: chosen by a first ``word``
    (a subcommand: ``vocab extend``) or by a ``--task`` value among ``tasks``."""

    module: str
    word: str | None = None
    tasks: tuple[str, ...] = ()


# name -> (module, one-line help); the variants of a command, by name
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("bertkit.commands.demo", "build a small random BERT, run a bundled sentence through it, print shapes"),
    "embed": ("bertkit.commands.embed", "embed every line of a file (any layers, any pooling) into .npy or .jsonl"),
    "similarity": ("bertkit.commands.similarity", "cosine distances between texts, or one word across contexts"),
    "serve": ("bertkit.commands.serve", "HTTP embedding server (TEI, OpenAI and bert-as-service APIs), batching"),
    "vocab": (
        "bertkit.commands.vocab",
        "train a WordPiece vocabulary on plain-text files; `vocab extend` extends a model's for a corpus",
    ),
    "tokenize": ("bertkit.commands.tokenize", "show the wordpieces (or ids) a vocabulary gives for texts"),
    "quickstart": (
        "bertkit.commands.quickstart",
        "train a vocabulary and pre-train bert-tiny on the bundled books, then fill in masked words",
    ),
    "prepare": ("bertkit.commands.prepare", "tokenize a corpus into pre-training shards once; pretrain reuses them"),
    "pretrain": ("bertkit.commands.pretrain", "pre-train BERT (MLM + NSP) on raw text; runs under torchrun too"),
    "convert": ("bertkit.commands.convert", "Google TensorFlow BERT checkpoint -> safetensors model directory"),
    "fill-mask": ("bertkit.commands.fill_mask", "predict the [MASK] tokens of a text with a pre-trained model"),
    "finetune": ("bertkit.commands.finetune", "fine-tune on GLUE, SQuAD, CoNLL NER, SWAG or generic files"),
    "distill": ("bertkit.commands.distill", "distil a fine-tuned teacher into a smaller, faster student on its task"),
    "evaluate": ("bertkit.commands.evaluate", "evaluate a fine-tuned model on a labelled file (official metric)"),
    "predict": ("bertkit.commands.predict", "write a fine-tuned model's predictions in the task's official format"),
    "glue": ("bertkit.commands.glue", "the GLUE suite: lr grid x seeds per task, GLUE score, leaderboard submission"),
    "downstream": (
        "bertkit.commands.downstream",
        "the downstream meter: fine-tune tasks from a model and from a random init of it; the gain per task",
    ),
    "plot": ("bertkit.commands.plot", "training curves of pretrain / finetune runs (PNG + CSV), or TensorBoard files"),
    "ablate": (
        "bertkit.commands.ablate",
        "the paper's pre-training ablations on your corpus: nsp, mask-rate, model-size, steps",
    ),
    "probe": ("bertkit.commands.probe", "frozen-model probes per layer x pooling (SST-2, MRPC, STS-B, NER)"),
    "attention": ("bertkit.commands.attention", "attention maps of a text, one head or a layer's heads (PNG + NPZ)"),
    "export": ("bertkit.commands.export", "write a model directory as an ONNX graph (--onnx DIR OUT)"),
}


VARIANTS: dict[str, tuple[Variant, ...]] = {
    "vocab": (Variant("bertkit.commands.vocab_extend", word="extend"),),
    "finetune": (Variant("bertkit.commands.finetune_embeddings", tasks=EMBEDDING_TASKS),),
    "evaluate": (
        Variant("bertkit.commands.evaluate_embeddings", tasks=EVALUATION_TASKS),
        Variant("bertkit.commands.evaluate_blimp", tasks=("blimp",)),
    ),
}


def _task_of(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "--task" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--task="):
            return arg.split("=", 1)[1]
    return None


def select(command: str, argv: list[str]) -> tuple[str, list[str], str]:
    """``bertkit COMMAND ARGV``'s (module, the arguments it parses, its program name): the variant the first word
    or the ``--task`` value chooses (:data:`VARIANTS`), else the command's own module."""
    task = _task_of(argv)
    for variant in VARIANTS.get(command, ()):
        if variant.word is not None and argv[:1] == [variant.word]:
            return variant.module, argv[1:], f"bertkit {command} {variant.word}"
        if task is not None and task in variant.tasks:
            return variant.module, argv, f"bertkit {command}"
    return COMMANDS[command][0], argv, f"bertkit {command}"


def route(command: str, argv: list[str]) -> str | None:
    """The variant module :func:`select` picks for ``bertkit COMMAND ARGV``, None for the command's own."""
    module = select(command, argv)[0] if command in COMMANDS else None
    return None if module in (None, COMMANDS[command][0]) else module


def configure(module: Any, parser: argparse.ArgumentParser) -> None:
    """The flags of a command module on ``parser``: its ``CONFIG``'s fields (``bertkit.options.add_options``)."""
    if isinstance(module, str):
        module = importlib.import_module(module)
    if getattr(module, "DESCRIPTION", None):
        parser.description = module.DESCRIPTION
    add_options(parser, module.CONFIG)


def config_of(module: Any, args: argparse.Namespace) -> Any:
    """The command's config made (and so validated) from the parsed flags."""
    return from_args(module.CONFIG, args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bertkit",
        description="BERT from scratch: tokenizer, pre-training, fine-tuning, features and serving.",
    )

    parser.add_argument("--version", action="version", version=f"bertkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name, (_module, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


class UsageError(Exception):
    """A command line that does not parse: :func:`main` prints it (one line) and returns 2."""


class CommandParser(argparse.ArgumentParser):
    """A command's parser: a bad flag is one line (the flag and why, then where the help is), exit 2; argparse's
    usage block (dozens of lines for pretrain) is left to ``-h``. Raises :class:`UsageError` (``main`` returns 2,
    as for any other bad input) instead of exiting."""

    def error(self, message: str):  # type: ignore[override]
        message = re.sub(r"^argument (-[^:\s]+(?:/-[^:\s]+)*): ", r"\1 ", message)  # "--lr must be > 0, got -1"
        raise UsageError(f"{self.prog}: error: {message} (see {self.prog} -h)")


_NEGATIVE_LIST = re.compile(r"^-\d+(,\s*-?\d+)+$")


def join_negative_lists(argv: list[str]) -> list[str]:
    """``--layers -1,-2`` -> ``--layers=-1,-2``: argparse takes a value that starts with '-' and is not a single
    number for an option. No flag looks like a list of negative numbers, so the join is safe for every command."""
    out: list[str] = []
    for arg in argv:
        if out and _NEGATIVE_LIST.match(arg) and out[-1].startswith("--") and "=" not in out[-1]:
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = join_negative_lists(list(sys.argv[1:] if argv is None else argv))
    if not argv or argv[0] not in COMMANDS:
        parser = build_parser()
        if not argv:
            parser.print_help()
            return 0
        parser.parse_args(argv)  # prints help / version, or an "invalid choice" error and exits 2
        return 0
    name = argv[0]
    show_on_stderr()  # the library's warnings and a run's progress lines
    module_name, rest, prog = select(name, argv[1:])
    module = importlib.import_module(module_name)
    parser = CommandParser(prog=prog, description=COMMANDS[name][1], epilog=getattr(module, "EPILOG", None))
    configure(module, parser)
    try:
        args = parser.parse_args(rest)
    except UsageError as e:
        print(e, file=sys.stderr)
        return 2
    try:
        code = module.run(config_of(module, args))
    except BertkitError as e:
        print(f"bertkit {name}: error: {e}", file=sys.stderr)
        return e.exit_code
    except OSError as e:  # a path the library did not foresee (an unwritable output, a full disk): it names the file
        print(f"bertkit {name}: error: {e.strerror or e}{f': {e.filename}' if e.filename else ''}", file=sys.stderr)
        return 1
    except RecursionError:  # a reader that did not name its file: still one line, never a traceback
        print(f"bertkit {name}: error: an input file nests too deeply to be read (RecursionError)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
