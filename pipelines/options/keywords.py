"""The Python API's keywords are the options of table.py (and Beam's own
options, such as runner or direct_num_workers, which go to Beam). A keyword
is taken as the option's kind says, straight into the run's Values, never
turned into flag text and parsed again:

- an on/off option takes True or False;
- a number option takes an int (a float option also a float); a string of
  plain digits (`.` and `e` for a float) is taken too; anything else is a
  UsageError ("invalid int value", as the command line says it);
- a choice takes one of its words, in any case;
- a text option takes text, a path object, a list or tuple (joined with
  commas: '*.jpg,*.png') or a dict (NAME=VALUE pairs: 'train=0.8,validation=0.2');
  a number becomes its text (num_shards=4).
None leaves an option at its default. A name no option has is a TypeError
naming the nearest one; a value of the wrong kind a TypeError, a value
outside an option's choices or grammar a UsageError, both spelled as the
caller wrote them (name=value).
"""
from __future__ import annotations

import difflib
import inspect
import math
import os
import re
from typing import Iterable

from tfrecord_pipelines.options import table
from tfrecord_pipelines.transforms.core.errors import UsageError

INT_TEXT = re.compile(r"[+-]?[0-9]+")
FLOAT_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def split_keywords(func: str, kwargs: dict, beam_names: Iterable[str]) -> tuple:
    """(Values of our options, {name: value} of Beam's own) for `kwargs`;
    TypeError for a keyword nobody declares, with the nearest name."""
    beams = set(beam_names)
    ours: dict = {}
    theirs: dict = {}
    for name, value in kwargs.items():
        option = table.BY_NAME.get(name)
        if option is not None:
            if value is not None:
                ours[name] = take(func, option, value)
        elif name in beams:
            if value is not None:
                theirs[name] = value
        else:
            raise TypeError(f"{func}() got an unexpected keyword argument {name!r}"
                            f"{nearest(name, table.BY_NAME, beams)}")
    return table.Values(**ours, given=frozenset(ours)), theirs


def take(func: str, option: table.Option, value):
    """`value` as option's kind takes it from Python (the module's docstring)."""
    name = option.name
    if option.kind == table.FLAG:
        if not isinstance(value, bool):
            raise TypeError(f"{func}(): {name}= takes True or False, not {value!r}")
        return value
    if option.kind in (table.INT, table.FLOAT):
        return _number(func, option, value)
    if option.kind == table.LOWER:
        if not isinstance(value, str):
            raise TypeError(f"{func}(): {name}= takes one of {', '.join(option.choices)}, not {value!r}")
        if value.lower() not in option.choices:
            choices = ", ".join(repr(c) for c in option.choices)
            raise UsageError(f"{name}={value!r}: invalid choice: {value.lower()!r} (choose from {choices})")
        return value.lower()
    text_ = text(value)
    if option.choices and text_ not in option.choices:
        choices = ", ".join(repr(c) for c in option.choices)
        raise UsageError(f"{name}={value!r}: invalid choice: {text_!r} (choose from {choices})")
    return text_


def _number(func: str, option: table.Option, value):
    name, is_int = option.name, option.kind == table.INT
    invalid = f"{name}={value!r}: invalid {'int' if is_int else 'float'} value: {str(value)!r}"
    if isinstance(value, bool):
        raise UsageError(invalid)
    if isinstance(value, str):
        grammar = INT_TEXT if is_int else FLOAT_TEXT
        if not grammar.fullmatch(value):
            kind = "an integer" if is_int else "a number"
            raise UsageError(f"{name}={value!r} is not {kind} (plain digits{'' if is_int else ', . and e'})")
        return int(value) if is_int else float(value)
    if is_int and isinstance(value, int):
        return int(value)
    if not is_int and isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise UsageError(f"{name}={value!r} is not a finite number")
        return float(value)
    raise UsageError(invalid)


def text(value) -> str:
    """A Python value as an option's text (the module's docstring says how)."""
    if isinstance(value, dict):
        return ",".join(f"{k}={text(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value) if isinstance(value, (set, frozenset)) else value
        return ",".join(text(v) for v in items)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def nearest(name: str, ours, beams=()) -> str:
    """The hint for a misspelled keyword: the declared name nearest it (ours
    first, then Beam's, which need a closer match) as "; did you mean 'x'?",
    or the empty string."""
    fixed = name.replace("-", "_").lower()
    if fixed != name and (fixed in ours or fixed in beams):
        return f"; did you mean {fixed!r}?"
    best = (difflib.get_close_matches(fixed, list(ours), n=1, cutoff=0.6)
            or difflib.get_close_matches(fixed, list(beams), n=1, cutoff=0.75))
    return f"; did you mean {best[0]!r}?" if best else ""


_FLAG_IN_TEXT = re.compile(r"--([a-z][a-z0-9_]*)(?: ('[^']*'|\"[^\"]*\"|[+-]?[0-9][0-9.]*))?")


def as_keywords(message: str) -> str:
    """A usage message in the caller's spelling: `--allow_empty` becomes
    `allow_empty=True`, `--num_shards 0` `num_shards=0`, `--output` `output=`
    (options of the table only; Beam's and unknown names are left alone)."""
    def one(m: re.Match) -> str:
        option = table.BY_FLAG.get(m.group(1))
        if option is None:
            return m.group(0)
        if option.kind == table.FLAG:
            return f"{option.name}=True" + (f" {m.group(2)}" if m.group(2) else "")
        return f"{option.name}={m.group(2) or ''}"
    return _FLAG_IN_TEXT.sub(one, message)


def signature(fixed: Iterable[inspect.Parameter] = ()) -> inspect.Signature:
    """A signature listing `fixed` and then every option as a keyword with its
    default, for help() and a notebook's completion."""
    params = list(fixed)
    seen = {p.name for p in params}
    for o in sorted(table.OPTIONS, key=lambda o: o.name):
        if o.name not in seen:
            params.append(inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default))
    params.append(inspect.Parameter("beam_options", inspect.Parameter.VAR_KEYWORD))
    return inspect.Signature(params)


def help_text() -> str:
    """Every keyword with its help and default, from the declarations."""
    lines = []
    for o in sorted(table.OPTIONS, key=lambda o: o.name):
        default = "" if o.default in ("", None, False) else f" (default: {o.default!r})"
        choices = f" One of {', '.join(map(str, o.choices))}." if o.choices else ""
        lines.append(f"    {o.name}: {o.help}{choices}{default}")
    return "\n".join(lines)
