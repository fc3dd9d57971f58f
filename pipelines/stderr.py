"""Where a run's stderr goes: the local workers' to /dev/null, and Beam's
bundle tracebacks out of ours. Kept free of Beam's import: this runs before
the workers' zygote starts, and an import of Beam here would delay the zygote
by a second (the zygote imports while the main process imports Beam)."""
from __future__ import annotations

import contextlib
import os
import sys


@contextlib.contextmanager
def workers_stderr_to_log(enabled: bool = True):
    """Processes started inside (the local workers) write their stderr to
    /dev/null instead of the terminal: Beam's SDK worker prints the traceback
    of every failed bundle there, and the run's failure is reported once, as
    one line, by the main process (--debug leaves stderr alone). This
    process's own Python-level stderr (the progress line, messages) still
    reaches the terminal."""
    if not enabled:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    # Discarded, not kept in a file: a run killed with SIGKILL would leave the file behind.
    fd = os.open(os.devnull, os.O_WRONLY)
    real = sys.stderr
    try:
        own_fd2 = real.fileno() == 2
    except (AttributeError, OSError, ValueError):  # already captured elsewhere (e.g. by pytest)
        own_fd2 = False
    if own_fd2:
        sys.stderr = open(os.dup(saved), "w", encoding=real.encoding, errors="backslashreplace", buffering=1)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        yield
    finally:
        sys.stderr.flush()
        if own_fd2:
            sys.stderr.close()
            sys.stderr = real
        os.dup2(saved, 2)
        os.close(saved)


class TracebackFilter:
    """A stderr that drops the tracebacks Beam's in-process SDK worker prints
    for a failed bundle (the failure reaches the caller as an exception and is
    reported once); everything else passes through."""

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
