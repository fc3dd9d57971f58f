"""Beam's bundle tracebacks out of a run's stderr (the failure reaches the
caller as an exception and is reported once)."""
from __future__ import annotations

import contextlib
import sys


class TracebackFilter:
    """A stderr that drops the tracebacks Beam's in-process SDK worker prints
    for a failed bundle; everything else passes through."""

    def __init__(self, stream):
        self._stream = stream
        self._dropped = False

    def write(self, text: str) -> int:
        if text.startswith("Traceback (most recent call last):"):
            self._dropped = True
            return len(text)
        if self._dropped and text == "\n":  # print()'s line end after the dropped text
            self._dropped = False
            return len(text)
        self._dropped = False
        return self._stream.write(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def filtered_stderr(enabled: bool):
    """sys.stderr filtered while inside, the caller's stream back on leaving."""
    if not enabled:
        yield
        return
    real, sys.stderr = sys.stderr, TracebackFilter(sys.stderr)
    try:
        yield
    finally:
        sys.stderr = real
