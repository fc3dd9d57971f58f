"""Our own errors: each ends a run with one line that says what is wrong and
how to fix it, never a traceback.

Beam hands a worker's exception to the launcher as text (the local runner's
workers are other processes; Dataflow's other machines), so the type would be
lost. While a local run executes, the launcher names a folder in
NOTES_ENV; an error of ours constructed in any process of the run notes its
type and message there, and the launcher recognises it by that type
(`noted_errors`), not by parsing Beam's message. Worker code never catches one
of these to go on, so a note always belongs to the failure that ended the run.
"""
from __future__ import annotations

import json
import os
import uuid

NOTES_ENV = "TFRECORDS_ERROR_NOTES"


class ConversionError(Exception):
    """Base of the errors that end a run with their message."""

    def __init__(self, *args):
        super().__init__(*args)
        folder = os.environ.get(NOTES_ENV)
        if folder:
            _note(folder, type(self).__name__, str(self))


class UsageError(ValueError):
    """A bad option value or a bad combination, found before anything runs; the
    message names the value and what is allowed (the command exits 2)."""


class RunError(ConversionError, RuntimeError):
    """A run that failed for a reason not of ours (a full disk, a worker that
    crashed, a runner's error): the message is the command's one line, the
    original exception is the __cause__."""


class OutputError(ConversionError, ValueError):
    """An output folder that cannot be read as a converted dataset: no
    manifest.json (a run that did not finish, or not a dataset), or a
    malformed one."""


class VerificationError(ConversionError):
    """An output that does not match its manifest: `problems` lists each
    mismatch (shard, byte offset, what differs)."""

    def __init__(self, message: str, problems: tuple = ()):
        super().__init__(message)
        self.problems = tuple(problems)


def _note(folder: str, kind: str, message: str) -> None:
    path = os.path.join(folder, f"error-{os.getpid()}-{uuid.uuid4().hex[:8]}.json")
    try:
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"type": kind, "message": message}, f)
        os.replace(path + ".tmp", path)
    except OSError:
        pass  # the launcher then describes Beam's error text instead


def _known() -> dict:
    def walk(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from walk(sub)
    return {c.__name__: c for c in walk(ConversionError)}


def noted_errors(folder: str) -> list:
    """The errors of ours noted during a run, as instances of their types, in
    the order they were noted (the first is the cause)."""
    notes = []
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    for name in names:
        if name.startswith("error-") and name.endswith(".json"):
            path = os.path.join(folder, name)
            try:
                with open(path, encoding="utf-8") as f:
                    notes.append((os.stat(path).st_mtime_ns, json.load(f)))
            except (OSError, ValueError):
                continue
    known = _known()
    out = []
    for _, n in sorted(notes, key=lambda t: t[0]):
        cls = known.get(n.get("type"))
        if cls is not None:
            e = Exception.__new__(cls)
            Exception.__init__(e, n.get("message", ""))
            out.append(e)
    return out


def own_error(e: BaseException):
    """The error of ours that `e` is or was caused by (same process), or None."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, ConversionError):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None
