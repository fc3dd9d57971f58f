"""The Python API's keywords are the command's flags: each keyword is the
`dest` of a flag that pipelines/options.py declares (or of one of Beam's own
options, such as runner or direct_num_workers), read from the same argparse
actions the command parses. A keyword becomes the flag's text and goes through
the command's own checks (tfrecord_pipelines.options.check_flags), so a value
is held to the same types, choices and grammar either way.

Python values become flag text by one rule: None leaves the flag at its
default; True/False turn an on/off flag on or leave it off; a list or tuple is
joined with commas ('*.jpg,*.png'); a dict becomes NAME=VALUE pairs
('train=0.8,validation=0.2'); a path object its path; anything else str().
"""
from __future__ import annotations

import argparse
import difflib
import functools
import inspect
import os
from typing import Iterable


@functools.lru_cache(maxsize=1)
def our_actions() -> dict:
    """{keyword: argparse action} of every flag options.py declares."""
    from tfrecord_pipelines.options import help_parser
    return {a.dest: a for a in help_parser("tfrecords convert")._actions if a.option_strings and a.dest != "help"}


@functools.lru_cache(maxsize=1)
def beam_actions() -> dict:
    """{keyword: argparse action} of Beam's own options, as Beam collects them."""
    from tfrecord_pipelines.options import _all_options_parser
    ours = our_actions()
    out = {}
    for a in _all_options_parser()._actions:
        if a.option_strings and a.dest not in ours and a.dest != "help":
            out.setdefault(a.dest, a)
    return out


def to_argv(func: str, kwargs: dict) -> list:
    """The command-line flags for `kwargs`; TypeError for a keyword that no
    flag declares (with the nearest name) or a value of an impossible type."""
    ours, beams = our_actions(), beam_actions()
    argv: list = []
    for name, value in kwargs.items():
        action = ours.get(name) or beams.get(name)
        if action is None:
            raise TypeError(f"{func}() got an unexpected keyword argument {name!r}{nearest(name, ours, beams)}")
        argv += _flag(func, name, action, value)
    return argv


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


def _flag(func: str, name: str, action: argparse.Action, value) -> list:
    flag = next((s for s in action.option_strings if s.startswith("--")), action.option_strings[0])
    if value is None:
        return []
    if action.nargs == 0:  # an on/off flag (store_true / store_false / store_const)
        if not isinstance(value, bool):
            raise TypeError(f"{func}(): {name}= takes True or False, not {value!r}")
        return [flag] if value != bool(action.default) else []
    if isinstance(action, argparse._AppendAction) and isinstance(value, (list, tuple)):
        return [f"{flag}={text(v)}" for v in value]
    return [f"{flag}={text(value)}"]


def text(value) -> str:
    """A Python value as flag text (the module's docstring says how)."""
    if isinstance(value, dict):
        return ",".join(f"{k}={text(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value) if isinstance(value, (set, frozenset)) else value
        return ",".join(text(v) for v in items)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def signature(fixed: Iterable[inspect.Parameter] = ()) -> inspect.Signature:
    """A signature listing `fixed` and then every flag as a keyword with its
    default, for help() and a notebook's completion."""
    params = list(fixed)
    seen = {p.name for p in params}
    for dest, a in sorted(our_actions().items()):
        if dest not in seen:
            params.append(inspect.Parameter(dest, inspect.Parameter.KEYWORD_ONLY, default=a.default))
    params.append(inspect.Parameter("beam_options", inspect.Parameter.VAR_KEYWORD))
    return inspect.Signature(params)


def help_text() -> str:
    """Every keyword with its help and default, from the declarations."""
    lines = []
    for dest, a in sorted(our_actions().items()):
        default = "" if a.default in ("", None, False) else f" (default: {a.default!r})"
        choices = f" One of {', '.join(map(str, a.choices))}." if a.choices else ""
        lines.append(f"    {dest}: {a.help}{choices}{default}")
    return "\n".join(lines)
