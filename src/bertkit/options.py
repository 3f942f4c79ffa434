"""One definition per option: argparse flags built from dataclass fields.

A field's name gives the flag (``max_seq_length`` -> ``--max-seq-length``), its default the flag's default, and its
``metadata`` the rest, via ``option()``::

    @dataclass
    class FinetuneArgs:
        lr: float = option(2e-5, help="peak learning rate", group="training")
        precision: str = option("auto", choices=PRECISIONS, help="...")
        nsp: bool = option(True, flag="--no-nsp", help="MLM only")   # a bool whose default is True: a --no- flag

    add_options(parser, FinetuneArgs)              # flags, grouped, with help showing the default
    cfg = from_args(FinetuneArgs, parser.parse_args())

Bools become ``store_true`` (default False) or ``store_false`` (default True, flag ``--no-NAME`` unless given); a
``bool | None`` with ``negative=`` is a pair (``--nsp`` / ``--no-nsp``, ``--lowercase`` / ``--cased``), None when
neither is given. A ``dict`` field is a repeatable ``--flag KEY=VALUE`` (``key_value_option``: the value read as
JSON). ``X | None`` fields take ``X``'s type. ``parse=`` converts the string (e.g. a duration); ``skip=True`` keeps a
field out of the CLI; ``aliases=`` are older spellings still accepted (with a deprecation warning).

The options every training command shares have one name, one help text and one spelling here (``lr_option``,
``warmup_option``, ``clip_option``, ``max_steps_option``, ``seed_option``, ``device_option``, ``precision_option``,
``threads_option``, ``output_option``, ``model_option``, ``corpus_option``...); a command chooses only its default.
Every command that runs a model takes ``--device`` / ``--precision`` from these (``precision_option("fp32")`` where it
prints a model's exact numbers); none writes ``add_argument`` itself (tests/unit/test_command_configs.py). A field
whose flags pass on to another command (``bertkit glue`` -> ``finetune``) is an ``option(passthrough=...)``.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import os
import tempfile
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bertkit.errors import InputError

_MISSING = dataclasses.MISSING
logger = logging.getLogger(__name__)
PRECISIONS = ("auto", "bf16", "fp16", "fp32")  # bertkit.precision's, repeated so that this module imports no torch


def option(
    default: Any = _MISSING,
    *,
    help: str = "",
    flag: str | None = None,
    group: str | None = None,
    choices: typing.Sequence | None = None,
    metavar: str | None = None,
    parse: Callable | None = None,
    nargs: str | None = None,
    required: bool = False,
    skip: bool = False,
    default_factory: Callable | None = None,
    aliases: tuple[str, ...] = (),
    bounds: tuple | None = None,
    short: str | None = None,
    negative: tuple[str, str] | None = None,
    run: bool = False,
    repeat: bool = False,
    repr: bool = True,
    passthrough: Callable[[], typing.Sequence[type]] | None = None,
) -> Any:
    """A dataclass field whose flag, help, group and parsing live next to its default. ``bounds``: the range of a
    numeric flag, ``(low, high)`` with ``"(lo"``-style exclusive ends written as in :data:`BOUNDS` (default: the
    entry of its name there, else ``[0, inf)``); a value outside it, nan or inf is refused at parse time.

    ``flag`` without a leading ``-`` makes a positional argument (its metavar). ``short``: a one-letter spelling
    too (``-o``). ``negative``: for a ``bool | None`` field, ``(flag, help)`` of the flag that sets it False (the
    two are mutually exclusive; neither given: None). ``run``: a key a resumed run must share (its run record).
    ``repeat``: the flag may be given several times (a list of its values). ``repr=False``: a secret (an API key),
    kept out of the config's repr and of the help's defaults. ``passthrough``: the field holds flags handed on to
    another command (``glue`` -> ``finetune``): the option dataclasses it returns give their flags (but the fields named
    in ``choices``: those this command sets itself) in a group titled ``help``, without defaults; the field is the
    argv of the flags given (:func:`to_argv`)."""
    meta = {
        "passthrough": passthrough,
        "repeat": repeat,
        "short": short,
        "negative": negative,
        "run": run,
        "bounds": bounds,
        "help": help,
        "flag": flag,
        "group": group,
        "choices": choices,
        "metavar": metavar,
        "parse": parse,
        "nargs": nargs,
        "required": required,
        "skip": skip,
        "aliases": tuple(aliases),
    }
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=meta, repr=repr)
    return dataclasses.field(default=default, metadata=meta, repr=repr)


def _base_type(tp: Any) -> Any:
    """``int | None`` -> int; ``list[str]`` -> str (with nargs); a plain type unchanged."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _base_type(args[0]) if len(args) == 1 else str
    if origin in (list, tuple):
        args = typing.get_args(tp)
        return _base_type(args[0]) if args else str
    return tp


# ------------------------------------------------------------------------------------------ numeric flags' ranges

# The range of every numeric flag, by field name (the same name means the same thing in every command): (low, high,
# low_open, high_open), None = unbounded. A numeric flag not named here takes [0, inf). Every one refuses nan and
# inf, and a value out of range, when the command line is parsed: one line, exit 2.
POSITIVE = (0, None, True, False)  # POSITIVE: for a field whose name has other bounds elsewhere
_FRACTION = (0, 1, False, False)
BOUNDS: dict[str, tuple] = {
    # learning, steps, sizes: 0 would train nothing or divide by zero (limit_alphabet: 0 keeps no character, every word
    # would be [UNK]); the server's batching and limits (max_batch_size ... keep_alive_timeout_s): 0 would refuse
    # every request (a misconfiguration, not the client's)
    **dict.fromkeys(
        """
        lr tagger_lr epochs max_steps steps batch_size eval_batch_size phase2_batch_size grad_accum eval_batches seq_len
        phase2_seq_len max_seq_length max_length max_query_length max_answer_length doc_stride n_best_size dupe_factor
        log_every top_k shard_tokens temperature scale checkpoints tagger_hidden max_time prepare_timeout opset head
        limit_alphabet max_batch_size max_batch_tokens max_inputs max_input_chars max_request_tokens max_output_values
        max_predictions max_payload_bytes max_pending limit_concurrency request_timeout_s header_timeout_s
        body_timeout_s keep_alive_timeout_s
        """.split(),
        POSITIVE,
    ),
    **dict.fromkeys(("warmup_fraction", "short_seq_prob", "alpha"), _FRACTION),  # alpha: distill's soft-target share
    **dict.fromkeys(("dropout", "mask_prob", "eval_fraction"), (0, 1, False, True)),
    "layer_decay": (0, 1, True, False),  # layer-wise lr decay: (0, 1], 1 = off
    "max_seq_length": (3, None, False, False),  # [CLS] + a token + [SEP]; the model's positions bound the top
    "port": (0, 65535, False, False),
    "seed": (0, 2**32 - 1, False, False),  # numpy's seeds are 32-bit: a larger one fails inside a run
    # a trained vocabulary: the trainer reserves its table up front (1e12 aborted the process in Rust's allocator);
    # the largest in use hold about 250,000 tokens
    "vocab_size": (1, 1_000_000, False, False),
    # processes and threads: each is made (a process pool submits 2 x workers batches ahead), so 1e9 would fork or
    # spawn until the machine gives out; 0 = the command's default
    **dict.fromkeys(("threads", "workers", "loader_workers"), (0, 1024, False, False)),
    "processes": (1, 1024, False, False),  # pretrain's own launch: auto or a count
    "layer": (None, None, False, False),  # attention: 1..L, or -1 for the last (the model checks the range)
    "tag_column": (None, None, False, False),  # CoNLL: a column index, -1 = the last
    "null_score_diff_threshold": (None, None, False, False),  # SQuAD 2.0: a logit difference, any sign
}
_DEFAULT_BOUNDS = (0, None, False, False)


def _bounds_text(bounds: tuple) -> str:
    low, high, low_open, high_open = bounds
    show = lambda x: str(x) if isinstance(x, int) else f"{x:g}"  # noqa: E731 (2**32 - 1 in full, not 4.29e+09)
    parts = []
    if low is not None:
        parts.append(("> " if low_open else ">= ") + show(low))
    if high is not None:
        parts.append(("< " if high_open else "<= ") + show(high))
    return " and ".join(parts) or "a finite number"


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``10m``, ``1.5h``, ``1h30m`` -> seconds."""
    import re

    text = str(text).strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([smhd])", text)
    if not parts or "".join(f"{a}{b}" for a, b in parts) != text.replace(" ", ""):
        raise ValueError(f"cannot read duration {text!r}; write e.g. 90s, 10m, 1.5h or 1h30m")
    scale = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return sum(float(a) * scale[b] for a, b in parts)


def within(value: float, bounds: tuple) -> bool:
    """Whether ``value`` is finite and inside ``bounds`` (a :data:`BOUNDS` entry)."""
    low, high, low_open, high_open = bounds
    ok = math.isfinite(value)
    ok = ok and (low is None or (value > low if low_open else value >= low))
    return ok and (high is None or (value < high if high_open else value <= high))


def check_bounds(obj: Any, error: Callable[[str], Exception]) -> None:
    """Refuse, with ``error`` naming the flag, a numeric field of the dataclass ``obj`` outside the range its flag is
    parsed with (the field's ``bounds``, else :data:`BOUNDS`, else ``[0, inf)``): a config made in code meets the
    same table as the command line. Unset (None) fields pass."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if _base_type(hints.get(f.name, str)) not in (int, float) and f.metadata.get("bounds") is None:
            continue
        bounds = f.metadata.get("bounds") or BOUNDS.get(f.name, _DEFAULT_BOUNDS)
        if not within(value, bounds):
            flag = f.metadata.get("flag") or "--" + f.name.replace("_", "-")
            raise error(f"{flag} must be {_bounds_text(bounds)}, got {value}")


def check_run_flags(resume: bool, overwrite: bool) -> None:
    """``--resume`` continues the run in OUTPUT, ``--overwrite`` replaces it: both at once is refused, in one line,
    by every training command (pretrain, finetune, the embedding tasks, distill) before anything is read."""
    if resume and overwrite:
        raise InputError("--resume and --overwrite: choose one (continue the run in --output, or replace it)")


def parse_seeds(text: str) -> list[int]:
    """``--seeds``: a count N (seeds 1..N) or a comma-separated list of distinct integers."""
    try:
        if "," not in text:
            n = int(text)
            if n < 1:
                raise ValueError
            return list(range(1, n + 1))
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise InputError(
            f"--seeds: expected a count >= 1 or a comma-separated list of integers, got {text!r}"
        ) from None
    if len(set(seeds)) != len(seeds) or not seeds:
        raise InputError(f"--seeds: {text!r} repeats a seed or names none")
    return seeds


def parse_lrs(text: str) -> list[float]:
    """``--lr`` of a grid: comma-separated positive numbers, sorted, each once."""
    try:
        lrs = [float(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise InputError(f"--lr: expected comma-separated numbers, got {text!r}") from None
    if not lrs or any(not lr > 0 for lr in lrs):
        raise InputError(f"--lr: expected positive learning rates, got {text!r}")
    return sorted(set(lrs))


def parse_time(text: str | None, flag: str) -> float | None:
    """A duration flag's seconds (:func:`parse_duration`), None when not given; a bad one, or one not > 0, names
    ``flag``."""
    if text is None:
        return None
    try:
        seconds = parse_duration(text)
    except ValueError as e:
        raise InputError(f"{flag}: {e}") from None
    if not seconds > 0:
        raise InputError(f"{flag} {text}: must be > 0")
    return seconds


def number(base: type, name: str = "", bounds: tuple | None = None, parse: Callable | None = None) -> Callable:
    """An argparse ``type`` for a numeric flag: ``parse`` (default ``base``), then nan, inf and values outside
    ``bounds`` (default: :data:`BOUNDS`' entry for ``name``, else ``[0, inf)``) are refused with a one-line
    message. The function carries ``bounds`` (tests walk every command's numeric flags with it)."""
    bounds = bounds or BOUNDS.get(name.lstrip("-").replace("-", "_"), _DEFAULT_BOUNDS)

    def convert(text: str) -> Any:
        try:
            value = (parse or base)(text)
        except (TypeError, ValueError) as e:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if base is int else 'a number'}, got {text!r}" if parse is None else str(e)
            ) from None
        if isinstance(value, int | float) and not within(value, bounds):
            raise argparse.ArgumentTypeError(f"must be {_bounds_text(bounds)}, got {text}")
        return value

    convert.__name__ = getattr(parse or base, "__name__", "number")
    convert.bounds = bounds  # type: ignore[attr-defined]
    return convert


def output_path(text: str) -> str:
    """An argparse ``type`` for an output path (a directory or file to create): refused at parse time when it cannot
    be written: its nearest existing ancestor is a file, or no entry can be made there (``/proc/x``, a read-only
    mount, no permission). Nothing is left behind (a probe directory is made and removed)."""
    path = Path(text).expanduser()
    ancestor = path if path.is_dir() else path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: cannot write there ({ancestor} is a file, not a directory)")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".bertkit-write-probe-", dir=ancestor))
    except OSError as e:
        raise argparse.ArgumentTypeError(f"{text}: cannot write there ({ancestor}: {e.strerror or e})") from None
    return text


def parse_key_value(text: str) -> tuple[str, Any]:
    """An argparse ``type`` for a ``KEY=VALUE`` flag (a ``dict`` field, :func:`key_value_option`): the key, and the
    value read as JSON (the text itself when it is not JSON). Refused in one line: no ``=`` or no key, a value
    nested too deeply for the JSON reader (it recurses once per level)."""
    import json

    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value
    except RecursionError:  # '[' x 100,000
        raise argparse.ArgumentTypeError(f"{key}: the value nests too deeply to be read") from None


class _KeyValues(argparse.Action):
    """A repeatable ``KEY=VALUE`` flag: each (key, value) goes into one dict, a new one (the default is not changed);
    a key given twice keeps its last value."""

    def __call__(self, parser, namespace, values, option_string=None):
        key, value = values
        setattr(namespace, self.dest, {**(getattr(namespace, self.dest, None) or {}), key: value})


class _DeprecatedAlias(argparse.Action):
    """An older spelling of a flag: stores into the same field, and warns once it is used."""

    def __init__(self, option_strings, dest, current: str = "", const=None, nargs=None, **kwargs):
        self.current = current
        super().__init__(option_strings, dest, nargs=nargs, const=const, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        logger.warning("%s is deprecated: use %s", option_string, self.current)
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


def add_options(
    parser: argparse.ArgumentParser | Any,
    cls: type,
    *,
    exclude: typing.Iterable[str] = (),
    groups: dict[str, Any] | None = None,
    passthrough: bool = False,
) -> dict[str, Any]:
    """Add a flag per field of dataclass ``cls`` (fields named in ``exclude`` or with ``skip`` are left out).
    Fields with a ``group`` go into argument groups of that title (``groups``: title -> group, shared between calls;
    returned). ``passthrough``: no defaults and nothing required, so that only the flags given appear in the parsed
    namespace (for a command that hands them on, with :func:`to_argv`)."""
    hints = typing.get_type_hints(cls)
    groups = {} if groups is None else groups
    exclude = set(exclude)
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if f.name in exclude or meta.get("skip") or not f.init:
            continue
        if meta.get("passthrough"):  # only the flags given are handed on: no defaults (the other command's apply)
            group = parser.add_argument_group(meta["help"])
            for other in meta["passthrough"]():
                add_options(parser, other, exclude=meta["choices"], passthrough=True, groups=_OneGroup(group))
            continue
        target = parser
        if meta.get("group"):
            if meta["group"] not in groups:
                groups[meta["group"]] = parser.add_argument_group(meta["group"])
            target = groups[meta["group"]]
        default = (
            f.default
            if f.default is not _MISSING
            else (f.default_factory() if f.default_factory is not _MISSING else None)
        )
        tp = hints.get(f.name, str)
        base = _base_type(tp)
        help_text = meta.get("help", "")
        flag = meta.get("flag") or "--" + f.name.replace("_", "-")
        kwargs: dict[str, Any] = {"dest": f.name, "help": help_text}
        if base is bool and typing.get_origin(tp) is not list:
            if meta.get("negative"):  # --lowercase / --cased: one field, None when neither is given
                target = target.add_mutually_exclusive_group()
                kwargs.update(action="store_true", default=None)
            elif default is True:
                flag = meta.get("flag") or "--no-" + f.name.replace("_", "-")
                kwargs.update(action="store_false", default=True)
            else:
                kwargs.update(action="store_true", default=default)
        else:
            kwargs["default"] = default
            kwargs["type"] = meta.get("parse") or (base if base in (int, float, str) else str)
            if base in (int, float) or meta.get("bounds") is not None:
                kwargs["type"] = number(base, f.name, meta.get("bounds"), meta.get("parse"))
            if meta.get("choices") is not None:
                kwargs["choices"] = list(meta["choices"])
            if meta.get("metavar"):
                kwargs["metavar"] = meta["metavar"]
            if meta.get("nargs"):
                kwargs["nargs"] = meta["nargs"]
            if meta.get("required"):
                kwargs["required"] = True
            if meta.get("repeat"):
                kwargs.update(action="append", default=None if meta.get("required") else default)
            if typing.get_origin(tp) is dict:  # --flag KEY=VALUE, repeatable: one dict
                kwargs.update(action=_KeyValues, type=meta.get("parse") or parse_key_value)
                kwargs.setdefault("metavar", "KEY=VALUE")
            shown = default is not None and not isinstance(default, list | tuple | dict)  # a list's is in its help
            shown = shown and f.repr  # a secret's is not shown at all
            if shown and not meta.get("required") and "%(default)" not in help_text:
                kwargs["help"] = (help_text + " " if help_text else "") + "(default: %(default)s)"
        if passthrough:
            if "%(default)" in kwargs["help"]:
                kwargs["help"] = kwargs["help"].replace("%(default)s", str(default).replace("%", "%%"))
            kwargs.update(default=argparse.SUPPRESS, required=False)
        names = [flag] if meta.get("short") is None else [meta["short"], flag]
        if not flag.startswith("-"):  # a positional: its name is its dest
            names, kwargs["metavar"] = [f.name], kwargs.get("metavar") or flag
            kwargs.pop("dest"), kwargs.pop("required", None)
        target.add_argument(*names, **kwargs)
        if meta.get("negative"):
            negative, negative_help = meta["negative"]
            target.add_argument(negative, dest=f.name, action="store_false", help=negative_help)
        for alias in meta.get("aliases") or ():
            extra = {k: v for k, v in kwargs.items() if k in ("type", "choices", "nargs", "metavar")}
            if kwargs.get("action") in ("store_true", "store_false"):
                extra.update(nargs=0, const=kwargs["action"] == "store_true")
            target.add_argument(
                alias,
                dest=f.name,
                action=_DeprecatedAlias,
                current=flag,
                default=argparse.SUPPRESS,
                help=argparse.SUPPRESS,
                **extra,
            )
    return groups


class _OneGroup(dict):
    """Every group title maps to one argument group (a pass-through field's)."""

    def __init__(self, group) -> None:
        super().__init__()
        self.group = group

    def __contains__(self, key) -> bool:
        return True

    def __getitem__(self, key):
        return self.group


def option_flags(cls: type) -> dict[str, str]:
    """field name -> its flag, for the fields of ``cls`` that have one."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get("skip") or not f.init:
            continue
        flag = f.metadata.get("flag")
        if not flag:
            base, tp = _base_type(hints.get(f.name, str)), hints.get(f.name, str)
            negated = base is bool and typing.get_origin(tp) is None and f.default is True
            negated = negated and not f.metadata.get("negative")
            flag = ("--no-" if negated else "--") + f.name.replace("_", "-")
        out[f.name] = flag
    return out


def to_argv(cls: type, args: argparse.Namespace, *, exclude: typing.Iterable[str] = ()) -> list[str]:
    """The flags of ``cls`` present in ``args`` (parsed with ``passthrough=True``), as an argv to hand on."""
    hints = typing.get_type_hints(cls)
    out: list[str] = []
    exclude = set(exclude)
    for name, flag in option_flags(cls).items():
        if name in exclude or name not in vars(args):
            continue
        value, tp = getattr(args, name), hints.get(name, str)
        if _base_type(tp) is bool and typing.get_origin(tp) is None:
            out.append(flag)
        elif isinstance(value, list):
            for v in value:
                out += [flag, str(v)]
        else:
            out += [flag, str(value)]
    return out


class _RefusingParser(argparse.ArgumentParser):
    """A parser whose error is an ``ArgumentTypeError`` (one line, for the flag that holds the string it parses),
    but for a required flag left out: the caller gives those itself (parsing goes on without them)."""

    def error(self, message: str):  # type: ignore[override]
        if message.startswith(("the following arguments are required", "one of the arguments")):
            return
        raise argparse.ArgumentTypeError(message)


def flag_string(
    owned: typing.Iterable[str] = (), configure: Callable[[argparse.ArgumentParser], None] | None = None
) -> Callable[[str], list[str]]:
    """An argparse ``type`` for a string of flags handed on to another command (``downstream --finetune-args
    "--batch-size 16"``): split as a shell would (``shlex``). Refused when the command line is parsed, in one line:
    bad quoting, and any of the ``owned`` flags (the caller sets them itself for every run: its cells' ``--output``,
    ``--lr``...), written ``--flag value``, ``--flag=value`` or as an abbreviation argparse would expand to it.

    ``configure``: builds the other command's flags on a parser; the string is then parsed with them, so a flag
    that command does not have (``-o``) or a bad value (``--batch-size abc``) is refused here, not in every run
    the caller starts. ``configure`` runs on first use (it may import the library)."""
    import shlex

    owned = tuple(owned)

    def split(text: str) -> list[str]:
        try:
            argv = shlex.split(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"{text!r}: cannot split it into flags ({e})") from None
        for arg in argv:
            name = arg.split("=", 1)[0]
            if name.startswith("--") and len(name) > 2 and any(o.startswith(name) for o in owned):
                raise argparse.ArgumentTypeError(
                    f"{name} is set by this command itself ({', '.join(owned)}); leave it out"
                )
        if configure is not None:
            _check_flags(argv, configure)
        return argv

    split.__name__ = "flags"
    return split


def _check_flags(argv: list[str], configure: Callable[[argparse.ArgumentParser], None]) -> None:
    """Parse ``argv`` with the flags ``configure`` builds (those it requires are the caller's to give); refuse what
    that parser refuses: a flag it lacks, a bad value."""
    parser = _RefusingParser(prog="", add_help=False)
    configure(parser)
    try:
        parser.parse_args(argv)
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{' '.join(argv)!r}: {e}") from None


# --------------------------------------------------------------------------------- the options commands share

TRAINING = "training"


def lr_option(default: float | None, help: str = "peak learning rate (AdamW)", group: str | None = TRAINING) -> Any:
    return option(default, group=group, help=help)


def warmup_option(default: float | None, group: str | None = TRAINING) -> Any:
    """``warmup_fraction`` (``--warmup-proportion``: the older spelling)."""
    return option(
        default,
        group=group,
        aliases=("--warmup-proportion",),
        help="fraction of the steps with linear warmup from 0 to the peak learning rate",
    )


def clip_option(default: float = 1.0, group: str | None = TRAINING) -> Any:
    """``clip`` (``--max-grad-norm``: the older spelling)."""
    return option(
        default, group=group, aliases=("--max-grad-norm",), help="clip the gradient norm to this (0 = no clipping)"
    )


def max_steps_option(
    help: str = "stop after N optimizer steps (default: no limit)", group: str | None = TRAINING
) -> Any:
    return option(None, group=group, help=help)


MAX_TIME_HELP = (
    "wall-clock budget (90s, 10m, 1.5h): the run ends at the first step after it is spent, evaluated and saved as "
    "at its last step (the lr schedule stays that of --epochs / --max-steps)"
)


def max_time_option(help: str, group: str | None = TRAINING) -> Any:
    """``max_time``: ``--max-time``'s wall-clock budget in seconds, written 90s, 10m, 1.5h (:func:`parse_duration`;
    > 0, :data:`BOUNDS`); None: no budget."""
    return option(None, parse=parse_duration, metavar="DURATION", group=group, help=help)


def seed_option(
    default: int, group: str | None = TRAINING, help: str = "seed of the initialisation, the data order and dropout"
) -> Any:
    return option(default, group=group, help=help)


DEVICE_HELP = "cpu | cuda | cuda:N (default: cuda when available)"
PRECISION_HELP = (
    "autocast precision: auto = bf16 where the CPU/GPU supports it (fp16 with loss scaling on GPUs "
    "without bf16), else fp32"
)
THREADS_HELP = (
    "torch threads per process (default: torch's choice; 1 can be faster on a machine shared with other jobs)"
)


def device_option(group: str | None = None) -> Any:
    """``device``: None = auto (``bertkit.precision.resolve_device``: cuda when available, else cpu)."""
    return option(None, group=group, help=DEVICE_HELP)


def precision_option(default: str = "auto", group: str | None = None) -> Any:
    """``precision``: one of ``PRECISIONS``; a command that prints a model's exact numbers may default to fp32."""
    return option(default, choices=PRECISIONS, group=group, help=PRECISION_HELP)


def threads_option(group: str | None = TRAINING) -> Any:
    return option(None, group=group, help=THREADS_HELP)


def parse_processes(text: str) -> int | None:
    """``--processes``: a count (its bounds: :data:`BOUNDS`'), or ``auto`` (None: the command's choice)."""
    if text == "auto":
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"expected a count or auto, got {text!r}") from None


def processes_option(group: str | None = TRAINING) -> Any:
    """``processes``: pretrain's training processes on this machine (``recipes/pretrain/tables.processes``)."""
    return option(
        None,
        group=group,
        metavar="N|auto",
        parse=parse_processes,
        help="training processes on this CPU, each on its share of the cores, as torchrun --standalone starts them "
        "(DistributedDataParallel; the budget recipe's batch split between them). Default auto: 2 for the budget "
        "recipe in fp32 (a CPU without bf16 units) with --max-time of 5 minutes or more and neither --threads nor a "
        "batch size given, where two processes of one thread read more tokens a second than one of two; else 1",
    )


def output_option(
    help: str, group: str | None = None, metavar: str | None = None, required: bool = True, short: str | None = None
) -> Any:
    """``output``: a path to write, refused when the command line is parsed if it cannot be written
    (:func:`output_path`); ``required=False``: None when not given (the command's default place)."""
    return option(None, required=required, group=group, help=help, metavar=metavar, parse=output_path, short=short)


MODEL_HELP = "bertkit or Hugging Face BERT / ModernBERT directory (config.json, weights, vocab.txt or tokenizer.json)"


def model_option(
    help: str = MODEL_HELP, group: str | None = None, required: bool = True, metavar: str | None = None
) -> Any:
    """``model``: the model directory a command reads (``--model``)."""
    return option(None, required=required, group=group, help=help, metavar=metavar)


CORPUS_HELP = (
    "text files or directories of them: Google format (a sentence per line, blank line between documents), plain "
    "prose (each file a document), JSONL with a 'text' field, Parquet, datasets directories, or task files (TSV, "
    "CSV, JSONL, CoNLL: their text columns); gzip, zstd, bz2 and xz are recognised by their bytes and refused when "
    "truncated"
)


def corpus_option(help: str = CORPUS_HELP, group: str | None = None) -> Any:
    """``corpus``: one or more text files or directories (``--corpus PATH...``), read as pre-training reads them."""
    return option(required=True, nargs="+", metavar="PATH", group=group, help=help, default_factory=list)


def vocab_option(help: str, required: bool = False, group: str | None = None) -> Any:
    """``vocab``: a vocab.txt, or a directory holding one (``--vocab PATH``)."""
    return option(None, required=required, metavar="PATH", group=group, help=help)


ENCODING_HELP = "auto: a line that is not UTF-8 is read as Windows-1252, with a warning; utf-8: an error"


def encoding_option(group: str | None = None) -> Any:
    """``encoding``: how a corpus line that is not UTF-8 is read (``bertkit.data.pretraining.corpus.ENCODINGS``)."""
    return option("auto", choices=("auto", "utf-8"), group=group, help=ENCODING_HELP)


def follow_symlinks_option(group: str | None = None) -> Any:
    """``follow_symlinks``: read links that leave a corpus directory (default: skipped, with a warning)."""
    return option(
        False,
        group=group,
        help="read symbolic links that leave a corpus directory too (default: skipped, with a warning)",
    )


def workers_option(help: str = "preprocessing processes (default: every core)", group: str | None = None) -> Any:
    """``workers``: processes preparing a corpus; None: every core."""
    return option(None, group=group, help=help)


def lowercase_option(help: str = "uncased tokenizing", cased_help: str = "cased tokenizing", group=None) -> Any:
    """``lowercase``: ``--lowercase`` True, ``--cased`` False, neither None (the vocabulary's own choice)."""
    return option(None, group=group, help=help, negative=("--cased", cased_help))


def key_value_option(help: str, flag: str | None = None, group: str | None = None) -> Any:
    """A ``dict`` field given as a repeatable ``--flag KEY=VALUE`` (:func:`parse_key_value`); ``{}`` when not given
    (``--config-override num_hidden_layers=2``)."""
    return option(default_factory=dict, flag=flag, group=group, metavar="KEY=VALUE", help=help)


def cased_option(help: str, default: bool | None = False) -> Any:
    """``cased``: ``--cased`` keeps case (a command without a ``--lowercase`` to go with it)."""
    return option(default, help=help)


def quiet_option(help: str = "no progress bar", group: str | None = None) -> Any:
    return option(False, help=help, group=group)


def overwrite_option(help: str, group: str | None = None) -> Any:
    return option(False, help=help, group=group)


def batch_size_option(default: int | None, help: str = "examples per batch", group: str | None = None) -> Any:
    return option(default, group=group, help=help)


def max_length_option(default: int | None, help: str, group: str | None = None, flag: str | None = None) -> Any:
    """``max_length``: tokens per input an inference command feeds the model."""
    return option(default, group=group, help=help, flag=flag)


def quantize_option(help: str = "int8: dynamic int8 Linear layers on the CPU (faster; see docs/inference.md)") -> Any:
    return option(None, choices=("int8",), help=help)


def backend_option(help: str = "onnx: run the encoder with ONNX Runtime (needs the 'onnx' extra)") -> Any:
    return option("torch", choices=("torch", "onnx"), help=help)


def layers_option(help: str) -> Any:
    """``layers``: comma-separated layer indices, concatenated (``-1,-2``: ``cli.join_negative_lists`` joins a list
    of negative numbers to its flag, which argparse would take for an option)."""
    return option(None, help=help)


def pooling_option(help: str) -> Any:
    return option(None, help=help)


def field_flags(cls: type) -> dict[str, list[str]]:
    """field name -> every spelling of its flags (``-o``, ``--output``; ``--lowercase``, ``--cased``; a
    positional's name), for the fields of ``cls`` that have one: what ``bertkit COMMAND -h`` lists of it."""
    flags = option_flags(cls)
    out: dict[str, list[str]] = {}
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if meta.get("passthrough"):  # the other command's flags it hands on (and their older spellings)
            others = [field_flags(other) for other in meta["passthrough"]()]
            out[f.name] = [flag for o in others for name, fl in o.items() if name not in meta["choices"] for flag in fl]
            continue
        if f.name not in flags:
            continue
        names = [meta["short"]] if meta.get("short") else []
        names.append(flags[f.name] if flags[f.name].startswith("-") else f.name)
        if meta.get("negative"):
            names.append(meta["negative"][0])
        out[f.name] = names + list(meta.get("aliases") or ())
    return out


def narrow(config: Any, cls: type, **overrides: Any) -> Any:
    """A ``cls`` made of the fields of ``config`` (a dataclass of more fields: ``serve``'s config holds the server's
    settings), with ``overrides``."""
    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(cls) if f.init and hasattr(config, f.name)}
    return cls(**{**values, **overrides})


def from_text(config: Any, name: str, convert: Callable[[str], Any]) -> None:
    """In a frozen config's ``__post_init__``: field ``name``, given as its flag's text (the command line) rather
    than as its value (code), becomes ``convert(text)``: a list of seeds, a duration, a path. ``convert`` refuses a
    bad one naming the flag, when the config is made."""
    value = getattr(config, name)
    if isinstance(value, str):
        object.__setattr__(config, name, convert(value))


def run_key(f: Any) -> Any:
    """A shared option (``lr_option()``...) marked as a key a resumed run must share (:func:`run_keys`)."""
    import types

    f.metadata = types.MappingProxyType({**f.metadata, "run": True})
    return f


def run_keys(cls: type) -> tuple[str, ...]:
    """The fields of ``cls`` marked ``run``: the settings that change what a run computes, which a resumed run
    must share (its run record keeps them)."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("run"))


def from_args(cls: type, args: argparse.Namespace, **overrides: Any) -> Any:
    """An instance of ``cls`` from the parsed flags (fields without a flag keep their defaults)."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if f.init and hasattr(args, f.name)}
    for f in dataclasses.fields(cls):
        if f.metadata.get("passthrough"):
            own = f.metadata["choices"]
            values[f.name] = [a for other in f.metadata["passthrough"]() for a in to_argv(other, args, exclude=own)]
    values.update(overrides)
    return cls(**values)
