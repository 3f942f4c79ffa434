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

Bools become ``store_true`` (default False) or ``store_false`` (default True, flag ``--no-NAME`` unless given).
``X | None`` fields take ``X``'s type. ``parse=`` converts the string (e.g. a duration); ``skip=True`` keeps a
field out of the CLI.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Callable
from typing import Any

_MISSING = dataclasses.MISSING


def option(default: Any = _MISSING, *, help: str = "", flag: str | None = None, group: str | None = None,
           choices: typing.Sequence | None = None, metavar: str | None = None, parse: Callable | None = None,
           nargs: str | None = None, required: bool = False, skip: bool = False,
           default_factory: Callable | None = None) -> Any:
    """A dataclass field whose flag, help, group and parsing live next to its default."""
    meta = {"help": help, "flag": flag, "group": group, "choices": choices, "metavar": metavar, "parse": parse,
            "nargs": nargs, "required": required, "skip": skip}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


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


def add_options(parser: argparse.ArgumentParser, cls: type, *, exclude: typing.Iterable[str] = ()) -> None:
    """Add a flag per field of dataclass ``cls`` (fields named in ``exclude`` or with ``skip`` are left out)."""
    hints = typing.get_type_hints(cls)
    groups: dict[str, Any] = {}
    exclude = set(exclude)
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if f.name in exclude or meta.get("skip") or not f.init:
            continue
        target = parser
        if meta.get("group"):
            if meta["group"] not in groups:
                groups[meta["group"]] = parser.add_argument_group(meta["group"])
            target = groups[meta["group"]]
        default = f.default if f.default is not _MISSING else (f.default_factory() if f.default_factory is not _MISSING
                                                                  else None)
        tp = hints.get(f.name, str)
        base = _base_type(tp)
        help_text = meta.get("help", "")
        flag = meta.get("flag") or "--" + f.name.replace("_", "-")
        kwargs: dict[str, Any] = {"dest": f.name, "help": help_text}
        if base is bool and typing.get_origin(tp) is None:
            if default is True:
                flag = meta.get("flag") or "--no-" + f.name.replace("_", "-")
                kwargs.update(action="store_false", default=True)
            else:
                kwargs.update(action="store_true", default=False)
        else:
            kwargs["default"] = default
            kwargs["type"] = meta.get("parse") or (base if base in (int, float, str) else str)
            if meta.get("choices") is not None:
                kwargs["choices"] = list(meta["choices"])
            if meta.get("metavar"):
                kwargs["metavar"] = meta["metavar"]
            if meta.get("nargs"):
                kwargs["nargs"] = meta["nargs"]
            if meta.get("required"):
                kwargs["required"] = True
            if default is not None and not meta.get("required") and "%(default)" not in help_text:
                kwargs["help"] = (help_text + " " if help_text else "") + "(default: %(default)s)"
        target.add_argument(flag, **kwargs)


def from_args(cls: type, args: argparse.Namespace, **overrides: Any) -> Any:
    """An instance of ``cls`` from the parsed flags (fields without a flag keep their defaults)."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if f.init and hasattr(args, f.name)}
    values.update(overrides)
    return cls(**values)
