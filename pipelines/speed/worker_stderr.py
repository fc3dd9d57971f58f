"""The local workers' stderr off the terminal: Beam's SDK worker prints the
traceback of every failed bundle there, and the run's failure is reported
once, as one line, by the main process. Kept free of Beam's import: this
runs before the zygote starts, which imports Beam while the main process
does (an import here would delay it by a second)."""
from __future__ import annotations

import contextlib
import os
import sys


@contextlib.contextmanager
def workers_stderr_off():
    """Processes started inside write their stderr to /dev/null instead of
    the terminal. This process's own Python-level stderr (the progress line,
    messages) still reaches the terminal; fd 2 is put back on leaving."""
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
